//! Qwen2 (q/k/v biases, no o_proj bias) against transformers
//! (fixtures by `tests/fixtures/make_qwen2_fixtures.py`).

mod common;

use common::*;

const CASES: &[&str] = &["qwen2/gqa_tied_f32", "qwen2/untied_bf16"];

#[test]
fn prefill_and_greedy_match_transformers() {
    for case in CASES {
        let r = reference(case);
        // No script named: the built-in one for Qwen2ForCausalLM is used.
        let mut m = match mllm_runtime::load("qwen2", fixture(case).to_str().expect("utf-8")) {
            Ok(m) => m,
            Err(e) => panic!("{case}: {}", e.render(false)),
        };
        let logits = m
            .step(&new_cache(), &r.input_ids, 0, false)
            .expect("forward");
        let err = max_abs(&data(&logits), &r.logits);
        eprintln!("{case}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(err <= 1e-4, "{case}: max-abs error {err}");
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{case}: greedy ids differ");
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(case).join("config.json")).expect("config"),
        )
        .expect("json");
        assert_eq!(
            mllm_runtime::assets::script_for_config(&cfg).expect("script"),
            "qwen2"
        );
    }
}
