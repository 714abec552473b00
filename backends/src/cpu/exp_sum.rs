//! The softmax denominator of a logits row, `sum(e^(x - top))`: a draft
//! model's confidence in its top token (`--draft-p-min`) needs it after
//! every draft step, over the whole vocabulary. libm's f64 `exp`, one
//! value at a time, took 250 us a row of SmolLM2's 49k tokens (~9% of the
//! draft's one-row step); here `e^x` is `vmath`'s polynomial (range
//! reduction `x = n ln2 + r`, degree 6 on |r| <= ln2/2, `2^n` in the
//! exponent bits, ~1e-7 relative) in plain f32 arithmetic over 16 lanes,
//! which the compiler vectorizes on every target: NEON on Arm, SSE2 on any
//! x86 (52 us), AVX2 + FMA where the CPU has them, chosen at run time
//! (28 us). Each lane sums in f64, in the same order on every path, so the
//! paths agree to the bit. `exp_sum_reference` (libm, f64) is the twin.

/// `sum(e^(v - top))` over the values `v` of `x` with `v >= floor` (NaN
/// never counts). `top` must be at least every counted value (the row's
/// maximum); a value 87 or more below it counts as `e^-87`.
pub fn exp_sum(x: &[f32], top: f32, floor: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if super::qlinear::Isa::allows_avx2() {
            // SAFETY: AVX2 and FMA were detected.
            return unsafe { exp_sum_avx2(x, top, floor) };
        }
    }
    exp_sum_lanes(x, top, floor)
}

/// `exp_sum`'s twin: libm's f64 `exp` per value.
pub fn exp_sum_reference(x: &[f32], top: f32, floor: f32) -> f64 {
    x.iter()
        .filter(|&&v| v >= floor)
        .map(|&v| ((v - top) as f64).exp())
        .sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum_avx2(x: &[f32], top: f32, floor: f32) -> f64 {
    exp_sum_lanes(x, top, floor)
}

const LANES: usize = 16;

#[inline(always)]
fn exp_sum_lanes(x: &[f32], top: f32, floor: f32) -> f64 {
    let mut acc = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        // Two loops: with the select and the f64 sum in one, the
        // exponentials did not vectorize.
        let mut e = [0f32; LANES];
        for (e, &v) in e.iter_mut().zip(c) {
            let y = exp_le0(v - top);
            *e = if v >= floor { y } else { 0.0 };
        }
        for (a, &e) in acc.iter_mut().zip(&e) {
            *a += e as f64;
        }
    }
    let mut sum: f64 = acc.iter().sum();
    for &v in chunks.remainder() {
        if v >= floor {
            sum += exp_le0(v - top) as f64;
        }
    }
    sum
}

/// `e^x` for `x <= 0` (clamped below at -87, where the result is still
/// normal). Rust never fuses `a * b + c`, so every target rounds alike.
#[inline(always)]
fn exp_le0(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer, kept in the low mantissa
    // bits: `n` without a float-to-int conversion (a saturating `as i32`
    // kept the loop from vectorizing).
    const SHIFT: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let k = x * std::f32::consts::LOG2_E + SHIFT;
    let n = k - SHIFT;
    let r = x - n * 0.693_359_4;
    let r = r - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    for c in [
        1.398_2e-3f32,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = p * r + c;
    }
    let y = p * r * r + (r + 1.0);
    // 2^n: n + 127 in the exponent field (n in -126..=0 here).
    y * f32::from_bits(k.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exp_is_within_a_few_ulps_of_libm_down_to_minus_87() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = (x as f64).exp();
            worst = worst.max(((exp_le0(x) as f64 - want) / want).abs());
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
            let want = exp_sum_reference(&x, top, floor.max(top - 87.0));
            let below = x.iter().filter(|&&v| v >= floor && v < top - 87.0).count();
            // What the clamp adds for values more than 87 below the top.
            let want = want + below as f64 * (-87.0f64).exp();
            prop_assert!((got - want).abs() <= 1e-6 * want.max(f64::MIN_POSITIVE), "{} vs {}", got, want);
            prop_assert_eq!(got.to_bits(), exp_sum_lanes(&x, top, floor).to_bits());
        }
    }
}
