//! The softmax denominator of a logits row, `sum(e^(x - top))`: a draft
//! model's confidence in its top token (`--draft-p-min`) needs it after
//! every draft step, over the whole vocabulary. libm's f64 `exp`, one
//! value at a time, took 250 us a row of SmolLM2's 49k tokens (~9% of the
//! draft's one-row step); here `e^x` is the attention kernels' `exp_neg`
//! (`attn_simd`: `vmath`'s polynomial, ~1e-7 relative) on AVX2 + FMA,
//! chosen at run time, or NEON: 24 us (elsewhere libm, as before). Each
//! of 16 lanes sums in f64 in the same order on both vector paths, and
//! `exp_neg_scalar` does their operations lane for lane, so they give the
//! bits of `exp_sum_scalar`. `exp_sum_reference` (libm, f64) is the twin
//! of the sum.

// Other CPUs sum with libm: the lane helpers serve only the tests there.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code, unused_imports)
)]

use super::attn_simd::exp_neg_scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::attn_simd::{exp_neg, Vf};

/// `sum(e^(v - top))` over the values `v` of `x` with `v >= floor` (NaN
/// never counts). `top` must be at least every counted value (the row's
/// maximum); a value 87.3 or more below it counts as `e^-87.3`.
pub fn exp_sum(x: &[f32], top: f32, floor: f32) -> f64 {
    if vector_path() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected.
        return unsafe { exp_sum_avx2(x, top, floor) };
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of every aarch64 target.
        return unsafe { exp_sum_with::<std::arch::aarch64::float32x4_t>(x, top, floor) };
    }
    // Without FMA in hardware the scalar twin's `mul_add`s are library
    // calls (1 ms a row of 49k): libm's exp is 4x faster there.
    exp_sum_reference(x, top, floor)
}

/// Whether `exp_sum` runs a vector path on this CPU.
fn vector_path() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::qlinear::Isa::allows_avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        cfg!(target_arch = "aarch64")
    }
}

/// `exp_sum`'s twin: libm's f64 `exp` per value.
pub fn exp_sum_reference(x: &[f32], top: f32, floor: f32) -> f64 {
    x.iter()
        .filter(|&&v| v >= floor)
        .map(|&v| ((v - top) as f64).exp())
        .sum()
}

const LANES: usize = 16;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum_avx2(x: &[f32], top: f32, floor: f32) -> f64 {
    exp_sum_with::<std::arch::x86_64::__m256>(x, top, floor)
}

/// Lanes of `V::N` values through `exp_neg`, 16 values a chunk.
///
/// # Safety
/// The CPU must have `V`'s features.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
unsafe fn exp_sum_with<V: Vf>(x: &[f32], top: f32, floor: f32) -> f64 {
    let mut acc = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        let mut e = [0f32; LANES];
        for j in (0..LANES).step_by(V::N) {
            let v = V::sub(V::load(c.as_ptr().add(j)), V::splat(top));
            exp_neg(v).store(e.as_mut_ptr().add(j));
        }
        add_lanes(&mut acc, c, &e, floor);
    }
    finish(&acc, chunks.remainder(), top, floor)
}

/// The same sum with `exp_neg_scalar`: the tests' check that the vector
/// paths give its bits.
#[cfg(test)]
fn exp_sum_scalar(x: &[f32], top: f32, floor: f32) -> f64 {
    let mut acc = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        let mut e = [0f32; LANES];
        for (e, &v) in e.iter_mut().zip(c) {
            *e = exp_neg_scalar(v - top);
        }
        add_lanes(&mut acc, c, &e, floor);
    }
    finish(&acc, chunks.remainder(), top, floor)
}

/// Adds the exponentials `e` of the chunk `c` whose values reach `floor`.
#[inline(always)]
fn add_lanes(acc: &mut [f64; LANES], c: &[f32], e: &[f32; LANES], floor: f32) {
    for ((a, &v), &e) in acc.iter_mut().zip(c).zip(e) {
        *a += if v >= floor { e as f64 } else { 0.0 };
    }
}

/// The lanes' total and the last values (fewer than a chunk).
fn finish(acc: &[f64; LANES], rest: &[f32], top: f32, floor: f32) -> f64 {
    let mut sum: f64 = acc.iter().sum();
    for &v in rest.iter().filter(|&&v| v >= floor) {
        sum += exp_neg_scalar(v - top) as f64;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The shared exponential, over the range a logits row gives it.
    #[test]
    fn exp_is_within_a_few_ulps_of_libm_down_to_minus_87() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = (x as f64).exp();
            worst = worst.max(((exp_neg_scalar(x) as f64 - want) / want).abs());
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Within 1e-6 of the f64 twin (the draft's threshold sees no
        /// difference), NaN and values below the floor left out, any
        /// length; the run-time path and the portable one agree to the bit.
        #[test]
        fn exp_sum_is_its_twin(
            mut x in proptest::collection::vec(-100.0f32..30.0, 0..700),
            holes in proptest::collection::vec((0usize..700, 0u8..3), 0..8),
            skip in prop_oneof![Just(40.0f32), 0.0f32..120.0],
        ) {
            for (at, kind) in holes {
                if !x.is_empty() {
                    let n = x.len();
                    x[at % n] = [f32::NAN, f32::NEG_INFINITY, -1e30][kind as usize];
                }
            }
            let top = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            prop_assume!(top.is_finite());
            let floor = top - skip;
            let got = exp_sum(&x, top, floor);
            let want = exp_sum_reference(&x, top, floor.max(top - 87.3));
            let below = x.iter().filter(|&&v| v >= floor && v < top - 87.3).count();
            // What the clamp adds for values more than 87.3 below the top.
            let want = want + below as f64 * (-87.3f32 as f64).exp();
            prop_assert!((got - want).abs() <= 1e-6 * want.max(f64::MIN_POSITIVE), "{} vs {}", got, want);
            // The vector paths (AVX2 here, NEON under qemu in CI) give the
            // scalar twin's bits; a CPU with neither sums with libm.
            if vector_path() {
                prop_assert_eq!(got.to_bits(), exp_sum_scalar(&x, top, floor).to_bits());
            }
        }
    }
}
