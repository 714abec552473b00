//! SmolLM3, Qwen3-MoE and Gemma 3 from GGUF files written by llama.cpp's own
//! converter (`tests/fixtures/gguf/make_family_ggufs.py`) against the
//! transformers 5.24 references of the fixtures they were converted from:
//! the config built from the GGUF metadata agrees with the fixture's
//! config.json and picks the family's script, prefill logits are within
//! 1e-4, greedy ids are equal, and a Q8_0 MoE file keeps its experts
//! quantized and its logits close.

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
];

const Q8_MOE: (&str, &str) = (
    "qwen3moe_quant_scaled.q8_0.gguf",
    "qwen3_moe/quant_scaled_f32",
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
    // The fixture's config.json states the pattern; ours spells it out too.
    let c = gguf_config(GEMMA3.0);
    let (s, f) = ("sliding_attention", "full_attention");
    assert_eq!(c["layer_types"], serde_json::json!([s, f, s, f]));
    // Without the expert_weights_norm key: llama.cpp's qwen3moe default.
    assert_eq!(gguf_config(Q8_MOE.0)["norm_topk_prob"], Value::Bool(true));
}

#[test]
fn gguf_configs_pick_the_family_script() {
    for &(name, _, script) in EXACT {
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
    let r = reference(case);
    let path = gguf(name);
    let files =
        model_files::open(path.to_str().expect("utf-8")).unwrap_or_else(|e| panic!("{}", e.0));
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{name}: {}", e.0));
    let got = data(&full_logits(&model, &r.input_ids));
    assert_eq!(got.len(), r.logits.len(), "{name}: logits shape");
    (max_abs(&got, &r.logits), got)
}

#[test]
fn prefill_logits_match_transformers() {
    for &(name, case, _) in EXACT {
        let (err, _) = prefill_error(name, case);
        eprintln!("{name}: prefill max-abs error vs transformers ({case}) = {err:.3e}");
        assert!(err <= 1e-4, "{name}: max-abs error {err} exceeds 1e-4");
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    for &(name, case, script) in EXACT {
        let r = reference(case);
        let path = gguf(name);
        let mut m = mllm_runtime::load(script, path.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{name}: {}", e.0));
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{name}: greedy ids differ from transformers");
    }
}

#[test]
fn q8_0_moe_keeps_experts_quantized_and_logits_close() {
    let (name, case) = Q8_MOE;
    let w = GgufWeights::open(&gguf(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    for p in ["gate_proj", "up_proj", "down_proj"] {
        let t = format!("model.layers.0.mlp.experts.{p}.weight");
        let info = w.info(&t).unwrap_or_else(|| panic!("{name}: no {t}"));
        assert_eq!(info.shape, [4, 256, 256], "{t}");
        assert!(
            matches!(info.dtype, DType::Quant(_)),
            "{t} loads as {} instead of Q8_0 blocks",
            info.dtype
        );
    }
    let (err, got) = prefill_error(name, case);
    let r = reference(case);
    let cos = worst_cosine(&got, &r.logits, r.vocab);
    eprintln!("{name}: worst per-position cosine vs f32 = {cos:.6}, max-abs {err:.3e}");
    assert!(cos >= 0.999, "{name}: cosine {cos} < 0.999");
}
