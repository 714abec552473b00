//! Qwen3.5 (`qwen35`) and Qwen3.5-MoE (`qwen35moe`): names, value fixes
//! and metadata as the config.json keys of models/qwen3_5.mdl and qwen3_5_moe.mdl. llama.cpp
//! stores the Gated DeltaNet's sizes under its SSM keys
//! (conversion/qwen.py, `Qwen3NextModel.set_gguf_parameters`):
//!
//! | GGUF `{arch}.`            | config.json                                  |
//! |---------------------------|----------------------------------------------|
//! | `ssm.conv_kernel`         | `linear_conv_kernel_dim`                     |
//! | `ssm.state_size`          | `linear_key_head_dim`                        |
//! | `ssm.group_count`         | `linear_num_key_heads`                       |
//! | `ssm.time_step_rank`      | `linear_num_value_heads`                     |
//! | `ssm.inner_size`          | `linear_value_head_dim` x value heads        |
//! | `attention.recurrent_layers` (or `full_attention_interval`) | `layer_types` |
//! | `rope.dimension_count`    | `partial_rotary_factor` x `head_dim`         |
//! | `expert_shared_feed_forward_length` | `shared_expert_intermediate_size` |
//!
//! `rope.dimension_sections` (Qwen3.5's interleaved multimodal rope) is not
//! needed for text: every section gets the same position, which makes it
//! the plain rope of the rotary dims.

use serde_json::{json, Value};

use super::{Family, Keys, DECODER};
use crate::error::Result;
use crate::gguf::MetaValue;

pub(super) const QWEN35: Family = Family {
    arch: "qwen35",
    class: "Qwen3_5ForCausalLM",
    model_type: "qwen3_5_text",
    vision: Some(("Qwen3_5ForConditionalGeneration", "qwen3_5")),
    config: |k| k.qwen35(false),
    // llama.cpp's converter names the DeltaNet's projections after its SSM
    // and fused-QKV roles (conversion/qwen.py, `Qwen3NextModel`), and the
    // norm before the MLP `post_attention_norm`. The values need more than
    // a name (weights.rs, linear_attn.rs).
    block_names: &[
        ("attn_qkv", "linear_attn.in_proj_qkv"),
        ("attn_gate", "linear_attn.in_proj_z"),
        ("ssm_alpha", "linear_attn.in_proj_a"),
        ("ssm_beta", "linear_attn.in_proj_b"),
        ("ssm_conv1d", "linear_attn.conv1d"),
        ("ssm_norm", "linear_attn.norm"),
        ("ssm_out", "linear_attn.out_proj"),
        ("post_attention_norm", "post_attention_layernorm"),
    ],
    // llama.cpp's `ssm_a` (no suffix) holds -exp(`A_log`), and
    // transformers' `dt_bias` (no suffix) is llama.cpp's `ssm_dt.bias`.
    whole_names: &[
        ("ssm_a", "linear_attn.A_log"),
        ("ssm_dt.bias", "linear_attn.dt_bias"),
    ],
    norm_plus_one: true,
    delta_net: true,
    partial_rotary: true,
    ..DECODER
};

pub(super) const QWEN35MOE: Family = Family {
    arch: "qwen35moe",
    class: "Qwen3_5MoeForCausalLM",
    model_type: "qwen3_5_moe_text",
    vision: Some(("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe")),
    config: |k| k.qwen35(true),
    sparse_only: true,
    ..QWEN35
};

