//! What `convert` reads: a Hugging Face directory (safetensors, single or
//! sharded, or PyTorch `pytorch_model.bin`), a single `.safetensors` or
//! PyTorch file with `config.json` beside it, or a GGUF file. `SourceModel`
//! gives them one shape: a weight source under Hugging Face names plus the
//! files that make a model self-contained (config, generation config,
//! tokenizer, tokenizer config, chat template) and the source's identity
//! (files, sizes, a CRC of their headers).

use std::io::Read;
use std::path::{Path, PathBuf};

use mllm_backends::quant::QuantType;
use mllm_backends::weights::WeightSource;
use serde_json::{json, Value};

use super::types::StoredType;
use crate::error::{ConvertError, Result};
use crate::gguf::{hf_config, GgufFile, GgufWeights, VisionLanguage, VisionLanguageWeights};
use crate::pytorch::PytorchCheckpoint;
use crate::safetensors_dir::SafetensorsDir;
use crate::tokenizer::GgufVocab;

enum Weights {
    Safetensors(SafetensorsDir),
    Pytorch(PytorchCheckpoint),
    Gguf(GgufWeights),
    /// A text GGUF with its mmproj (`--mmproj`), under the VL model's names.
    GgufPair(VisionLanguageWeights),
}

pub struct SourceModel {
    /// `safetensors`, `pytorch` or `gguf`.
    pub format: &'static str,
    pub path: PathBuf,
    pub config: Value,
    pub generation_config: Option<Value>,
    pub tokenizer_json: Option<String>,
    pub tokenizer_config: Option<Value>,
    pub chat_template: Option<String>,
    /// `preprocessor_config.json` (image processing of vision models).
    pub preprocessor_config: Option<Value>,
    /// The files read and their sizes.
    pub files: Vec<(PathBuf, u64)>,
    /// CRC-32 of the files' headers (FORMAT.md, `source`).
    pub header_crc32: u32,
    weights: Weights,
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| ConvertError::Corrupt(format!("{}: not valid JSON: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConvertError::io(path, e)),
    }
}

fn file_size(p: &Path) -> Result<u64> {
    std::fs::metadata(p)
        .map(|m| m.len())
        .map_err(|e| ConvertError::io(p, e))
}

fn is_gguf(p: &Path) -> bool {
    let mut magic = [0u8; 4];
    p.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        || std::fs::File::open(p)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|_| &magic == b"GGUF")
}

/// The chat template a Hugging Face directory carries: `tokenizer_config.json`'s
/// `chat_template` (a string, or named templates of which "default" is
/// taken), else `chat_template.jinja`, else `chat_template.json`.
fn hf_chat_template(dir: &Path, tok_config: Option<&Value>) -> Result<Option<String>> {
    Ok(crate::chat_template::find_in_dir(dir, tok_config)?.map(|(s, _)| s))
}

