//! Each kind of `--model`: a Hugging Face directory, a tokenizer-only
//! directory, a GGUF file (with llama.cpp's mmproj beside it) and a `.mllm`
//! file, each read into `ModelFiles`.

use std::path::{Path, PathBuf};

use mllm_backends::weights::WeightSource;
use mllm_converter::chat_template::ChatTemplate;
use mllm_converter::gguf::{GgufFile, GgufWeights, VisionLanguage};
use mllm_converter::tokenizer::{GgufVocab, Tokenizer};
use mllm_converter::{HfModelDir, SafetensorsDir};
use serde_json::Value as Json;

use super::{LoadOptions, ModelFiles};
use crate::weight_check::WeightCheck;
use crate::{Error, Result};

fn cpu() -> mllm_backends::SharedBackend {
    std::sync::Arc::new(mllm_backends::CpuBackend)
}

fn ids_of(v: Option<&Json>) -> Vec<u32> {
    match v {
        Some(Json::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Json::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as u32)
            .collect(),
        _ => vec![],
    }
}

/// Adds the tokenizer's end-of-sequence ids to those the configs named.
fn add_tokenizer_eos(eos: &mut Vec<u32>, tokenizer: Option<&Tokenizer>) {
    for &e in tokenizer.map_or(&[][..], |t| t.eos_ids()) {
        if !eos.contains(&e) {
            eos.push(e);
        }
    }
}

fn read_json(path: &Path) -> Result<Option<Json>> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| Error::load(format!("{}: not valid JSON: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::load(format!("{}: {e}", path.display()))),
    }
}

/// The chat template of a Hugging Face directory: `tokenizer_config.json`'s
/// `chat_template` (with the special tokens that file names), else
/// `chat_template.jinja` (newer transformers) with the tokenizer's tokens.
fn hf_chat_template(
    dir: &Path,
    tok_config: Option<&Json>,
    tok: Option<&Tokenizer>,
) -> Result<Option<ChatTemplate>> {
    let Some((source, file)) = mllm_converter::chat_template::find_in_dir(dir, tok_config)? else {
        return Ok(None);
    };
    if file
        .file_name()
        .is_some_and(|n| n == "tokenizer_config.json")
    {
        // Also takes the special token strings the config names.
        return Ok(Some(ChatTemplate::from_tokenizer_config(&file)?));
    }
    let mut t = ChatTemplate::new(&source, &file.display().to_string())?;
    if let Some(tok) = tok {
        t = t.with_tokenizer(tok);
    }
    Ok(Some(t))
}

