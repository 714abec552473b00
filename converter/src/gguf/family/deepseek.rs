//! DeepSeek-OCR 2's text decoder (llama.cpp's `deepseek2-ocr`) as the
//! `DeepseekOcr2Text` keys of models/deepseek_ocr2.mdl. llama.cpp's
//! converter (conversion/deepseek.py, `DeepseekV2Model` with `is_ocr`)
//! writes DeepSeek-V2's MoE keys; its runtime (src/models/deepseek2.cpp,
//! the `is_ocr` branch) fixes the rest in code:
//!
//! | GGUF `deepseek2-ocr.`        | config.json                            |
//! |------------------------------|----------------------------------------|
//! | `leading_dense_block_count`  | `first_k_dense_replace`, `mlp_layer_types` |
//! | `expert_count`               | `n_routed_experts`                     |
//! | `expert_used_count`          | `num_experts_per_tok`                  |
//! | `expert_feed_forward_length` | `moe_intermediate_size`                |
//! | `expert_shared_count`        | `n_shared_experts`                     |
//! | `expert_weights_scale`       | `routed_scaling_factor` (0: none, 1.0) |
//! | `expert_group_count` (<= 1)  | `topk_method: greedy`, `n_group: 1`    |
//!
//! Fixed by llama.cpp: softmax routing over all experts, no renormalisation
//! unless `expert_weights_norm`, SiLU, head_dim = hidden / heads, rope over
//! the whole head in rotate-half (NEOX) order, which is transformers' order,
//! so unlike Llama's the q/k rows were not permuted. `rope.dimension_count`
//! is DeepSeek-V2's `qk_rope_head_dim` (0 for the OCR models) and is not
//! read. What llama.cpp would run differently from transformers' DeepSeek-OCR
//! 2 is refused: renormalised or sigmoid routing, a score-correction bias
//! (`exp_probs_b`), and expert groups, which llama.cpp ranks by the sum of
//! their two best experts (DeepSeek-V3's `noaux_tc`) where `group_limited_greedy`
//! ranks them by the best one; the converter writes the groups as they are
//! but not `topk_method`, so a group count above 1 cannot be told apart.

use serde_json::json;

use super::{Family, Keys, DECODER};
use crate::error::Result;
use crate::gguf::MetaValue;