/// The shards of a safetensors checkpoint, as `SafetensorsDir` finds them.
fn safetensors_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let index = path.join("model.safetensors.index.json");
    let Some(idx) = read_json(&index)? else {
        return Ok(vec![path.join("model.safetensors")]);
    };
    let mut files: Vec<PathBuf> = idx
        .get("weight_map")
        .and_then(Value::as_object)
        .map(|m| {
            m.values()
                .filter_map(Value::as_str)
                .map(|f| path.join(f))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.dedup();
    Ok(files)
}

/// A safetensors file's header: its 8-byte length and the JSON after it.
fn safetensors_header(p: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(p).map_err(|e| ConvertError::io(p, e))?;
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(|e| ConvertError::io(p, e))?;
    let len = u64::from_le_bytes(n).min(100 << 20);
    let mut h = n.to_vec();
    f.take(len)
        .read_to_end(&mut h)
        .map_err(|e| ConvertError::io(p, e))?;
    Ok(h)
}

impl SourceModel {
    /// `open`, with llama.cpp's mmproj file joined to a GGUF text model.
    pub fn open_with_mmproj(src: &Path, mmproj: Option<&Path>) -> Result<SourceModel> {
        let Some(mm) = mmproj else {
            return Self::open(src);
        };
        if !(src.is_file() && is_gguf(src)) {
            return Err(ConvertError::Unsupported(format!(
                "--mmproj goes with a GGUF text model; {} is not one (a Hugging Face directory holds its vision tower itself)",
                src.display()
            )));
        }
        Self::open_gguf(src, Some(mm))
    }

    pub fn open(src: &Path) -> Result<SourceModel> {
        if !src.exists() {
            return Err(ConvertError::NotFound(format!(
                "{} does not exist",
                src.display()
            )));
        }
        if src.is_file() && is_gguf(src) {
            return Self::open_gguf(src, None);
        }
        let dir = if src.is_dir() {
            src.to_path_buf()
        } else {
            src.parent().unwrap_or(Path::new(".")).to_path_buf()
        };
        let is_st = if src.is_dir() {
            dir.join("model.safetensors").is_file()
                || dir.join("model.safetensors.index.json").is_file()
        } else {
            src.extension().is_some_and(|e| e == "safetensors")
        };
        let is_pt = dir.join("pytorch_model.bin").is_file()
            || dir.join("pytorch_model.bin.index.json").is_file();
        if src.is_dir() && !is_st && !is_pt {
            return Err(ConvertError::NotFound(format!(
                "{} has no model.safetensors, pytorch_model.bin or a sharded index of either",
                src.display()
            )));
        }
        let config_path = dir.join("config.json");
        let config = read_json(&config_path)?.ok_or_else(|| {
            ConvertError::NotFound(format!(
                "{}: no config.json beside the weights; a .mllm file embeds the model's config",
                dir.display()
            ))
        })?;
        if !config.is_object() {
            return Err(ConvertError::Corrupt(format!(
                "{}: expected a JSON object",
                config_path.display()
            )));
        }
        let (format, weights, files, header_crc32) = if is_st {
            let w = SafetensorsDir::open(src)?;
            let mut crc = crc32fast::Hasher::new();
            let mut files = vec![];
            for f in safetensors_files(src)? {
                crc.update(&safetensors_header(&f)?);
                files.push((f.clone(), file_size(&f)?));
            }
            (
                "safetensors",
                Weights::Safetensors(w),
                files,
                crc.finalize(),
            )
        } else {
            let w = PytorchCheckpoint::open(src)?;
            let (files, crc) = (w.files(), w.pickle_crc32());
            ("pytorch", Weights::Pytorch(w), files, crc)
        };
        let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer_json = if tok_path.is_file() {
            Some(std::fs::read_to_string(&tok_path).map_err(|e| ConvertError::io(&tok_path, e))?)
        } else {
            None
        };
        let mut config = config;
        if let (Some(st), Some(c)) = (
            crate::sentence_transformers::files(&dir)?,
            config.as_object_mut(),
        ) {
            c.insert(crate::sentence_transformers::CONFIG_KEY.into(), st);
        }
        Ok(SourceModel {
            format,
            path: src.to_path_buf(),
            config,
            generation_config: read_json(&dir.join("generation_config.json"))?,
            tokenizer_json,
            chat_template: hf_chat_template(&dir, tok_config.as_ref())?,
            tokenizer_config: tok_config,
            preprocessor_config: crate::image_preprocess::image_processor_settings(&dir)?,
            files,
            header_crc32,
            weights,
        })
    }

    fn open_gguf(src: &Path, mmproj: Option<&Path>) -> Result<SourceModel> {
        let g = GgufFile::open(src)?;
        let config = hf_config(&g)?;
        let (tokenizer_json, tokenizer_config) = if g.meta("tokenizer.ggml.tokens").is_some() {
            let v = GgufVocab::from_gguf(&g)?;
            let doc = v.to_tokenizer_json()?;
            let name = |id: Option<u32>| id.and_then(|i| v.tokens.get(i as usize)).cloned();
            // The special token strings a chat template refers to; the
            // tokenizer.json above already carries the post-processor.
            let mut tc = serde_json::Map::new();
            for (key, id) in [
                ("bos_token", v.bos),
                ("eos_token", v.eos),
                ("unk_token", v.unk),
                ("pad_token", v.pad),
            ] {
                if let Some(t) = name(id) {
                    tc.insert(key.into(), json!(t));
                }
            }
            (Some(doc.to_string()), Some(Value::Object(tc)))
        } else {
            (None, None)
        };
        let chat_template = g
            .meta("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let b = g.owner();
        let header = &b.bytes()[..g.data_start().min(b.bytes().len())];
        let mut crc = crc32fast::Hasher::new();
        crc.update(header);
        let mut files = vec![(src.to_path_buf(), file_size(src)?)];
        let text = GgufWeights::new(g)?;
        let (config, preprocessor_config, weights) = match mmproj {
            None => (config, None, Weights::Gguf(text)),
            Some(mm) => {
                let mf = GgufFile::open(mm)?;
                let b = mf.owner();
                crc.update(&b.bytes()[..mf.data_start().min(b.bytes().len())]);
                files.push((mm.to_path_buf(), file_size(mm)?));
                let vl = VisionLanguage::pair(text, config, mf)?;
                (
                    vl.config,
                    Some(vl.preprocessor_config),
                    Weights::GgufPair(vl.weights),
                )
            }
        };
        Ok(SourceModel {
            format: "gguf",
            path: src.to_path_buf(),
            config,
            generation_config: None,
            tokenizer_json,
            tokenizer_config,
            chat_template,
            preprocessor_config,
            files,
            header_crc32: crc.finalize(),
            weights,
        })
    }

    pub fn weights(&self) -> &(dyn WeightSource + Sync) {
        match &self.weights {
            Weights::Safetensors(w) => w,
            Weights::Pytorch(w) => w,
            Weights::Gguf(w) => w,
            Weights::GgufPair(w) => w,
        }
    }

    /// How a tensor is stored in the source: its dtype, or for a GGUF block
    /// tensor its block type (which `raw_blocks` can copy unchanged).
    pub fn source_type(&self, name: &str) -> Option<StoredType> {
        if let Some(q) = self.gguf_block_type(name) {
            return Some(StoredType::Quant(q));
        }
        self.weights().info(name).map(|i| StoredType::from(i.dtype))
    }

    fn gguf_block_type(&self, name: &str) -> Option<QuantType> {
        match &self.weights {
            Weights::Gguf(w) => w.block_type(name),
            Weights::GgufPair(w) => w.block_type(name),
            _ => None,
        }
    }

    /// The blocks of a GGUF block tensor in Hugging Face row order (rows
    /// llama.cpp moved put back, as `GgufWeights::load` does for values).
    pub fn raw_blocks(&self, name: &str) -> Option<Vec<u8>> {
        match &self.weights {
            Weights::Gguf(w) => w.blocks(name),
            Weights::GgufPair(w) => w.blocks(name),
            _ => None,
        }
    }

    /// The metadata object of FORMAT.md, less the recipe.
    pub fn metadata(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("config".into(), self.config.clone());
        let opt = [
            ("generation_config", self.generation_config.clone()),
            (
                "tokenizer_json",
                self.tokenizer_json.clone().map(Value::String),
            ),
            ("tokenizer_config", self.tokenizer_config.clone()),
            (
                "chat_template",
                self.chat_template.clone().map(Value::String),
            ),
            ("preprocessor_config", self.preprocessor_config.clone()),
        ];
        for (k, v) in opt {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        }
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|(p, n)| {
                let name = p
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                json!({"name": name, "bytes": n})
            })
            .collect();
        m.insert(
            "source".into(),
            json!({
                "format": self.format,
                "path": self.path.display().to_string(),
                "files": files,
                "header_crc32": format!("{:08x}", self.header_crc32),
            }),
        );
        m.insert(
            "writer".into(),
            json!({"name": "mllm-converter", "version": env!("CARGO_PKG_VERSION")}),
        );
        Value::Object(m)
    }
}
