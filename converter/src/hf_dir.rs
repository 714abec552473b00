//! A Hugging Face model directory: config.json plus safetensors weights.

use std::path::{Path, PathBuf};

use crate::error::{ConvertError, Result};
use crate::safetensors_dir::SafetensorsDir;
use mllm_backends::weights::WeightSource;

pub struct HfModelDir {
    pub dir: PathBuf,
    pub config_path: PathBuf,
    pub config: serde_json::Value,
    pub weights: SafetensorsDir,
}

impl HfModelDir {
    pub fn open(dir: &Path) -> Result<HfModelDir> {
        if !dir.is_dir() {
            return Err(ConvertError::NotFound(format!(
                "{} is not a directory; --model takes a Hugging Face model directory (config.json + *.safetensors)",
                dir.display()
            )));
        }
        let config_path = dir.join("config.json");
        let text =
            std::fs::read_to_string(&config_path).map_err(|e| ConvertError::io(&config_path, e))?;
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ConvertError::Corrupt(format!("{}: not valid JSON: {e}", config_path.display()))
        })?;
        if !config.is_object() {
            return Err(ConvertError::Corrupt(format!(
                "{}: expected a JSON object",
                config_path.display()
            )));
        }
        let mut config = config;
        let weights = SafetensorsDir::open(dir)?;
        base_model_layout(&mut config, &weights);
        Ok(HfModelDir {
            dir: dir.to_path_buf(),
            config_path,
            config,
            weights,
        })
    }
}

/// A checkpoint saved from the base model (`Qwen3Model`: tensors named
/// `embed_tokens.weight`, `layers.N.*`, no `model.` prefix and no head)
/// whose config.json still names the causal LM, as the published
/// Qwen3-Embedding checkpoints are (QwenLM/Qwen3-Embedding#1): the config is
/// made to name the base model (`Qwen3Model`), which is what transformers'
/// AutoModel loads from them, so the script's module of that name is run.
fn base_model_layout(config: &mut serde_json::Value, weights: &dyn WeightSource) {
    let Some(arch) = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str())
    else {
        return;
    };
    let Some(base) = arch.strip_suffix("ForCausalLM") else {
        return;
    };
    if weights.info("embed_tokens.weight").is_none()
        || weights.info("model.embed_tokens.weight").is_some()
    {
        return;
    }
    let base = format!("{base}Model");
    if let Some(list) = config
        .get_mut("architectures")
        .and_then(|a| a.as_array_mut())
    {
        list[0] = serde_json::Value::String(base);
    }
}
