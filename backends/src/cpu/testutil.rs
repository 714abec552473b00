//! Helpers for the kernel property tests.

use proptest::test_runner::TestCaseError;

/// Deterministic pseudo-random values in [-2, 2) (splitmix64), so a failing
/// case is reproducible from its seed.
pub fn vec_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// Fails unless every element agrees within `tol * (1 + |expected|)`.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) -> Result<(), TestCaseError> {
    if got.len() != want.len() {
        return Err(TestCaseError::fail(format!(
            "length {} != {}",
            got.len(),
            want.len()
        )));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs());
        if !ok {
            return Err(TestCaseError::fail(format!(
                "element {i}: got {g}, want {w}"
            )));
        }
    }
    Ok(())
}
