//! SmolLM3, Qwen3-MoE, Gemma 3, Qwen3.5, Qwen3.5-MoE and Qwen3-VL-MoE (text)
//! from GGUF files written by llama.cpp's own converter
//! (`tests/fixtures/gguf/make_family_ggufs.py`) against the transformers
//! 5.24 references of the fixtures they were converted from: the config
//! built from the GGUF metadata agrees with the fixture's config.json and
//! picks the family's script, prefill logits are within 1e-4, greedy ids
//! are equal, and Q8_0 MoE files keep their experts quantized and their
//! logits close. (Qwen3.5's DeltaNet tensors: gguf_qwen35.rs.)

mod common;

use std::path::PathBuf;

use common::golden::worst_cosine;
use common::*;
use mllm_backends::weights::WeightSource;
use mllm_backends::DType;
use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights};
use mllm_runtime::model_files::{self, load_model};
use serde_json::Value;

/// (GGUF file, the fixture it was converted from, the script it must pick).
const EXACT: &[(&str, &str, &str)] = &[
    ("smollm3_f32.gguf", "smollm3/smollm3_f32", "smollm3"),
    (
        "qwen3moe_bf16_nonorm.gguf",
        "qwen3_moe/moe_bf16_nonorm",
        "qwen3_moe",
    ),
    ("gemma3_bf16.gguf", "gemma3/gemma3_bf16", "gemma3"),
    // 2 key / 4 value DeltaNet heads: llama.cpp reordered the value heads.
    ("qwen35_f32.gguf", "qwen3_5/qwen3_5_f32", "qwen3_5"),
    // Full attention every 2nd layer (config.json gives the interval only),
    // one key head, untied, bf16.
    ("qwen35_bf16.gguf", "qwen3_5/qwen3_5_bf16", "qwen3_5"),
    ("qwen35moe_f32.gguf", "qwen3_5_moe/moe_f32", "qwen3_5_moe"),
];

/// Qwen3-VL-MoE's text decoder (llama.cpp writes the vision tower to a
/// separate mmproj file), bf16, every layer sparse: checked on the fixture's
/// text-only prompt, which the Qwen3-MoE script runs (interleaved mrope with
/// one position in every section is plain rope).
const VL_MOE: (&str, &str, &str) = (
    "qwen3vlmoe_bf16.gguf",
    "qwen3_vl_moe/p8_m2_moe_bf16",
    "qwen3_moe",
);

/// The GGUFs whose logits match transformers within 1e-4.
fn exact() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    EXACT.iter().chain([&VL_MOE])
}

/// The prompt, logits and greedy ids a case's GGUF is checked against:
/// `reference.safetensors`, or the VL fixture's text-only prompt.
fn text_reference(case: &str) -> Reference {
    if case == VL_MOE.1 {
        return reference_file(&fixture(case).join("reference_text_only.safetensors"));
    }
    reference(case)
}

const Q8_MOE: (&str, &str) = (
    "qwen3moe_quant_scaled.q8_0.gguf",
    "qwen3_moe/quant_scaled_f32",
);

/// Qwen3.5-MoE at Q8_0: experts, shared expert and DeltaNet projections
/// in blocks. (3 experts of 256 rows.)
const Q8_QWEN35_MOE: (&str, &str) = (
    "qwen35moe_quant_scaled.q8_0.gguf",
    "qwen3_5_moe/quant_scaled_f32",
);

const GEMMA3: (&str, &str) = (EXACT[2].0, EXACT[2].1);

fn gguf(name: &str) -> PathBuf {
    root().join("tests/fixtures/gguf").join(name)
}

