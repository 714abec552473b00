//! `hf_config`: a Hugging Face config.json-style object from GGUF metadata,
//! generic over the architecture prefix (`{arch}.block_count`, ...), so the
//! interpreter can configure a model script from a GGUF file alone. What
//! one family adds (experts, NoPE layers, sliding windows) is in its file
//! under family/.

use serde_json::{json, Map, Value};

use super::family::{self, Meta};
use super::{GgufFile, MetaValue};
use crate::error::{ConvertError, Result};

impl Meta for GgufFile {
    fn arch_key(&self, key: &str) -> Option<&MetaValue> {
        self.arch_meta(key)
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.tensor_info(name).is_some()
    }

    fn label(&self) -> String {
        self.path().display().to_string()
    }

    fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.tensor_info(name).map(|t| t.shape.clone())
    }
}

/// A number as JSON. GGUF stores floats like `rms_norm_eps` as f32; they are
/// written as the shortest decimal that reads back as that f32 (1e-5, not
/// 9.999999747378752e-6), which is what the model's config.json said.
pub(super) fn number(v: &MetaValue) -> Option<Value> {
    Some(match *v {
        MetaValue::F32(f) => json!(format!("{f}").parse::<f64>().ok()?),
        MetaValue::F64(f) => json!(f),
        _ => match v.as_u64() {
            Some(u) => json!(u),
            None => json!(v.as_i64()?),
        },
    })
}

pub fn hf_config(g: &GgufFile) -> Result<Value> {
    let path = g.path().display();
    let arch = g.architecture().ok_or_else(|| {
        ConvertError::Corrupt(format!("{path}: no general.architecture metadata"))
    })?;
    let fam = family::family(arch).ok_or_else(|| {
        let known: Vec<&str> = family::known().collect();
        ConvertError::Unsupported(format!(
            "{path}: architecture `{arch}` is not supported (known: {})",
            known.join(", ")
        ))
    })?;
    let (class, model_type) = (fam.class, fam.model_type);

    let mut c = Map::new();
    c.insert("architectures".into(), json!([class]));
    c.insert("model_type".into(), json!(model_type));

    // (HF key, GGUF key under `{arch}.`, required)
    let fields: &[(&str, &str, bool)] = &[
        ("hidden_size", "embedding_length", true),
        ("intermediate_size", "feed_forward_length", true),
        ("num_hidden_layers", "block_count", true),
        ("num_attention_heads", "attention.head_count", true),
        ("num_key_value_heads", "attention.head_count_kv", false),
        ("head_dim", "attention.key_length", false),
        ("rms_norm_eps", "attention.layer_norm_rms_epsilon", false),
        ("rope_theta", "rope.freq_base", false),
        ("max_position_embeddings", "context_length", false),
    ];
    for &(hf, key, required) in fields {
        match g.arch_meta(key) {
            Some(v) => {
                let n = number(v).ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{path}: {arch}.{key} should be a number, found a {}",
                        v.type_name()
                    ))
                })?;
                c.insert(hf.into(), n);
            }
            None if required && !(hf == "intermediate_size" && fam.sparse_only) => {
                return Err(ConvertError::Corrupt(format!(
                    "{path}: metadata {arch}.{key} (the model's {hf}) is missing"
                )))
            }
            None => {}
        }
    }
    // Multi-token-prediction layers (llama.cpp's `nextn`) follow the
    // decoder's blocks and count in `block_count`: the decoder is the rest,
    // and the script runs them as its `mtp` head (names.rs `mtp_name`).
    if let Some(k) = nextn_layers(g)? {
        let blocks = c
            .get("num_hidden_layers")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if k >= blocks {
            return Err(ConvertError::Corrupt(format!(
                "{path}: {arch}.nextn_predict_layers is {k}, not fewer than the {blocks} blocks (block_count)"
            )));
        }
        c.insert("num_hidden_layers".into(), json!(blocks - k));
        c.insert("mtp_num_hidden_layers".into(), json!(k));
    }
    if !c.contains_key("num_key_value_heads") {
        if let Some(heads) = c.get("num_attention_heads").cloned() {
            c.insert("num_key_value_heads".into(), heads);
        }
    }
    if !c.contains_key("rope_theta") {
        c.insert("rope_theta".into(), json!(10000.0));
    }

    // The embedding's rows are what the weights need; the token list and
    // `{arch}.vocab_size` stand in when it is absent.
    let vocab = g
        .tensor_info("token_embd.weight")
        .and_then(|t| t.shape.first().copied().map(|n| n as u64))
        .or_else(|| {
            g.meta("tokenizer.ggml.tokens")
                .and_then(MetaValue::as_array)
                .map(|a| a.len() as u64)
        })
        .or_else(|| g.arch_meta("vocab_size").and_then(MetaValue::as_u64))
        .ok_or_else(|| {
            ConvertError::Corrupt(format!(
                "{path}: cannot tell the vocabulary size (no token_embd.weight, tokenizer.ggml.tokens or {arch}.vocab_size)"
            ))
        })?;
    c.insert("vocab_size".into(), json!(vocab));
    c.insert(
        "tie_word_embeddings".into(),
        json!(g.tensor_info("output.weight").is_none()),
    );
    for (hf, key) in [
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
    ] {
        if let Some(id) = g.meta(key).and_then(MetaValue::as_u64) {
            c.insert(hf.into(), json!(id));
        }
    }
    family::add_config(arch, g, &mut c)?;
    Ok(Value::Object(c))
}

/// `{arch}.nextn_predict_layers` where above 0: how many of the last blocks
/// are multi-token-prediction layers.
pub fn nextn_layers(g: &GgufFile) -> Result<Option<u64>> {
    match g.arch_meta("nextn_predict_layers") {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(0) => Ok(None),
            Some(k) => Ok(Some(k)),
            None => Err(ConvertError::Corrupt(format!(
                "{}: {}.nextn_predict_layers should be a number, found a {}",
                g.path().display(),
                g.architecture().unwrap_or(""),
                v.type_name()
            ))),
        },
    }
}
