//! The small JSON files a sentence-transformers model directory carries
//! beside the transformer (`modules.json`, each module's `config.json`,
//! `sentence_bert_config.json`, `config_sentence_transformers.json`),
//! gathered into one object keyed by their paths in the directory. The
//! runtime reads pooling, normalisation, length and prompts from it
//! (`mllm_runtime::embeddings::st_config`); `convert` keeps it in the
//! `.mllm` file's config under `sentence_transformers`, so a converted
//! embedding model embeds as its directory did.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{ConvertError, Result};

/// The config key a `.mllm` file keeps the files under.
pub const CONFIG_KEY: &str = "sentence_transformers";

/// The files of `dir`, or `None` when it has no `modules.json` (not a
/// sentence-transformers model).
pub fn files(dir: &Path) -> Result<Option<Value>> {
    let Some(modules) = read(dir, "modules.json")? else {
        return Ok(None);
    };
    let mut out = Map::new();
    if let Some(list) = modules.as_array() {
        for m in list {
            let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
            // Module folders are plain names inside the directory.
            if sub.is_empty() || sub.contains("..") || sub.starts_with('/') {
                continue;
            }
            let rel = format!("{sub}/config.json");
            if let Some(v) = read(dir, &rel)? {
                out.insert(rel, v);
            }
        }
    }
    out.insert("modules.json".into(), modules);
    for name in [
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ] {
        if let Some(v) = read(dir, name)? {
            out.insert(name.into(), v);
        }
    }
    Ok(Some(Value::Object(out)))
}

fn read(dir: &Path, rel: &str) -> Result<Option<Value>> {
    let path = dir.join(rel);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| ConvertError::io(&path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ConvertError::Corrupt(format!("{}: not valid JSON: {e}", path.display())))
}
