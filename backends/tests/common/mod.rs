//! Helpers the backend tests share (each test binary uses some of them).

#![allow(dead_code)]

use std::path::PathBuf;

/// Panics unless every value of `v` is finite. The checks below bound an
/// error by the reference's magnitude (`|a - b| <= tol * (1 + |b|)`), which
/// an Inf in the reference satisfies whatever `a` is, and compare bits,
/// which two equal NaNs satisfy: so the reference must be finite first.
#[track_caller]
pub fn assert_finite(name: &str, v: &[f32]) {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        panic!("{name}: value {i} of {} is {}: not finite", v.len(), v[i]);
    }
}

/// splitmix64 values in [-1, 1): reproducible inputs without a RNG crate.
pub fn vals(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The bytes of `tests/fixtures/DIR/NAME` at the repository root.
pub fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(dir)
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Little-endian f32s (the fixtures' `.dequant` files).
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bit equality with gguf-py's values, naming the first value that differs.
#[track_caller]
pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}[{i}]: got {g}, gguf-py says {w}"
        );
    }
}