/// The text entry of models/deepseek_ocr2.mdl (vision in the mmproj file,
/// mmproj_deepseek.rs).
pub(super) const DEEPSEEK2_OCR: Family = Family {
    arch: "deepseek2-ocr",
    class: "DeepseekOcr2TextForCausalLM",
    model_type: "deepseek_ocr2_text",
    config: |k| k.deepseek2ocr(),
    // DeepSeek names its shared experts `mlp.shared_experts` where Qwen
    // says `mlp.shared_expert`.
    block_names: &[
        ("ffn_gate_shexp", "mlp.shared_experts.gate_proj"),
        ("ffn_up_shexp", "mlp.shared_experts.up_proj"),
        ("ffn_down_shexp", "mlp.shared_experts.down_proj"),
    ],
    ..DECODER
};

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_{NONE,SOFTMAX}`: both mean
/// softmax for deepseek2-ocr.
const SOFTMAX_GATING: &[u64] = &[0, 1];

impl Keys<'_> {
    pub(super) fn deepseek2ocr(&mut self) -> Result<()> {
        let layers = self.config_u64("num_hidden_layers");
        let hidden = self.config_u64("hidden_size");
        let heads = self.config_u64("num_attention_heads").max(1);
        let head_dim = hidden / heads;
        // llama.cpp asserts n_embd / n_head is the key and value size, and
        // transformers derives head_dim so whatever config.json says.
        for key in ["attention.key_length", "attention.value_length"] {
            if let Some(d) = self.u64(key)? {
                if d != head_dim || head_dim * heads != hidden {
                    return Err(self.unsupported(
                        key,
                        format!("is {d}; DeepSeek-OCR 2's heads are hidden_size / head_count = {hidden} / {heads}"),
                    ));
                }
            }
        }
        match self.m.arch_key("rope.scaling.type").map(|v| v.as_str()) {
            None | Some(Some("none")) => {}
            Some(other) => {
                return Err(self.unsupported(
                    "rope.scaling.type",
                    format!("is {other:?}; DeepSeek-OCR 2 uses the default rope"),
                ))
            }
        }
        let dense = self.u64("leading_dense_block_count")?.unwrap_or(0);
        if dense > layers {
            return Err(self.corrupt(
                "leading_dense_block_count",
                format!("is {dense}, more than the {layers} layers"),
            ));
        }
        // The tensors must say the same: a router in every sparse layer only.
        for i in 0..layers {
            let router = self.m.has_tensor(&format!("blk.{i}.ffn_gate_inp.weight"));
            if router != (i >= dense) {
                return Err(self.corrupt(
                    "leading_dense_block_count",
                    format!(
                        "is {dense}, but layer {i} {} a router (blk.{i}.ffn_gate_inp.weight)",
                        if router { "has" } else { "lacks" }
                    ),
                ));
            }
            if self.m.has_tensor(&format!("blk.{i}.exp_probs_b.bias")) {
                return Err(self.unsupported(
                    "expert_gating_func",
                    format!("(blk.{i}.exp_probs_b.bias) adds a score-correction bias to the routing, which DeepSeek-OCR 2 does not have"),
                ));
            }
        }
        let types: Vec<&str> = (0..layers)
            .map(|i| if i < dense { "dense" } else { "sparse" })
            .collect();
        let theta = self.c.get("rope_theta").cloned().unwrap_or(json!(10000.0));
        let bias = self.m.has_tensor("blk.0.attn_q.bias");
        let moe = if dense < layers {
            Some(self.deepseek_experts()?)
        } else {
            None
        };
        let c = &mut *self.c;
        c.insert("head_dim".into(), json!(head_dim));
        c.insert("hidden_act".into(), json!("silu"));
        c.insert("attention_bias".into(), json!(bias));
        c.insert("mlp_bias".into(), json!(false));
        c.insert(
            "rope_parameters".into(),
            json!({"rope_type": "default", "rope_theta": theta}),
        );
        c.insert("first_k_dense_replace".into(), json!(dense));
        c.insert("mlp_layer_types".into(), json!(types));
        for (k, v) in moe.into_iter().flatten() {
            c.insert(k.into(), v);
        }
        Ok(())
    }

    /// The routed and shared experts, refusing routing llama.cpp would run
    /// differently from transformers' DeepSeek-OCR 2 (see the module notes).
    fn deepseek_experts(&self) -> Result<Vec<(&'static str, serde_json::Value)>> {
        let (experts, used, ff) = self.experts()?;
        let shared = self.need_u64("expert_shared_count")?;
        let scale = self.weights_scale()?;
        let key = "expert_weights_norm";
        match self.m.arch_key(key) {
            None | Some(MetaValue::Bool(false)) => {}
            Some(MetaValue::Bool(true)) => {
                return Err(self.unsupported(
                    key,
                    "is true; DeepSeek-OCR 2 does not renormalise the top-k weights".into(),
                ))
            }
            Some(v) => return Err(self.corrupt(key, format!("should be a bool, found {v:?}"))),
        }
        if let Some(g) = self.u64("expert_gating_func")? {
            if !SOFTMAX_GATING.contains(&g) {
                return Err(self.unsupported(
                    "expert_gating_func",
                    format!("is {g}; DeepSeek-OCR 2 routes by softmax (1)"),
                ));
            }
        }
        let groups = self.u64("expert_group_count")?.unwrap_or(1);
        if groups > 1 {
            return Err(self.unsupported(
                "expert_group_count",
                format!("is {groups}: llama.cpp ranks expert groups by the sum of their two best experts, transformers' group_limited_greedy by the best one, and the file does not say which the model was trained with"),
            ));
        }
        Ok(vec![
            ("n_routed_experts", json!(experts)),
            ("num_experts_per_tok", json!(used)),
            ("moe_intermediate_size", json!(ff)),
            ("n_shared_experts", json!(shared)),
            ("routed_scaling_factor", json!(scale)),
            ("topk_method", json!("greedy")),
            ("n_group", json!(1)),
            ("topk_group", json!(1)),
        ])
    }
}