/// A tokenizer package: `tokenizer.json` (and `tokenizer_config.json` with
/// the chat template) without a config or weights. `tokenize` and
/// `template` work with it; loading a model says what is missing.
pub(super) fn open_tokenizer_dir(dir: &Path) -> Result<ModelFiles> {
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
    let chat_template = hf_chat_template(dir, tok_config.as_ref(), Some(&tokenizer))?;
    let gen = read_json(&dir.join("generation_config.json"))?;
    let mut eos = ids_of(gen.as_ref().and_then(|g| g.get("eos_token_id")));
    add_tokenizer_eos(&mut eos, Some(&tokenizer));
    Ok(ModelFiles {
        path: dir.to_path_buf(),
        config: Json::Object(Default::default()),
        config_origin: format!(
            "{} (a tokenizer-only directory: no config.json)",
            dir.display()
        ),
        weights: Box::new(NoWeights(dir.to_path_buf())),
        tokenizer: Some(std::sync::Arc::new(tokenizer)),
        chat_template,
        eos,
        preprocessor_config: None,
        video_preprocessor_config: None,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

/// The weights of a tokenizer-only directory: none.
struct NoWeights(PathBuf);

impl WeightSource for NoWeights {
    fn describe(&self) -> String {
        format!("{} (tokenizer files only, no weights)", self.0.display())
    }
    fn names(&self) -> Vec<String> {
        vec![]
    }
    fn info(&self, _name: &str) -> Option<mllm_backends::weights::TensorInfo> {
        None
    }
    fn load(&self, name: &str) -> std::result::Result<mllm_backends::Tensor, String> {
        Err(format!(
            "{} holds only a tokenizer, not `{name}`: a model needs config.json and *.safetensors (or a GGUF/.mllm file)",
            self.0.display()
        ))
    }
}

pub(super) fn open_hf(dir: &Path, skip_tokenizer: bool) -> Result<ModelFiles> {
    let hf = HfModelDir::open(dir)?;
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = if tok_path.is_file() && !skip_tokenizer {
        Some(Tokenizer::from_file(&tok_path)?)
    } else {
        None
    };
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
    let chat_template = hf_chat_template(dir, tok_config.as_ref(), tokenizer.as_ref())?;
    let gen = read_json(&dir.join("generation_config.json"))?;
    let mut eos = ids_of(gen.as_ref().and_then(|g| g.get("eos_token_id")));
    if eos.is_empty() {
        eos = ids_of(hf.config.get("eos_token_id"));
    }
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    let HfModelDir {
        config,
        config_path,
        weights,
        ..
    } = hf;
    let weights: Box<SafetensorsDir> = Box::new(weights);
    Ok(ModelFiles {
        path: dir.to_path_buf(),
        config,
        config_origin: config_path.display().to_string(),
        weights,
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config: mllm_converter::image_preprocess::image_processor_settings(dir)?,
        video_preprocessor_config: read_json(&dir.join("video_preprocessor_config.json"))?,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

pub(super) fn open_gguf(
    path: &Path,
    mmproj: Option<&str>,
    opts: LoadOptions,
) -> Result<ModelFiles> {
    let g = GgufFile::open(path)?;
    if g.architecture() == Some("clip") {
        return Err(Error::load(format!("{} is an mmproj file (a vision tower, `clip`): pass it with --mmproj, and the text model's GGUF with --model",
            path.display()
        )));
    }
    let config = mllm_converter::gguf::hf_config(&g)?;
    let tokenizer = if opts.skip_tokenizer {
        None
    } else {
        match GgufVocab::from_gguf(&g) {
            Ok(v) => Some(Tokenizer::from_gguf_vocab(&v)?),
            Err(_) if g.meta("tokenizer.ggml.tokens").is_none() => None,
            Err(e) => return Err(e.into()),
        }
    };
    crate::memory::return_freed_heap();
    let chat_template = match (
        g.meta("tokenizer.chat_template").and_then(|v| v.as_str()),
        &tokenizer,
    ) {
        (Some(source), Some(tok)) => Some(
            ChatTemplate::new(source, &format!("the chat template in {}", path.display()))?
                .with_tokenizer(tok),
        ),
        (Some(source), None) => Some(ChatTemplate::new(
            source,
            &format!("the chat template in {}", path.display()),
        )?),
        (None, _) => None,
    };
    let mut eos = ids_of(config.get("eos_token_id"));
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    let mut text = GgufWeights::new(g)?;
    text.set_dequantize(opts.dequantize);
    let origin = format!("the metadata of {}", path.display());
    let (config, config_origin, weights, preprocessor_config): (_, _, Box<dyn WeightSource>, _) =
        match mmproj {
            None => (config, origin, Box::new(text), None),
            Some(mm) => {
                let mut vl = VisionLanguage::pair(text, config, GgufFile::open(Path::new(mm))?)?;
                vl.weights.set_dequantize(opts.dequantize);
                let origin = format!("{origin} and its mmproj {mm}");
                (
                    vl.config,
                    origin,
                    Box::new(vl.weights),
                    Some(vl.preprocessor_config),
                )
            }
        };
    Ok(ModelFiles {
        path: path.to_path_buf(),
        config,
        config_origin,
        weights,
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config,
        video_preprocessor_config: None,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

/// A self-contained .mllm file: config, tokenizer, template and EOS ids
/// come from its metadata; its tensor checksums are checked on a thread of
/// their own unless `no_verify` (`ModelFiles::weights_verified` waits).
pub(super) fn open_mllm(path: &Path, opts: LoadOptions) -> Result<ModelFiles> {
    let mut f = mllm_converter::mllm_format::MllmFile::open(path)?;
    let check = if opts.no_verify {
        WeightCheck::none()
    } else {
        WeightCheck::start(f.checksums())
    };
    f.set_dequantize(opts.dequantize);
    let origin = format!("the metadata of {}", path.display());
    let tokenizer = match f.tokenizer_json().filter(|_| !opts.skip_tokenizer) {
        Some(json) => Some(Tokenizer::from_json_str(json, &origin)?),
        None => None,
    };
    let chat_template = match f.chat_template() {
        Some(source) => {
            let mut t =
                ChatTemplate::new(source, &format!("the chat template in {}", path.display()))?;
            if let Some(tok) = &tokenizer {
                t = t.with_tokenizer(tok);
            }
            Some(t)
        }
        None => None,
    };
    let config = f.config().clone();
    let preprocessor_config = f.preprocessor_config().cloned();
    let mut eos = ids_of(f.generation_config().and_then(|g| g.get("eos_token_id")));
    if eos.is_empty() {
        eos = ids_of(config.get("eos_token_id"));
    }
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    Ok(ModelFiles {
        path: path.to_path_buf(),
        config,
        config_origin: origin,
        weights: Box::new(f),
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config,
        video_preprocessor_config: None,
        backend: cpu(),
        check,
        grammars: Default::default(),
    })
}
