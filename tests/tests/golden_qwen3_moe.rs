//! Qwen3-MoE (sparse experts, per-expert and fused checkpoints) against transformers 5.24: fixtures by
//! `tests/fixtures/make_qwen3_moe_fixtures.py`.

mod common;

use common::golden::*;

const CASES: &[&str] = &[
    "moe_f32",
    "moe_f32_fused",
    "moe_bf16_nonorm",
    "quant_scaled_f32",
];

#[test]
fn prefill_logits_match_transformers() {
    prefill_matches("qwen3_moe", CASES);
}

#[test]
fn cached_decode_equals_full_forward() {
    cached_decode_matches("qwen3_moe", CASES);
}

#[test]
fn greedy_generation_matches_transformers() {
    greedy_matches("qwen3_moe", CASES);
}

#[test]
fn conversion_keeps_logits_close() {
    conversion_keeps_cosine("qwen3_moe", "quant_scaled_f32");
}
