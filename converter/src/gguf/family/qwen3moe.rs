//! Qwen3-MoE (`qwen3moe`, models/qwen3_moe.mdl) and Qwen3-VL-MoE's text
//! decoder (`qwen3vlmoe`; with its mmproj, models/qwen3_vl_moe.mdl).
//!
//! Qwen3-VL-MoE's text decoder is Qwen3-MoE's with interleaved multimodal
//! rope, which in transformers is, for a text prompt (one position in every
//! section), the plain rope of all head_dim dims: `rope.dimension_sections`
//! and `n_deepstack_layers` change nothing without images, and are not
//! read. (llama.cpp's own run differs slightly: its imrope gives the
//! frequency pairs past the sections' interleaved slots, e.g. pair 6 of
//! [2, 3, 3] or 61-62 of the published [24, 20, 20], a 4th position that
//! is 0 for text, where transformers rotates them with the text position.)

use serde_json::json;

use super::{Family, Keys, DECODER};
use crate::error::Result;

pub(super) const QWEN3MOE: Family = Family {
    arch: "qwen3moe",
    class: "Qwen3MoeForCausalLM",
    model_type: "qwen3_moe",
    config: |k| k.qwen3moe(),
    ..DECODER
};

pub(super) const QWEN3VLMOE: Family = Family {
    arch: "qwen3vlmoe",
    vision: Some(("Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe")),
    ..QWEN3MOE
};

impl Keys<'_> {
    /// Qwen3-MoE: every layer llama.cpp writes is sparse (a dense layer has
    /// no `ffn_gate_inp`, and llama.cpp cannot run one, but other writers
    /// may make one: it becomes `mlp_only_layers`). llama.cpp normalises the
    /// top-k weights of qwen3moe in code (`norm_topk_prob: true`, what every
    /// published Qwen3-MoE says) and its converter writes no key for it;
    /// an `expert_weights_norm` key, where a file has one, is honoured.
    pub(super) fn qwen3moe(&mut self) -> Result<()> {
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
}
