//! Qwen3.5 text (hybrid Gated DeltaNet / gated attention layers) against
//! transformers 5.24: fixtures by `tests/fixtures/make_qwen3_5_fixtures.py`.
//! Decode carries each DeltaNet layer's conv and recurrent state in the
//! cache beside the attention layers' keys and values.

mod common;

use common::golden::*;

const CASES: &[&str] = &["qwen3_5_f32", "qwen3_5_bf16", "quant_scaled_f32"];

#[test]
fn prefill_logits_match_transformers() {
    prefill_matches("qwen3_5", CASES);
}

/// Within 3e-5, not 1e-5: the DeltaNet prefill is the chunked form, decode
/// the token-by-token recurrence (the loud bf16 case, 40 tokens through 3
/// recurrent layers, measures 1.2e-5; the f32 case 6e-6).
#[test]
fn cached_decode_equals_full_forward() {
    cached_decode_matches_within("qwen3_5", CASES, 3e-5);
}

#[test]
fn greedy_generation_matches_transformers() {
    greedy_matches("qwen3_5", CASES);
}

#[test]
fn conversion_keeps_logits_close() {
    conversion_keeps_cosine("qwen3_5", "quant_scaled_f32");
}
