//! The family mappings on metadata tables: the cases llama.cpp's converter
//! does not write (and the committed GGUF fixtures therefore lack).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{add_config as add, Meta};
use crate::gguf::MetaValue;

struct Table {
    arch: &'static str,
    meta: BTreeMap<String, MetaValue>,
    tensors: Vec<String>,
}

impl Meta for Table {
    fn arch_key(&self, key: &str) -> Option<&MetaValue> {
        self.meta.get(&format!("{}.{key}", self.arch))
    }
    fn has_tensor(&self, name: &str) -> bool {
        self.tensors.iter().any(|t| t == name)
    }
    fn label(&self) -> String {
        "t.gguf".into()
    }

    fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.has_tensor(name).then(Vec::new)
    }
}

fn table(arch: &'static str, meta: &[(&str, MetaValue)], tensors: &[&str]) -> Table {
    Table {
        arch,
        meta: meta
            .iter()
            .map(|(k, v)| (format!("{arch}.{k}"), v.clone()))
            .collect(),
        tensors: tensors.iter().map(|t| t.to_string()).collect(),
    }
}

/// The common keys `hf_config` puts in before the family's.
fn common(layers: u64) -> Map<String, Value> {
    json!({"num_hidden_layers": layers, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 96, "max_position_embeddings": 256})
    .as_object()
    .cloned()
    .unwrap_or_default()
}

fn run(t: &Table, layers: u64) -> Result<Map<String, Value>, String> {
    let mut c = common(layers);
    add(t.arch, t, &mut c).map_err(|e| e.to_string())?;
    Ok(c)
}

use MetaValue::{Array, Bool, Str, F32, U32};

#[test]
fn qwen3moe_defaults_follow_llama_cpp() {
    let routers = ["blk.0.ffn_gate_inp.weight", "blk.2.ffn_gate_inp.weight"];
    let t = table(
        "qwen3moe",
        &[("expert_count", U32(8)), ("expert_used_count", U32(2))],
        &routers,
    );
    let c = run(&t, 3).unwrap();
    // No expert size: llama.cpp's n_ff / n_expert_used; no norm key: true.
    assert_eq!(c["moe_intermediate_size"], json!(48));
    assert_eq!(c["norm_topk_prob"], json!(true));
    assert_eq!(c["num_experts"], json!(8));
    assert_eq!(c["num_local_experts"], json!(8));
    assert_eq!(c["num_experts_per_tok"], json!(2));
    // Layer 1 has no router: a dense layer.
    assert_eq!(c["mlp_only_layers"], json!([1]));
}

#[test]
fn qwen3moe_reads_what_the_file_says() {
    let t = table(
        "qwen3moe",
        &[
            ("expert_count", U32(6)),
            ("expert_used_count", U32(3)),
            ("expert_feed_forward_length", Array(vec![U32(20), U32(20)])),
            ("expert_weights_norm", Bool(false)),
        ],
        &["blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate_inp.weight"],
    );
    let c = run(&t, 2).unwrap();
    assert_eq!(c["moe_intermediate_size"], json!(20));
    assert_eq!(c["norm_topk_prob"], json!(false));
    assert_eq!(c["mlp_only_layers"], json!([]));
}

#[test]
fn qwen3moe_refuses_what_the_script_cannot_run() {
    let base = [("expert_count", U32(4)), ("expert_used_count", U32(2))];
    let cases: Vec<(Vec<(&str, MetaValue)>, &str)> = vec![
        (vec![base[0].clone()], "expert_used_count is missing"),
        (
            vec![base[0].clone(), ("expert_used_count", U32(5))],
            "does not fit 4 experts",
        ),
        (
            vec![
                base[0].clone(),
                base[1].clone(),
                ("expert_feed_forward_length", Array(vec![U32(8), U32(16)])),
            ],
            "different expert sizes",
        ),
        (
            vec![
                base[0].clone(),
                base[1].clone(),
                ("expert_weights_scale", F32(2.5)),
            ],
            "not scaled",
        ),
        (
            vec![
                base[0].clone(),
                base[1].clone(),
                ("expert_weights_norm", U32(1)),
            ],
            "should be a bool",
        ),
    ];
    for (meta, want) in cases {
        let e = run(&table("qwen3moe", &meta, &[]), 2).unwrap_err();
        assert!(e.contains("t.gguf") && e.contains(want), "{want}: {e}");
    }
}

