//! The config of a llama.cpp `bert` GGUF (BERT-family embedders such as
//! all-MiniLM, BGE, E5): what `BertModel` needs beyond the common keys,
//! and the embedding settings the file states (`bert.pooling_type`) as the
//! sentence-transformers files the runtime reads (`sentence_transformers`
//! in the config, as `convert` writes for a directory).

use serde_json::json;

use super::{Family, Keys, Layout, Table, DECODER};
use crate::error::Result;
use crate::gguf::MetaValue;

pub(super) const BERT: Family = Family {
    arch: "bert",
    class: "BertModel",
    model_type: "bert",
    config: add,
    layout: Layout::Encoder,
    ..DECODER
};

/// llama.cpp's names (gguf-py's `MODEL_ARCH.BERT`) against transformers'
/// `BertModel`, whose blocks are `encoder.layer.N`. llama.cpp's converter
/// drops the pooler, which embedders do not use.
pub(crate) const GLOBAL: Table = &[
    ("token_embd", "embeddings.word_embeddings"),
    ("position_embd", "embeddings.position_embeddings"),
    ("token_types", "embeddings.token_type_embeddings"),
    ("token_embd_norm", "embeddings.LayerNorm"),
];

pub(crate) const BLOCK: Table = &[
    ("attn_q", "attention.self.query"),
    ("attn_k", "attention.self.key"),
    ("attn_v", "attention.self.value"),
    ("attn_output", "attention.output.dense"),
    ("attn_output_norm", "attention.output.LayerNorm"),
    ("ffn_up", "intermediate.dense"),
    ("ffn_down", "output.dense"),
    ("layer_output_norm", "output.LayerNorm"),
];

fn add(k: &mut Keys) -> Result<()> {
    if let Some(n) = k.number("attention.layer_norm_epsilon")? {
        k.c.insert("layer_norm_eps".into(), n);
    }
    let types =
        k.m.tensor_shape("token_types.weight")
            .and_then(|s| s.first().copied())
            .unwrap_or(2);
    let has_pooler = k.m.has_tensor("pooler.dense.weight");
    let pooling = k.m.arch_key("pooling_type").and_then(MetaValue::as_u64);
    let c = &mut *k.c;
    c.insert("type_vocab_size".into(), json!(types));
    c.insert("hidden_act".into(), json!("gelu"));
    // llama.cpp's converter drops the pooler (models/bert.mdl declares it
    // only when the checkpoint has it).
    c.insert("has_pooler".into(), json!(has_pooler));
    // llama.cpp's pooling types: 1 mean, 2 cls, 3 last.
    let mode = match pooling {
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
