//! A Hugging Face model directory: config.json plus safetensors weights.

use std::path::{Path, PathBuf};

use crate::error::{ConvertError, Result};
use crate::safetensors_dir::SafetensorsDir;

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
        let weights = SafetensorsDir::open(dir)?;
        Ok(HfModelDir {
            dir: dir.to_path_buf(),
            config_path,
            config,
            weights,
        })
    }
}