impl Keys<'_> {
    /// Qwen3.5, dense or (`moe`) with a sparse MLP in every layer.
    pub(super) fn qwen35(&mut self, moe: bool) -> Result<()> {
        let layers = self.config_u64("num_hidden_layers");
        let head_dim = self.head_dim();
        let kernel = self.need_u64("ssm.conv_kernel")?;
        let dk = self.need_u64("ssm.state_size")?;
        let hk = self.need_u64("ssm.group_count")?;
        let hv = self.need_u64("ssm.time_step_rank")?;
        let inner = self.need_u64("ssm.inner_size")?;
        if hk == 0 || hv == 0 || hv % hk != 0 || inner % hv != 0 {
            return Err(self.corrupt(
                "ssm.time_step_rank",
                format!("({hv} value heads of {inner} values in all) does not group under {hk} key heads (ssm.group_count)"),
            ));
        }
        // llama.cpp: the per-layer list if the file has one, else every
        // `full_attention_interval`-th layer (default 4) is full attention.
        // Its converter writes both, the interval as 4 when transformers'
        // config object no longer holds it (qwen3_5_bf16 says 2): the list
        // wins, and only an interval that was used goes into the config.
        let mut interval = self.u64("full_attention_interval")?;
        let key = "attention.recurrent_layers";
        let recurrent: Vec<bool> = match self.m.arch_key(key) {
            Some(MetaValue::Array(a)) => {
                let v: Vec<bool> = a.iter().filter_map(MetaValue::as_bool).collect();
                // Past the decoder: MTP layers (the `mtp` head, not in
                // `layer_types`: see config.rs).
                if v.len() != a.len() || (v.len() as u64) < layers {
                    return Err(self.corrupt(
                        key,
                        format!("should be at least {layers} bools, found {a:?}"),
                    ));
                }
                interval = None;
                v[..layers as usize].to_vec()
            }
            Some(v) => return Err(self.corrupt(key, format!("should be an array, found {v:?}"))),
            None => {
                let n = interval.unwrap_or(4);
                if n == 0 {
                    return Err(self.corrupt("full_attention_interval", "is 0".into()));
                }
                (0..layers).map(|i| (i + 1) % n != 0).collect()
            }
        };
        let types: Vec<&str> = recurrent
            .iter()
            .map(|&r| {
                if r {
                    "linear_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let rot = self.u64("rope.dimension_count")?.unwrap_or(head_dim);
        if rot == 0 || rot > head_dim || rot % 2 != 0 {
            return Err(self.corrupt(
                "rope.dimension_count",
                format!("is {rot}, which is no even part of head_dim {head_dim}"),
            ));
        }
        let factor = rot as f64 / head_dim as f64;
        match self.m.arch_key("rope.scaling.type").map(|v| v.as_str()) {
            None | Some(Some("none")) => {}
            Some(other) => {
                return Err(self.unsupported(
                    "rope.scaling.type",
                    format!("is {other:?}; the Qwen3.5 scripts run the default rope only"),
                ))
            }
        }
        let theta = self.c.get("rope_theta").cloned().unwrap_or(json!(10000.0));
        let moe_keys = if moe {
            Some(self.qwen35_experts(layers)?)
        } else {
            None
        };
        let c = &mut *self.c;
        c.insert("linear_conv_kernel_dim".into(), json!(kernel));
        c.insert("linear_key_head_dim".into(), json!(dk));
        c.insert("linear_num_key_heads".into(), json!(hk));
        c.insert("linear_num_value_heads".into(), json!(hv));
        c.insert("linear_value_head_dim".into(), json!(inner / hv));
        c.insert("layer_types".into(), json!(types));
        if let Some(n) = interval {
            c.insert("full_attention_interval".into(), json!(n));
        }
        c.insert("partial_rotary_factor".into(), json!(factor));
        c.insert(
            "rope_parameters".into(),
            json!({"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor}),
        );
        for (k, v) in moe_keys.into_iter().flatten() {
            c.insert(k.into(), v);
        }
        Ok(())
    }

    /// Qwen3.5-MoE's experts: llama.cpp renormalises the top-k weights in
    /// code (as transformers always does) and runs a sparse MLP in every
    /// layer; the shared expert is what the script always has.
    fn qwen35_experts(&self, layers: u64) -> Result<Vec<(&'static str, Value)>> {
        let (experts, used, ff) = self.experts()?;
        self.unscaled()?;
        if let Some(i) =
            (0..layers).find(|i| !self.m.has_tensor(&format!("blk.{i}.ffn_gate_inp.weight")))
        {
            return Err(self.unsupported(
                "block_count",
                format!("layer {i} has no router (blk.{i}.ffn_gate_inp.weight); every Qwen3.5-MoE layer is sparse"),
            ));
        }
        let shared = self.need_u64("expert_shared_feed_forward_length")?;
        Ok(vec![
            ("num_experts", json!(experts)),
            ("num_experts_per_tok", json!(used)),
            ("moe_intermediate_size", json!(ff)),
            ("shared_expert_intermediate_size", json!(shared)),
        ])
    }
}
