//! Llama-family scripts against Hugging Face transformers: tied embeddings,
//! Llama-3 and linear rope scaling, attention and MLP biases, bf16 weights
//! (fixtures by `tests/fixtures/make_llama_fixtures.py`).

mod common;

use common::*;

fn case(name: &str) -> String {
    format!("llama/{name}")
}

#[test]
fn prefill_logits_match_transformers() {
    for name in LLAMA_CASES {
        let c = case(name);
        let r = reference(&c);
        let mut m = load_with(&script("llama"), &c);
        let logits = m
            .step(&new_cache(), &r.input_ids, 0, false)
            .expect("forward");
        let err = max_abs(&data(&logits), &r.logits);
        eprintln!("{name}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(err <= 1e-4, "{name}: max-abs error {err} exceeds 1e-4");
    }
}

#[test]
fn greedy_and_cached_decode_match() {
    for name in LLAMA_CASES {
        let c = case(name);
        let r = reference(&c);
        let mut m = load_with(&script("llama"), &c);
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{name}: greedy ids differ from transformers");
    }
}

#[test]
fn the_script_is_chosen_from_the_checkpoint_architecture() {
    for (dir, want) in [
        ("llama/smollm_like_tied", "llama"),
        ("qwen3/gqa_tied_f32", "qwen3"),
    ] {
        let text =
            std::fs::read_to_string(root().join("tests/fixtures").join(dir).join("config.json"))
                .expect("config");
        let config: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            mllm_runtime::assets::script_for_config(&config).expect("script"),
            want
        );
    }
    let unknown =
        serde_json::json!({ "architectures": ["MysteryForCausalLM"], "model_type": "mystery" });
    let err = mllm_runtime::assets::script_for_config(&unknown).expect_err("unknown");
    assert!(
        err.contains("MysteryForCausalLM") && err.contains("--script"),
        "{err}"
    );
}
