//! What `hf_config` adds for the families whose config.json holds more
//! than the Llama-style keys: Qwen3-MoE's (and Qwen3-VL-MoE's text)
//! experts, SmolLM3's NoPE layers, Gemma 3's sliding windows, rope bases
//! and softcapping, Qwen3.5's Gated DeltaNet layers and shared experts
//! (config_qwen35.rs), DeepSeek-OCR 2's decoder (config_deepseek.rs). Each mapping follows what llama.cpp does when it
//! runs the file (its `src/models/{qwen3moe,smollm3,gemma3,qwen35}.cpp`),
//! including the values it fixes in code instead of reading them from the
//! file.

use serde_json::{json, Map, Value};

use super::config::number;
use super::MetaValue;
use crate::error::{ConvertError, Result};

/// The metadata and tensors `hf_config` reads: a GGUF file (a table in
/// the unit tests).
pub(super) trait Meta {
    /// The value of `{arch}.{key}`.
    fn arch_key(&self, key: &str) -> Option<&MetaValue>;
    /// Whether the file holds a tensor of this GGUF name.
    fn has_tensor(&self, name: &str) -> bool;
    /// The file, for messages.
    fn label(&self) -> String;
}

/// Adds the keys of `arch`'s family to `c`, which holds the common ones.
pub(super) fn add(arch: &str, m: &dyn Meta, c: &mut Map<String, Value>) -> Result<()> {
    let mut f = Family { m, c, arch };
    match arch {
        // Qwen3-VL-MoE's text decoder is Qwen3-MoE's with interleaved
        // multimodal rope, which in transformers is, for a text prompt (one
        // position in every section), the plain rope of all head_dim dims:
        // `rope.dimension_sections` and `n_deepstack_layers` change nothing
        // without images, and are not read. (llama.cpp's own run differs
        // slightly: its imrope gives the frequency pairs past the
        // sections' interleaved slots, e.g. pair 6 of [2, 3, 3] or 61-62 of
        // the published [24, 20, 20], a 4th position that is 0 for text,
        // where transformers rotates them with the text position.)
        // (Dense Qwen3-VL's text decoder, `qwen3vl`, is Qwen3's likewise:
        // nothing to add.)
        "qwen3moe" | "qwen3vlmoe" => f.qwen3moe(),
        "qwen35" => f.qwen35(false),
        "qwen35moe" => f.qwen35(true),
        "smollm3" => {
            // llama.cpp stores no NoPE layer list: every 4th layer takes no
            // rope (`n_no_rope_layer_step = 4`), SmolLM3-3B's published
            // `no_rope_layer_interval`; the script derives the list from it.
            f.c.insert("no_rope_layer_interval".into(), json!(4));
            Ok(())
        }
        "gemma3" => f.gemma3(),
        "deepseek2-ocr" => f.deepseek2ocr(),
        _ => Ok(()),
    }
}

pub(super) struct Family<'a> {
    pub(super) m: &'a dyn Meta,
    pub(super) c: &'a mut Map<String, Value>,
    pub(super) arch: &'a str,
}

