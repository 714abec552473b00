//! Qwen3 against Hugging Face transformers: tiny random-weight models made by
//! `tests/fixtures/make_qwen3_fixtures.py`, reference logits and greedy ids
//! committed beside them.

mod common;

use common::*;

#[test]
fn prefill_logits_match_transformers() {
    common::golden::prefill_matches("qwen3", QWEN3_CASES);
}

/// Token by token after a short prefill, and in two chunks.
#[test]
fn cached_decode_equals_full_forward() {
    common::golden::cached_decode_matches("qwen3", QWEN3_CASES);
}

#[test]
fn greedy_generation_matches_transformers() {
    common::golden::greedy_matches("qwen3", QWEN3_CASES);
}

#[test]
fn last_only_equals_last_row_of_full_logits() {
    let case = QWEN3_CASES[0];
    let r = reference(case);
    let mut m = load_case(case);
    let last = data(
        &m.step(&new_cache(), &r.input_ids, 0, true)
            .expect("last only"),
    );
    let n = r.input_ids.len();
    let err = max_abs(&last, &r.logits[(n - 1) * r.vocab..]);
    assert!(err <= 1e-4, "last row differs by {err}");
}
