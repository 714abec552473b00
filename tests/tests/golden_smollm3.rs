//! SmolLM3 (Llama with NoPE layers) against transformers 5.24: fixtures by
//! `tests/fixtures/make_smollm3_fixtures.py`.

mod common;

use common::golden::*;

const CASES: &[&str] = &["smollm3_f32", "smollm3_bf16", "quant_scaled_f32"];

#[test]
fn prefill_logits_match_transformers() {
    prefill_matches("smollm3", CASES);
}

#[test]
fn cached_decode_equals_full_forward() {
    cached_decode_matches("smollm3", CASES);
}

#[test]
fn greedy_generation_matches_transformers() {
    greedy_matches("smollm3", CASES);
}

#[test]
fn conversion_keeps_logits_close() {
    conversion_keeps_cosine("smollm3", "quant_scaled_f32");
}