impl Family<'_> {
    pub(super) fn corrupt(&self, key: &str, what: String) -> ConvertError {
        ConvertError::Corrupt(format!("{}: {}.{key} {what}", self.m.label(), self.arch))
    }

    pub(super) fn unsupported(&self, key: &str, what: String) -> ConvertError {
        ConvertError::Unsupported(format!("{}: {}.{key} {what}", self.m.label(), self.arch))
    }

    /// A non-negative integer key, if present.
    pub(super) fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.m.arch_key(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.corrupt(key, format!("should be a whole number, found {v:?}"))),
        }
    }

    pub(super) fn need_u64(&self, key: &str) -> Result<u64> {
        self.u64(key)?
            .ok_or_else(|| self.corrupt(key, "is missing".into()))
    }

    /// A number key as JSON (f32 values as their shortest decimal), if present.
    pub(super) fn number(&self, key: &str) -> Result<Option<Value>> {
        match self.m.arch_key(key) {
            None => Ok(None),
            Some(v) => number(v)
                .map(Some)
                .ok_or_else(|| self.corrupt(key, format!("should be a number, found {v:?}"))),
        }
    }

    /// An integer the common keys already put in the config.
    pub(super) fn config_u64(&self, hf: &str) -> u64 {
        self.c.get(hf).and_then(Value::as_u64).unwrap_or(0)
    }

    /// The expert count, experts per token and expert width every MoE
    /// family stores alike; the width falls back to llama.cpp's
    /// `n_ff / n_expert_used`.
    pub(super) fn experts(&self) -> Result<(u64, u64, u64)> {
        let experts = self.need_u64("expert_count")?;
        let used = self.need_u64("expert_used_count")?;
        if experts == 0 || used == 0 || used > experts {
            return Err(self.corrupt(
                "expert_used_count",
                format!("is {used}, which does not fit {experts} experts"),
            ));
        }
        let key = "expert_feed_forward_length";
        let ff = match self.m.arch_key(key) {
            // llama.cpp's fallback.
            None => self.config_u64("intermediate_size") / used,
            Some(MetaValue::Array(a)) => {
                let v: Vec<u64> = a.iter().filter_map(MetaValue::as_u64).collect();
                match v.first() {
                    Some(&f) if v.len() == a.len() && v.iter().all(|&x| x == f) => f,
                    _ => {
                        return Err(self.unsupported(
                            key,
                            format!(
                            "gives layers different expert sizes ({a:?}); the {} script has one",
                            self.arch
                        ),
                        ))
                    }
                }
            }
            Some(_) => self.need_u64(key)?,
        };
        if ff == 0 {
            return Err(self.corrupt(key, "is 0".into()));
        }
        Ok((experts, used, ff))
    }

    /// The factor llama.cpp multiplies the routing weights by:
    /// `expert_weights_scale`, where 0 (like a missing key) means none.
    pub(super) fn weights_scale(&self) -> Result<f64> {
        let key = "expert_weights_scale";
        let s = self.number(key)?.and_then(|v| v.as_f64()).unwrap_or(1.0);
        Ok(if s == 0.0 { 1.0 } else { s })
    }

    /// Qwen's routers do not scale their weights: a file that does is refused.
    pub(super) fn unscaled(&self) -> Result<()> {
        let s = self.weights_scale()?;
        if s != 1.0 {
            return Err(self.unsupported(
                "expert_weights_scale",
                format!("is {s}; Qwen's router weights are not scaled"),
            ));
        }
        Ok(())
    }

    /// Qwen3-MoE: every layer llama.cpp writes is sparse (a dense layer has
    /// no `ffn_gate_inp`, and llama.cpp cannot run one, but other writers
    /// may make one: it becomes `mlp_only_layers`). llama.cpp normalises the
    /// top-k weights of qwen3moe in code (`norm_topk_prob: true`, what every
    /// published Qwen3-MoE says) and its converter writes no key for it;
    /// an `expert_weights_norm` key, where a file has one, is honoured.
    fn qwen3moe(&mut self) -> Result<()> {
        let (experts, used, ff) = self.experts()?;
        self.unscaled()?;
        let norm = match self.m.arch_key("expert_weights_norm") {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| {
                self.corrupt(
                    "expert_weights_norm",
                    format!("should be a bool, found {v:?}"),
                )
            })?,
        };
        let layers = self.config_u64("num_hidden_layers");
        let dense: Vec<u64> = (0..layers)
            .filter(|i| !self.m.has_tensor(&format!("blk.{i}.ffn_gate_inp.weight")))
            .collect();
        let c = &mut *self.c;
        c.insert("num_experts".into(), json!(experts));
        c.insert("num_local_experts".into(), json!(experts));
        c.insert("num_experts_per_tok".into(), json!(used));
        c.insert("moe_intermediate_size".into(), json!(ff));
        c.insert("norm_topk_prob".into(), json!(norm));
        c.insert("decoder_sparse_step".into(), json!(1));
        c.insert("mlp_only_layers".into(), json!(dense));
        Ok(())
    }

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
        if !self.c.contains_key("head_dim") {
            self.c.insert("head_dim".into(), json!(hidden / heads));
        }
        let head_dim = self.config_u64("head_dim");
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

#[cfg(test)]
#[path = "config_family_tests.rs"]
mod tests;
