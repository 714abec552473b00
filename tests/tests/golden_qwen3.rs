//! Qwen3 against Hugging Face transformers: tiny random-weight models made by
//! `tests/fixtures/make_qwen3_fixtures.py`, reference logits and greedy ids
//! committed beside them.

mod common;

use common::*;

#[test]
fn prefill_logits_match_transformers() {
    for case in QWEN3_CASES {
        let r = reference(case);
        let mut m = load_case(case);
        let logits = m
            .step(&new_cache(), &r.input_ids, 0, false)
            .expect("forward");
        assert_eq!(
            logits.shape(),
            [r.input_ids.len(), r.vocab],
            "{case}: logits shape"
        );
        let err = max_abs(&data(&logits), &r.logits);
        eprintln!("{case}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(err <= 1e-4, "{case}: max-abs error {err} exceeds 1e-4");
    }
}

#[test]
fn cached_decode_equals_full_forward() {
    for case in QWEN3_CASES {
        let r = reference(case);
        let mut m = load_case(case);
        let full = data(
            &m.step(&new_cache(), &r.input_ids, 0, false)
                .expect("full forward"),
        );
        // Prefill a few tokens, then feed the rest one at a time.
        let split = 3;
        let cache = new_cache();
        let mut rows = data(
            &m.step(&cache, &r.input_ids[..split], 0, false)
                .expect("prefill"),
        );
        for (i, &id) in r.input_ids.iter().enumerate().skip(split) {
            rows.extend(data(&m.step(&cache, &[id], i, false).expect("decode step")));
        }
        let err = max_abs(&rows, &full);
        eprintln!("{case}: cached decode vs full forward max-abs = {err:.3e}");
        assert!(
            err <= 1e-5,
            "{case}: cached decode differs from the full forward by {err}"
        );
        // A second chunked prefill (two chunks) agrees as well.
        let cache = new_cache();
        let half = r.input_ids.len() / 2;
        let mut rows = data(
            &m.step(&cache, &r.input_ids[..half], 0, false)
                .expect("chunk 1"),
        );
        rows.extend(data(
            &m.step(&cache, &r.input_ids[half..], half, false)
                .expect("chunk 2"),
        ));
        let err = max_abs(&rows, &full);
        assert!(err <= 1e-5, "{case}: chunked prefill differs by {err}");
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    for case in QWEN3_CASES {
        let r = reference(case);
        let mut m = load_case(case);
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{case}: greedy ids differ from transformers");
    }
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
