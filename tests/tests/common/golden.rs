//! The checks every architecture passes against transformers, shared by the
//! golden test of each family: prefill logits, cached decode against the
//! full forward, greedy ids, the script picked from `architectures[0]`, and
//! conversion to q8_0 / q4_k on the family's trained-like fixture.

use super::*;
use mllm_runtime::model_files::{self, load_model};

// Lives in `common` beside `max_abs` and `cosine` (all reject non-finite
// values); re-exported here for the tests that import it from `golden`.
pub use super::worst_cosine;

/// Prefill logits within 1e-4 (max-abs) of transformers' f32 logits.
pub fn prefill_matches(family: &str, cases: &[&str]) {
    for name in cases {
        let c = format!("{family}/{name}");
        let r = reference(&c);
        let mut m = load_auto(&c);
        let logits = m
            .step(&new_cache(), &r.input_ids, 0, false)
            .expect("forward");
        assert_eq!(logits.shape(), [r.input_ids.len(), r.vocab], "{c}: shape");
        let err = max_abs(&data(&logits), &r.logits);
        eprintln!("{c}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(err <= 1e-4, "{c}: max-abs error {err} exceeds 1e-4");
    }
}

/// Decoding token by token through the cache (after a 3-token prefill), and
/// a prefill in two chunks, equal the full forward within 1e-5.
pub fn cached_decode_matches(family: &str, cases: &[&str]) {
    cached_decode_matches_within(family, cases, 1e-5)
}

/// `cached_decode_matches` with another bound.
pub fn cached_decode_matches_within(family: &str, cases: &[&str], tol: f32) {
    for name in cases {
        let c = format!("{family}/{name}");
        let r = reference(&c);
        let mut m = load_auto(&c);
        let full = data(&m.step(&new_cache(), &r.input_ids, 0, false).expect("full"));
        let cache = new_cache();
        let mut rows = data(
            &m.step(&cache, &r.input_ids[..3], 0, false)
                .expect("prefill"),
        );
        for (i, &id) in r.input_ids.iter().enumerate().skip(3) {
            rows.extend(data(&m.step(&cache, &[id], i, false).expect("decode")));
        }
        let err = max_abs(&rows, &full);
        eprintln!("{c}: cached decode vs full forward max-abs = {err:.3e}");
        assert!(err <= tol, "{c}: cached decode differs by {err}");
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
        assert!(err <= tol, "{c}: chunked prefill differs by {err}");
    }
}

/// Greedy ids equal transformers' (the fixtures' EOS token appears midway,
/// so an engine stopping at EOS fails here).
pub fn greedy_matches(family: &str, cases: &[&str]) {
    for name in cases {
        let c = format!("{family}/{name}");
        let r = reference(&c);
        let mut m = load_auto(&c);
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(got, r.greedy, "{c}: greedy ids differ from transformers");
    }
}

/// `mllm convert` to q8_0 and q4_k keeps the worst per-position cosine
/// against the f32 reference at >= 0.999 and >= 0.99 on `case`.
pub fn conversion_keeps_cosine(family: &str, case: &str) {
    conversion_keeps_cosine_above(family, case, 0.99)
}

/// `conversion_keeps_cosine` with another q4_k bound.
pub fn conversion_keeps_cosine_above(family: &str, case: &str, q4_k: f64) {
    let c = format!("{family}/{case}");
    let r = reference(&c);
    let dir = tempfile::tempdir().expect("tmp");
    for (ty, target) in [("q8_0", 0.999), ("q4_k", q4_k)] {
        let out = dir.path().join(format!("{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(&c), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{c} {ty}: {e}"));
        let files = model_files::open(out.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let got = data(&full_logits(&model, &r.input_ids));
        let cos = worst_cosine(&got, &r.logits, r.vocab);
        eprintln!("{c} {ty}: worst per-position cosine vs f32 = {cos:.6}");
        assert!(cos >= target, "{c} {ty}: cosine {cos} < {target}");
    }
}

/// A case loaded with the built-in script its config's architecture picks.
pub fn load_auto(case: &str) -> Loaded {
    let text = std::fs::read_to_string(fixture(case).join("config.json")).expect("config");
    let config: serde_json::Value = serde_json::from_str(&text).expect("json");
    let script =
        mllm_runtime::assets::script_for_config(&config).unwrap_or_else(|e| panic!("{case}: {e}"));
    load_with(script, case)
}