#[test]
fn smollm3_takes_llama_cpps_nope_interval() {
    let c = run(&table("smollm3", &[], &[]), 8).unwrap();
    assert_eq!(c["no_rope_layer_interval"], json!(4));
}

#[test]
fn gemma3_without_pattern_uses_period_6() {
    let t = table(
        "gemma3",
        &[
            ("attention.sliding_window", U32(512)),
            ("attention.key_length", U32(16)),
        ],
        &[],
    );
    let mut c = common(7);
    c.insert("head_dim".into(), json!(16));
    add(t.arch, &t, &mut c).unwrap();
    let sliding = "sliding_attention";
    let full = "full_attention";
    assert_eq!(
        c["layer_types"],
        json!([sliding, sliding, sliding, sliding, sliding, full, sliding])
    );
    assert_eq!(c["sliding_window_pattern"], json!(6));
    assert_eq!(c["sliding_window"], json!(512));
    assert_eq!(c["rope_local_base_freq"], json!(10000.0));
    assert_eq!(c["query_pre_attn_scalar"], json!(16));
    assert_eq!(c["rope_scaling"], Value::Null);
    assert_eq!(c["hidden_activation"], json!("gelu_pytorch_tanh"));
    assert!(!c.contains_key("final_logit_softcapping"));
}

#[test]
fn gemma3_reads_pattern_bases_scaling_and_softcap() {
    let t = table(
        "gemma3",
        &[
            ("attention.sliding_window", U32(5)),
            (
                "attention.sliding_window_pattern",
                Array(vec![Bool(true), Bool(false), Bool(false)]),
            ),
            ("rope.freq_base_swa", F32(20000.0)),
            ("rope.scaling.type", Str("linear".into())),
            ("rope.scaling.factor", F32(8.0)),
            ("final_logit_softcapping", F32(30.0)),
        ],
        &[],
    );
    let c = run(&t, 3).unwrap();
    assert_eq!(
        c["layer_types"],
        json!(["sliding_attention", "full_attention", "full_attention"])
    );
    // No period gives that list.
    assert!(!c.contains_key("sliding_window_pattern"));
    assert_eq!(c["rope_local_base_freq"], json!(20000.0));
    assert_eq!(
        c["rope_scaling"],
        json!({"rope_type": "linear", "factor": 8.0})
    );
    assert_eq!(c["final_logit_softcapping"], json!(30.0));
    // No key_length: llama.cpp's hidden / heads.
    assert_eq!(c["head_dim"], json!(16));

    let t = table(
        "gemma3",
        &[
            ("attention.sliding_window", U32(5)),
            ("attention.sliding_window_pattern", U32(2)),
        ],
        &[],
    );
    let c = run(&t, 4).unwrap();
    assert_eq!(c["sliding_window_pattern"], json!(2));
    assert_eq!(
        c["layer_types"],
        json!([
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention"
        ])
    );
}

#[test]
fn gemma3_without_window_has_no_sliding_layers() {
    let c = run(&table("gemma3", &[], &[]), 2).unwrap();
    assert_eq!(
        c["layer_types"],
        json!(["full_attention", "full_attention"])
    );
    assert_eq!(c["sliding_window_pattern"], json!(1));
    assert_eq!(c["sliding_window"], json!(256));
}

#[test]
fn gemma3_27b_scales_queries_by_hidden_over_heads() {
    let mut c = json!({"num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32,
                       "head_dim": 128})
    .as_object()
    .cloned()
    .unwrap_or_default();
    add("gemma3", &table("gemma3", &[], &[]), &mut c).unwrap();
    assert_eq!(c["query_pre_attn_scalar"], json!(168));
}

#[test]
fn gemma3_refuses_bad_patterns_and_scalings() {
    let w = ("attention.sliding_window", U32(4));
    let cases = [
        (
            vec![
                w.clone(),
                ("attention.sliding_window_pattern", Array(vec![Bool(true)])),
            ],
            "should be 2 bools",
        ),
        (
            vec![w.clone(), ("rope.scaling.type", Str("yarn".into()))],
            "none or linear",
        ),
        (
            vec![w.clone(), ("rope.scaling.type", Str("linear".into()))],
            "rope.scaling.factor is missing",
        ),
        (
            vec![("attention.sliding_window", Str("4".into()))],
            "whole number",
        ),
    ];
    for (meta, want) in cases {
        let e = run(&table("gemma3", &meta, &[]), 2).unwrap_err();
        assert!(e.contains(want), "{want}: {e}");
    }
}

