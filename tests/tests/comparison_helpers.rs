//! The shared comparison helpers of `common` fail on garbage: a NaN or an
//! Inf on either side, or a zero vector for a cosine, panics instead of
//! being skipped by a `max`/`min` fold (issue #25: golden comparisons
//! passed on all-NaN logits). And a missing asset fails under `CI=true`.

mod common;

use common::*;

const GOOD: [f32; 4] = [1.0, -2.0, 0.5, 3.0];

fn with(at: usize, v: f32) -> Vec<f32> {
    let mut x = GOOD.to_vec();
    x[at] = v;
    x
}

#[test]
fn helpers_accept_finite_values() {
    assert_finite("good", &GOOD);
    assert_eq!(max_abs(&GOOD, &with(2, 0.25)), 0.25);
    assert!((cosine(&GOOD, &GOOD) - 1.0).abs() < 1e-12);
    let two_rows: Vec<f32> = GOOD.iter().chain(&GOOD).copied().collect();
    assert!((worst_cosine(&two_rows, &two_rows, 4) - 1.0).abs() < 1e-12);
    assert!((common::golden::worst_cosine(&two_rows, &two_rows, 4) - 1.0).abs() < 1e-12);
}

#[test]
#[should_panic(expected = "not finite")]
fn assert_finite_rejects_nan() {
    assert_finite("logits", &with(1, f32::NAN));
}

#[test]
#[should_panic(expected = "not finite")]
fn assert_finite_rejects_inf() {
    assert_finite("logits", &with(3, f32::NEG_INFINITY));
}

#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_nan() {
    // All-NaN output against a good reference: the old fold gave 0.
    max_abs(&[f32::NAN; 4], &GOOD);
}

#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_nan_in_the_reference() {
    max_abs(&GOOD, &with(0, f32::NAN));
}

#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_inf() {
    max_abs(&with(2, f32::INFINITY), &GOOD);
}

#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_equal_infinities() {
    // inf - inf is NaN, which the old fold skipped.
    max_abs(&with(2, f32::INFINITY), &with(2, f32::INFINITY));
}

#[test]
#[should_panic(expected = "not finite")]
fn cosine_rejects_nan() {
    cosine(&[f32::NAN; 4], &GOOD);
}

#[test]
#[should_panic(expected = "not finite")]
fn cosine_rejects_inf() {
    cosine(&GOOD, &with(1, f32::INFINITY));
}

#[test]
#[should_panic(expected = "zero vector")]
fn cosine_rejects_a_zero_vector() {
    cosine(&[0.0; 4], &GOOD);
}

#[test]
#[should_panic(expected = "not finite")]
fn worst_cosine_rejects_nan_in_one_row() {
    // Row 1 is NaN: the old `fold(1.0, f64::min)` dropped its NaN cosine
    // and reported row 0's 1.0.
    let good: Vec<f32> = GOOD.iter().chain(&GOOD).copied().collect();
    let mut bad = good.clone();
    bad[5] = f32::NAN;
    worst_cosine(&bad, &good, 4);
}

#[test]
#[should_panic(expected = "not finite")]
fn worst_cosine_rejects_inf() {
    let good: Vec<f32> = GOOD.iter().chain(&GOOD).copied().collect();
    let mut bad = good.clone();
    bad[0] = f32::INFINITY;
    common::golden::worst_cosine(&good, &bad, 4);
}

#[test]
#[should_panic(expected = "length mismatch")]
fn worst_cosine_rejects_a_length_mismatch() {
    // `zip` would compare only the common rows.
    let two_rows: Vec<f32> = GOOD.iter().chain(&GOOD).copied().collect();
    worst_cosine(&two_rows, &GOOD, 4);
}

#[test]
fn a_present_asset_is_returned() {
    let p = root().join("tests/fetch_assets.sh");
    assert_eq!(asset_or_skip_in(&p, true), Some(p.clone()));
    assert_eq!(asset_or_skip_in(&p, false), Some(p));
}

#[test]
fn a_missing_asset_skips_outside_ci() {
    assert_eq!(
        asset_or_skip_in(root().join(".cache/no-such-asset.gguf"), false),
        None
    );
}

#[test]
#[should_panic(expected = "CI=true")]
fn a_missing_asset_fails_under_ci() {
    asset_or_skip_in(root().join(".cache/no-such-asset.gguf"), true);
}
