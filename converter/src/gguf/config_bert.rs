//! The config of a llama.cpp `bert` GGUF (BERT-family embedders such as
//! all-MiniLM, BGE, E5): what `BertModel` needs beyond the common keys,
//! and the embedding settings the file states (`bert.pooling_type`) as the
//! sentence-transformers files the runtime reads (`sentence_transformers`
//! in the config, as `convert` writes for a directory).

use serde_json::{json, Map, Value};

use super::config::number;
use super::{GgufFile, MetaValue};
use crate::error::{ConvertError, Result};

pub(super) fn add(g: &GgufFile, c: &mut Map<String, Value>) -> Result<()> {
    let path = g.path().display().to_string();
    if let Some(v) = g.arch_meta("attention.layer_norm_epsilon") {
        let n = number(v).ok_or_else(|| {
            ConvertError::Corrupt(format!(
                "{path}: bert.attention.layer_norm_epsilon is not a number"
            ))
        })?;
        c.insert("layer_norm_eps".into(), n);
    }
    let types = g
        .tensor_info("token_types.weight")
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(2);
    c.insert("type_vocab_size".into(), json!(types));
    c.insert("hidden_act".into(), json!("gelu"));
    // llama.cpp's converter drops the pooler (models/bert.mdl declares it
    // only when the checkpoint has it).
    c.insert(
        "has_pooler".into(),
        json!(g.tensor_info("pooler.dense.weight").is_some()),
    );
    // llama.cpp's pooling types: 1 mean, 2 cls, 3 last.
    let mode = match g.arch_meta("pooling_type").and_then(MetaValue::as_u64) {
        Some(2) => "pooling_mode_cls_token",
        Some(3) => "pooling_mode_lasttoken",
        _ => "pooling_mode_mean_tokens",
    };
    // Normalised, as llama.cpp's embeddings are by default.
    c.insert(
        crate::sentence_transformers::CONFIG_KEY.into(),
        json!({
            "modules.json": [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ],
            "1_Pooling/config.json": {mode: true},
        }),
    );
    Ok(())
}