/// Qwen3.5's DeltaNet keys (`head_dim` 16 from the common keys).
fn qwen35_meta(extra: &[(&'static str, MetaValue)]) -> Vec<(&'static str, MetaValue)> {
    let mut m = vec![
        ("ssm.conv_kernel", U32(4)),
        ("ssm.state_size", U32(8)),
        ("ssm.group_count", U32(2)),
        ("ssm.time_step_rank", U32(4)),
        ("ssm.inner_size", U32(48)),
        ("rope.dimension_count", U32(4)),
    ];
    m.extend(extra.iter().cloned());
    m
}

#[test]
fn qwen35_layers_from_the_interval_without_a_list() {
    let t = table(
        "qwen35",
        &qwen35_meta(&[("full_attention_interval", U32(3))]),
        &[],
    );
    let mut c = common(6);
    c.insert("head_dim".into(), json!(16));
    add(t.arch, &t, &mut c).unwrap();
    let (l, f) = ("linear_attention", "full_attention");
    assert_eq!(c["layer_types"], json!([l, l, f, l, l, f]));
    assert_eq!(c["full_attention_interval"], json!(3));
    assert_eq!(c["linear_value_head_dim"], json!(12));
    assert_eq!(c["linear_num_value_heads"], json!(4));
    assert_eq!(c["partial_rotary_factor"], json!(0.25));
    // No interval key either: llama.cpp's 4.
    let t = table("qwen35", &qwen35_meta(&[]), &[]);
    let c = run(&t, 4).unwrap();
    assert_eq!(c["layer_types"], json!([l, l, l, f]));
}

#[test]
fn qwen35_list_wins_and_mtp_layers_are_dropped() {
    // Two decoder layers plus one MTP layer (never recurrent); the interval
    // key says otherwise and is not carried.
    let list = Array(vec![Bool(false), Bool(true), Bool(false)]);
    let meta = qwen35_meta(&[
        ("attention.recurrent_layers", list),
        ("full_attention_interval", U32(4)),
    ]);
    let c = run(&table("qwen35", &meta, &[]), 2).unwrap();
    assert_eq!(
        c["layer_types"],
        json!(["full_attention", "linear_attention"])
    );
    assert!(!c.contains_key("full_attention_interval"));
    let short = qwen35_meta(&[("attention.recurrent_layers", Array(vec![Bool(true)]))]);
    let e = run(&table("qwen35", &short, &[]), 2).unwrap_err();
    assert!(e.contains("at least 2 bools"), "{e}");
}

#[test]
fn qwen35_refuses_what_the_scripts_cannot_run() {
    let bad_groups = qwen35_meta(&[("ssm.time_step_rank", U32(3))]);
    // (a later key of the same name wins in the table)
    let e = run(&table("qwen35", &bad_groups, &[]), 4).unwrap_err();
    assert!(e.contains("does not group"), "{e}");
    let yarn = qwen35_meta(&[("rope.scaling.type", Str("yarn".into()))]);
    let e = run(&table("qwen35", &yarn, &[]), 4).unwrap_err();
    assert!(e.contains("default rope only"), "{e}");
    // MoE: a layer without a router, and a missing shared expert size.
    let moe = qwen35_meta(&[
        ("expert_count", U32(4)),
        ("expert_used_count", U32(2)),
        ("expert_feed_forward_length", U32(16)),
    ]);
    let e = run(&table("qwen35moe", &moe, &["blk.0.ffn_gate_inp.weight"]), 2).unwrap_err();
    assert!(e.contains("layer 1 has no router"), "{e}");
    let routers = ["blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate_inp.weight"];
    let e = run(&table("qwen35moe", &moe, &routers), 2).unwrap_err();
    assert!(e.contains("expert_shared_feed_forward_length"), "{e}");
    let mut full = moe.clone();
    full.push(("expert_shared_feed_forward_length", U32(24)));
    let c = run(&table("qwen35moe", &full, &routers), 2).unwrap();
    assert_eq!(c["shared_expert_intermediate_size"], json!(24));
    assert_eq!(c["moe_intermediate_size"], json!(16));
    assert_eq!(c["num_experts"], json!(4));
}

#[test]
fn qwen3vlmoe_text_maps_as_qwen3moe() {
    // Its text keys are qwen3moe's (a file llama.cpp's converter wrote:
    // tests/tests/gguf_families.rs, qwen3vlmoe_bf16.gguf).
    let meta = [("expert_count", U32(8)), ("expert_used_count", U32(2))];
    let routers = ["blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate_inp.weight"];
    let vl = run(&table("qwen3vlmoe", &meta, &routers), 2).unwrap();
    let moe = run(&table("qwen3moe", &meta, &routers), 2).unwrap();
    assert_eq!(vl, moe);
    assert_eq!(vl["num_experts"], json!(8));
}

/// DeepSeek-OCR 2's metadata with leading dense layers `dense` of 3, and
/// routers in the others; `extra` adds or replaces keys.
fn deepseek(dense: u32, extra: &[(&str, MetaValue)], more: &[&str]) -> Table {
    let mut meta = vec![
        ("expert_count", U32(8)),
        ("expert_used_count", U32(2)),
        ("expert_feed_forward_length", U32(16)),
        ("expert_shared_count", U32(2)),
        ("leading_dense_block_count", U32(dense)),
        ("expert_group_count", U32(1)),
        ("rope.dimension_count", U32(0)),
    ];
    for (k, v) in extra {
        meta.retain(|(m, _)| m != k);
        meta.push((k, v.clone()));
    }
    let routers: Vec<String> = (dense..3)
        .map(|i| format!("blk.{i}.ffn_gate_inp.weight"))
        .collect();
    let mut tensors: Vec<&str> = routers.iter().map(String::as_str).collect();
    tensors.extend(more);
    table("deepseek2-ocr", &meta, &tensors)
}

#[test]
fn deepseek2ocr_maps_llama_cpps_keys() {
    let c = run(&deepseek(1, &[("expert_weights_scale", F32(2.5))], &[]), 3).unwrap();
    assert_eq!(c["mlp_layer_types"], json!(["dense", "sparse", "sparse"]));
    assert_eq!(c["first_k_dense_replace"], json!(1));
    assert_eq!(c["n_routed_experts"], json!(8));
    assert_eq!(c["num_experts_per_tok"], json!(2));
    assert_eq!(c["moe_intermediate_size"], json!(16));
    assert_eq!(c["n_shared_experts"], json!(2));
    assert_eq!(c["routed_scaling_factor"], json!(2.5));
    assert_eq!(c["topk_method"], json!("greedy"));
    assert_eq!(c["head_dim"], json!(16));
    assert_eq!(c["attention_bias"], json!(false));
    // llama.cpp: a scale of 0, like none, leaves the weights unscaled.
    for t in [
        deepseek(0, &[("expert_weights_scale", F32(0.0))], &[]),
        deepseek(0, &[], &["blk.0.attn_q.bias"]),
    ] {
        let c = run(&t, 3).unwrap();
        assert_eq!(c["routed_scaling_factor"], json!(1.0));
        assert_eq!(c["mlp_layer_types"], json!(["sparse", "sparse", "sparse"]));
    }
    let c = run(&deepseek(0, &[], &["blk.0.attn_q.bias"]), 3).unwrap();
    assert_eq!(c["attention_bias"], json!(true));
    // All dense: no expert keys needed.
    let c = run(
        &table(
            "deepseek2-ocr",
            &[("leading_dense_block_count", U32(3))],
            &[],
        ),
        3,
    )
    .unwrap();
    assert_eq!(c["mlp_layer_types"], json!(["dense", "dense", "dense"]));
}

#[test]
fn deepseek2ocr_refuses_routing_transformers_does_not_run() {
    let cases: Vec<(Table, &str)> = vec![
        (
            deepseek(1, &[("expert_group_count", U32(4))], &[]),
            "sum of their two best",
        ),
        (
            deepseek(1, &[("expert_weights_norm", Bool(true))], &[]),
            "does not renormalise",
        ),
        (
            deepseek(1, &[("expert_gating_func", U32(2))], &[]),
            "routes by softmax",
        ),
        (
            deepseek(1, &[], &["blk.2.exp_probs_b.bias"]),
            "score-correction bias",
        ),
        (
            deepseek(1, &[("leading_dense_block_count", U32(2))], &[]),
            "layer 1 has a router",
        ),
        (
            deepseek(1, &[("attention.key_length", U32(32))], &[]),
            "hidden_size / head_count",
        ),
        (
            deepseek(1, &[("rope.scaling.type", Str("yarn".into()))], &[]),
            "default rope",
        ),
    ];
    for (t, want) in cases {
        let e = run(&t, 3).unwrap_err();
        assert!(e.contains("t.gguf") && e.contains(want), "{want}: {e}");
    }
}