fn hf_json(case: &str) -> Value {
    let p = fixture(case).join("config.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn gguf_config(name: &str) -> Value {
    let g = GgufFile::open(&gguf(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    hf_config(&g).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every key of the GGUF's config that the fixture's config.json also has
/// holds the same value (numbers compared as f64; `rope_theta` may sit in
/// transformers 5's `rope_parameters`), and the keys `need` are there.
fn config_agrees(name: &str, case: &str, need: &[&str]) {
    let ours = gguf_config(name);
    let hf = hf_json(case);
    let ours = ours.as_object().expect("object");
    for key in need {
        assert!(ours.contains_key(*key), "{name}: no `{key}` in {ours:?}");
    }
    for (k, v) in ours {
        let theirs = match (hf.get(k), k.as_str()) {
            (Some(t), _) => t.clone(),
            (None, "rope_theta") => hf["rope_parameters"]["rope_theta"].clone(),
            (None, _) => continue,
        };
        let same = match (v.as_f64(), theirs.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => *v == theirs,
        };
        assert!(
            same,
            "{name}: `{k}` is {v}, {case}'s config.json says {theirs}"
        );
    }
}

#[test]
fn configs_from_gguf_metadata_agree_with_config_json() {
    let common = [
        "architectures",
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "rms_norm_eps",
        "rope_theta",
        "tie_word_embeddings",
    ];
    let smol: Vec<&str> = common
        .iter()
        .copied()
        .chain(["no_rope_layer_interval"])
        .collect();
    config_agrees(EXACT[0].0, EXACT[0].1, &smol);
    let moe: Vec<&str> = common
        .iter()
        .copied()
        .chain([
            "head_dim",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "norm_topk_prob",
            "mlp_only_layers",
        ])
        .collect();
    config_agrees(EXACT[1].0, EXACT[1].1, &moe);
    config_agrees(Q8_MOE.0, Q8_MOE.1, &moe);
    let gemma: Vec<&str> = common
        .iter()
        .copied()
        .chain([
            "head_dim",
            "sliding_window",
            "sliding_window_pattern",
            "layer_types",
            "rope_local_base_freq",
            "query_pre_attn_scalar",
            "hidden_activation",
            "rope_scaling",
        ])
        .collect();
    config_agrees(GEMMA3.0, GEMMA3.1, &gemma);
    let qwen35: Vec<&str> = common
        .iter()
        .copied()
        .chain([
            "head_dim",
            "layer_types",
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "partial_rotary_factor",
            "rope_parameters",
        ])
        .collect();
    for &(name, case, _) in &EXACT[3..5] {
        config_agrees(name, case, &qwen35);
    }
    let qwen35_moe: Vec<&str> = qwen35
        .iter()
        .copied()
        .chain([
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
        ])
        .collect();
    config_agrees(EXACT[5].0, EXACT[5].1, &qwen35_moe);
    config_agrees(Q8_QWEN35_MOE.0, Q8_QWEN35_MOE.1, &qwen35_moe);
    // qwen3_5_bf16's config.json gives only the interval 2; the file's
    // layer list says so (its `full_attention_interval` key says 4).
    let (l, f) = ("linear_attention", "full_attention");
    assert_eq!(
        gguf_config(EXACT[4].0)["layer_types"],
        serde_json::json!([l, f, l, f, l])
    );
    // The fixture's config.json states the pattern; ours spells it out too.
    let c = gguf_config(GEMMA3.0);
    let (s, f) = ("sliding_attention", "full_attention");
    assert_eq!(c["layer_types"], serde_json::json!([s, f, s, f]));
    // Without the expert_weights_norm key: llama.cpp's qwen3moe default.
    assert_eq!(gguf_config(Q8_MOE.0)["norm_topk_prob"], Value::Bool(true));
}

/// Qwen3-VL-MoE's config.json nests the text keys in `text_config` (and
/// names the VL model); the GGUF's config is the text decoder's alone.
#[test]
fn qwen3vlmoe_config_agrees_with_text_config() {
    let (name, case, _) = VL_MOE;
    let ours = gguf_config(name);
    let text = hf_json(case)["text_config"].clone();
    for key in [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "max_position_embeddings",
        "tie_word_embeddings",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
    ] {
        let (a, b) = (&ours[key], &text[key]);
        let same = match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b && !a.is_null(),
        };
        assert!(same, "{name}: `{key}` is {a}, text_config says {b}");
    }
    // transformers' Qwen3-VL-MoE router always renormalises the top k (its
    // config has no `norm_topk_prob`); llama.cpp's qwen3vlmoe does too.
    assert_eq!(ours["norm_topk_prob"], Value::Bool(true));
}

#[test]
fn gguf_configs_pick_the_family_script() {
    for &(name, _, script) in exact() {
        let c = gguf_config(name);
        assert_eq!(
            mllm_runtime::assets::script_for_config(&c),
            Ok(script),
            "{name}"
        );
    }
}

/// Prefill logits from the GGUF (script picked from its metadata) and their
/// max-abs error against transformers.
fn prefill_error(name: &str, case: &str) -> (f32, Vec<f32>) {
    let r = text_reference(case);
    let path = gguf(name);
    let files = model_files::open(path.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{name}: {}", e.render(false)));
    let got = data(&full_logits(&model, &r.input_ids));
    assert_eq!(got.len(), r.logits.len(), "{name}: logits shape");
    (max_abs(&got, &r.logits), got)
}

#[test]
fn prefill_logits_match_transformers() {
    for &(name, case, _) in exact() {
        let (err, _) = prefill_error(name, case);
        eprintln!("{name}: prefill max-abs error vs transformers ({case}) = {err:.3e}");
        assert!(err <= 1e-4, "{name}: max-abs error {err} exceeds 1e-4");
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    for &(name, case, script) in exact() {
        let r = text_reference(case);
        let path = gguf(name);
        let mut m = mllm_runtime::load(script, path.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{name}: {}", e.render(false)));
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{name}: greedy ids differ from transformers");
    }
}

/// The tensors `names` of the GGUF `name` load as blocks of `shape`.
fn loads_as_blocks(name: &str, names: &[String], shape: &[usize]) {
    let w = GgufWeights::open(&gguf(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    for t in names {
        let info = w.info(t).unwrap_or_else(|| panic!("{name}: no {t}"));
        assert_eq!(info.shape, shape, "{t}");
        assert!(
            matches!(info.dtype, DType::Quant(_)),
            "{t} loads as {} instead of Q8_0 blocks",
            info.dtype
        );
    }
}

fn expert_names() -> Vec<String> {
    ["gate_proj", "up_proj", "down_proj"]
        .iter()
        .map(|p| format!("model.layers.0.mlp.experts.{p}.weight"))
        .collect()
}

#[test]
fn q8_0_moe_keeps_experts_quantized_and_logits_close() {
    let (name, case) = Q8_MOE;
    loads_as_blocks(name, &expert_names(), &[4, 256, 256]);
    q8_0_logits_close(name, case);
}

#[test]
fn q8_0_qwen35_moe_keeps_blocks_and_logits_close() {
    let (name, case) = Q8_QWEN35_MOE;
    loads_as_blocks(name, &expert_names(), &[3, 256, 256]);
    let more: Vec<String> = [
        "linear_attn.in_proj_qkv",
        "linear_attn.out_proj",
        "mlp.shared_expert.up_proj",
    ]
    .iter()
    .map(|p| format!("model.layers.0.{p}.weight"))
    .collect();
    let w = GgufWeights::open(&gguf(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    for t in &more {
        let info = w.info(t).unwrap_or_else(|| panic!("{name}: no {t}"));
        assert!(matches!(info.dtype, DType::Quant(_)), "{t}: {}", info.dtype);
    }
    q8_0_logits_close(name, case);
}

/// Prefill from a Q8_0 file: the worst per-position cosine against the
/// f32 model's transformers logits is at least 0.999.
fn q8_0_logits_close(name: &str, case: &str) {
    let (err, got) = prefill_error(name, case);
    let r = reference(case);
    let cos = worst_cosine(&got, &r.logits, r.vocab);
    eprintln!("{name}: worst per-position cosine vs f32 = {cos:.6}, max-abs {err:.3e}");
    assert!(cos >= 0.999, "{name}: cosine {cos} < 0.999");
}
