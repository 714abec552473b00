//! Gemma 3 text (`gemma3`, models/gemma3.mdl): sliding windows, rope bases
//! and softcapping in the config; four norms per layer in the names
//! (llama.cpp's `ffn_norm` is the norm before the MLP as in Llama, where
//! transformers' Gemma has a norm after attention too and one after the
//! MLP); norm weights stored as 1 + w.

use serde_json::{json, Value};

use super::{Family, Keys, DECODER};
use crate::error::Result;
use crate::gguf::MetaValue;

pub(super) const GEMMA3: Family = Family {
    arch: "gemma3",
    class: "Gemma3ForCausalLM",
    model_type: "gemma3_text",
    config: |k| k.gemma3(),
    block_names: &[
        ("ffn_norm", "pre_feedforward_layernorm"),
        ("post_attention_norm", "post_attention_layernorm"),
        ("post_ffw_norm", "post_feedforward_layernorm"),
    ],
    norm_plus_one: true,
    ..DECODER
};

impl Keys<'_> {
    /// Gemma 3 (text). Sliding layers come from `attention.sliding_window_pattern`
    /// (a period, or one bool per layer), else llama.cpp's fixed period 6
    /// (its converter writes none); the local rope base defaults to 1e4 and
    /// the query scale to 1/sqrt(head_dim) (hidden/heads for the 62-layer
    /// 27B), as llama.cpp sets them; `query_pre_attn_scalar` is not stored.
    /// The norm weights llama.cpp stored as 1 + w are undone by the weights
    /// (`GgufWeights`), not here.
    fn gemma3(&mut self) -> Result<()> {
        let layers = self.config_u64("num_hidden_layers");
        let hidden = self.config_u64("hidden_size");
        let heads = self.config_u64("num_attention_heads").max(1);
        let head_dim = self.head_dim();
        let window = self.u64("attention.sliding_window")?.filter(|&w| w > 0);
        let period =
            |n: u64| -> Vec<bool> { (0..layers).map(|i| n == 0 || i % n < n - 1).collect() };
        let key = "attention.sliding_window_pattern";
        let sliding: Vec<bool> = match (window, self.m.arch_key(key)) {
            (None, _) => vec![false; layers as usize],
            (Some(_), None) => period(6),
            (Some(_), Some(MetaValue::Array(a))) => {
                let v: Vec<bool> = a.iter().filter_map(MetaValue::as_bool).collect();
                if v.len() != a.len() || v.len() as u64 != layers {
                    return Err(self.corrupt(
                        key,
                        format!("should be {layers} bools (one per layer), found {a:?}"),
                    ));
                }
                v
            }
            (Some(_), Some(_)) => period(self.need_u64(key)?),
        };
        let local_base = self
            .number("rope.freq_base_swa")?
            .unwrap_or_else(|| json!(10000.0));
        let scaling = match self.m.arch_key("rope.scaling.type").map(|v| v.as_str()) {
            None | Some(Some("none")) => None,
            Some(Some("linear")) => {
                let factor = self
                    .number("rope.scaling.factor")?
                    .ok_or_else(|| self.corrupt("rope.scaling.factor", "is missing".into()))?;
                Some(json!({"rope_type": "linear", "factor": factor}))
            }
            Some(other) => {
                return Err(self.unsupported(
                    "rope.scaling.type",
                    format!("is {other:?}; Gemma 3 uses none or linear"),
                ))
            }
        };
        let scalar = if layers == 62 {
            hidden / heads
        } else {
            head_dim
        };
        let types: Vec<&str> = sliding
            .iter()
            .map(|&s| match s {
                true => "sliding_attention",
                false => "full_attention",
            })
            .collect();
        // The period too, when the layers follow one (published configs say
        // `sliding_window_pattern`, transformers 5 `layer_types`).
        let pattern = (1..=layers + 1).find(|&n| period(n) == sliding);
        let softcap = self.number("final_logit_softcapping")?;
        let context = self.c.get("max_position_embeddings").cloned();
        let c = &mut *self.c;
        c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
        c.insert("query_pre_attn_scalar".into(), json!(scalar));
        // Without sliding layers the window is unused; the context stands in.
        let w = window.map(|w| json!(w)).or(context).unwrap_or(json!(4096));
        c.insert("sliding_window".into(), w);
        c.insert("layer_types".into(), json!(types));
        if let Some(n) = pattern {
            c.insert("sliding_window_pattern".into(), json!(n));
        }
        c.insert("rope_local_base_freq".into(), local_base);
        c.insert("rope_scaling".into(), scaling.unwrap_or(Value::Null));
        if let Some(s) = softcap {
            c.insert("final_logit_softcapping".into(), s);
        }
        Ok(())
    }
}
