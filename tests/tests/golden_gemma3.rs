//! Gemma 3 text (sliding-window and global layers, soft-capped logits) against transformers 5.24: fixtures by
//! `tests/fixtures/make_gemma3_fixtures.py`.

mod common;

use common::golden::*;

const CASES: &[&str] = &[
    "gemma3_f32",
    "gemma3_bf16",
    "quant_scaled_f32",
    "quant_trained_bf16",
];

#[test]
fn prefill_logits_match_transformers() {
    prefill_matches("gemma3", CASES);
}

#[test]
fn cached_decode_equals_full_forward() {
    cached_decode_matches("gemma3", CASES);
}

#[test]
fn greedy_generation_matches_transformers() {
    greedy_matches("gemma3", CASES);
}

/// q4_k measures 0.980 here (q8_0 0.9994), short of the 0.99 other
/// families meet, and the gap is this fixture's, not the format's: Gemma's
/// norms after the attention and the MLP write every block into the
/// residual stream at unit scale, so with random (not trained) norm gains
/// each layer's rounding error reaches the logits undamped. llama.cpp on
/// the same fixture (its converter, f32 GGUF -> llama-quantize) gives 0.961
/// at Q4_K_M, whose q6_k set is a subset of our recipe's, and 0.983 with
/// our recipe's types; our engine reproduces both figures from its files,
/// so kernels and dequantization agree, and from our own K-quant fit (as
/// accurate as llama.cpp's: 0.0715 vs 0.0713 relative RMS error here)
/// Q4_K_M's types give 0.967. The bound guards the figure; the same shapes
/// with trained weights meet 0.99 (below).
#[test]
fn conversion_keeps_logits_close() {
    conversion_keeps_cosine_above("gemma3", "quant_scaled_f32", 0.978);
}

/// On weights a trained network has (quant_trained_bf16: quant_scaled_f32's
/// shapes, trained on text), q4_k keeps the bound every other family meets:
/// the gap above is the random fixture's.
#[test]
fn conversion_of_trained_weights_keeps_logits_close() {
    conversion_keeps_cosine_above("gemma3", "quant_trained_bf16", 0.99);
}
