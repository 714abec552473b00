//! Vectorised exponential-based unary maps (exp, sigmoid, SiLU, GELU exact
//! and with the tanh approximation) for AVX2 + FMA;
//! `elementwise::unary_scalar` is their reference twin, and the property
//! test below bounds the difference.
//!
//! `exp` is the classic range reduction `x = n ln2 + r` (ln2 split in two
//! parts), a degree-6 polynomial for `e^r` on |r| <= ln2/2, and `2^n` built
//! in the exponent bits: about 1 ulp from the libm value on the clamped
//! range. The maps are written so nothing cancels: `silu(x) = x / (1 +
//! e^-x)`, and GELU-tanh as `x * sigmoid(2 c (x + 0.044715 x^3))`, which is
//! `0.5 x (1 + tanh(c (..)))` exactly in real arithmetic.
//!
//! Exact GELU, `0.5 x (1 + erf(x / sqrt 2))` (BERT's `gelu`), needs erf,
//! which libm computes one value at a time (~9% of a BERT embedding run).
//! Here `1 + erf(z)` is computed from erfc, so nothing cancels for negative
//! `x`: `erfc(|z|) = t e^(-z^2 + P(t))` with `t = 1 / (1 + |z| / 2)` and
//! the degree-9 `P` of the Chebyshev fit Numerical Recipes calls `erfcc`
//! (relative error under 1.2e-7 everywhere, so far-negative `x`, whose
//! GELU is tiny, keep their relative accuracy; Abramowitz and Stegun
//! 7.1.26's absolute 1.5e-7 did not), then `1 + erf(z)` is `erfc(|z|)` for
//! `z < 0` and `2 - erfc(z)` otherwise. A tensor's last `len % 8` values go
//! through the same polynomials (padded), so a value's bits never depend on
//! where it sits.

use crate::op::UnaryOp;

/// Whether `op` has a vectorised path here.
pub fn has_fast_path(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Exp | UnaryOp::Sigmoid | UnaryOp::Silu | UnaryOp::Gelu | UnaryOp::GeluTanh
    )
}

/// `out[i] = op(x[i])` with the vectorised path; `false` (and `out`
/// untouched) when this CPU or `op` has none.
pub fn unary_fast(op: UnaryOp, x: &[f32], out: &mut [f32]) -> bool {
    if !has_fast_path(op) || x.len() != out.len() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if super::qlinear::Isa::allows_avx2() {
            // SAFETY: the features were detected; lengths are equal.
            unsafe { x86::unary(op, x, out) };
            return true;
        }
    }
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::op::UnaryOp;

    /// e^x, clamped below at -87.3 (results stay normal) and infinite above
    /// 88.72 (as libm); NaN stays NaN.
    #[inline(always)]
    unsafe fn exp(x: __m256) -> __m256 {
        let hi = _mm256_set1_ps(88.72);
        let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi);
        // max/min return their second operand for NaN: keep x there.
        let xc = _mm256_min_ps(hi, _mm256_max_ps(_mm256_set1_ps(-87.3), x));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_2e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_fmadd_ps(
            _mm256_mul_ps(p, r),
            r,
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        // 2^n in two halves: n reaches 128 near ln(f32::MAX), one past the
        // largest exponent a single factor can hold.
        let ni = _mm256_cvtps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(ni);
        let n2 = _mm256_sub_epi32(ni, n1);
        let pow2 = |k: __m256i| {
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                k,
                _mm256_set1_epi32(127),
            )))
        };
        let v = _mm256_mul_ps(_mm256_mul_ps(y, pow2(n1)), pow2(n2));
        _mm256_blendv_ps(v, _mm256_set1_ps(f32::INFINITY), over)
    }

    /// 1 / (1 + e^-x).
    #[inline(always)]
    unsafe fn sigmoid(x: __m256) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        let neg = _mm256_sub_ps(_mm256_setzero_ps(), x);
        _mm256_div_ps(one, _mm256_add_ps(one, exp(neg)))
    }

    /// 0.5 x (1 + erf(x / sqrt 2)), as the module's comment derives it.
    #[inline(always)]
    unsafe fn gelu(x: __m256) -> __m256 {
        let z = _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let az = _mm256_andnot_ps(_mm256_set1_ps(-0.0), z);
        let one = _mm256_set1_ps(1.0);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5), az, one));
        let mut p = _mm256_set1_ps(0.170_872_77);
        for c in [
            -0.822_152_23,
            1.488_515_9,
            -1.135_204,
            0.278_868_07,
            -0.186_288_06,
            0.096_784_18,
            0.374_091_96,
            1.000_023_7,
            -1.265_512_2,
        ] {
            p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
        }
        // erfc(|z|) = t e^(-z^2 + P(t)).
        let arg = _mm256_fnmadd_ps(az, az, p);
        let erfc = _mm256_mul_ps(t, exp(arg));
        let nonneg = _mm256_cmp_ps::<_CMP_GE_OQ>(z, _mm256_setzero_ps());
        let s = _mm256_blendv_ps(erfc, _mm256_sub_ps(_mm256_set1_ps(2.0), erfc), nonneg);
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), x), s)
    }

    #[inline(always)]
    unsafe fn map(op: UnaryOp, x: __m256) -> __m256 {
        match op {
            UnaryOp::Exp => exp(x),
            UnaryOp::Sigmoid => sigmoid(x),
            UnaryOp::Silu => _mm256_mul_ps(x, sigmoid(x)),
            UnaryOp::Gelu => gelu(x),
            _ => {
                // GeluTanh: x * sigmoid(2 c (x + 0.044715 x^3)).
                let c2 = _mm256_set1_ps(2.0 * (2.0f32 / std::f32::consts::PI).sqrt());
                let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
                let inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715), x3, x);
                _mm256_mul_ps(x, sigmoid(_mm256_mul_ps(c2, inner)))
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn unary(op: UnaryOp, x: &[f32], out: &mut [f32]) {
        let n = x.len() / 8 * 8;
        let mut i = 0;
        while i < n {
            let v = map(op, _mm256_loadu_ps(x.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            i += 8;
        }
        // The last `len % 8` values through the same polynomial (padded),
        // not libm: a value's bits must not depend on where it sits in the
        // tensor (one row alone, or among others in a step: row
        // invariance).
        let rest = x.len() - n;
        if rest > 0 {
            let mut buf = [0.0f32; 8];
            buf[..rest].copy_from_slice(&x[n..]);
            let v = map(op, _mm256_loadu_ps(buf.as_ptr()));
            _mm256_storeu_ps(buf.as_mut_ptr(), v);
            out[n..].copy_from_slice(&buf[..rest]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::unary_scalar;
    use proptest::prelude::*;

    const OPS: [UnaryOp; 5] = [
        UnaryOp::Exp,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
    ];

    /// Far-negative inputs, whose GELU is tiny: relative accuracy against
    /// erfc in f64 (`1 + erf` cancels there; the old absolute-error erfc
    /// was off by up to 6e-4 relative).
    #[test]
    fn gelu_keeps_relative_accuracy_far_left() {
        let x: Vec<f32> = (0..=200).map(|i| -12.0 + i as f32 * 0.05).collect();
        let mut out = vec![0.0; x.len()];
        if !unary_fast(UnaryOp::Gelu, &x, &mut out) {
            return; // no fast path on this CPU
        }
        for (&v, &f) in x.iter().zip(&out) {
            let r = 0.5 * v as f64 * libm::erfc(-(v as f64) * std::f64::consts::FRAC_1_SQRT_2);
            // Plus what rounding z^2 = x^2 / 2 to f32 moves e^(-z^2) by.
            let tol = 2e-6 + 2.5e-7 * (v as f64 * v as f64 / 2.0);
            let rel = ((f as f64 - r) / r).abs();
            assert!(
                rel < tol,
                "gelu({v}) = {f}, erfc says {r}: relative error {rel:e}"
            );
            let s = unary_scalar(UnaryOp::Gelu, v) as f64;
            let rel = ((s - r) / r).abs();
            assert!(
                rel < tol,
                "scalar gelu({v}) = {s}, erfc says {r}: relative error {rel:e}"
            );
        }
    }

    fn check(op: UnaryOp, x: &[f32]) -> Result<(), TestCaseError> {
        let mut out = vec![0.0; x.len()];
        if !unary_fast(op, x, &mut out) {
            return Ok(()); // no fast path on this CPU: nothing to compare
        }
        for (&v, &f) in x.iter().zip(&out) {
            let r = unary_scalar(op, v);
            if r.is_nan() || f.is_nan() {
                prop_assert!(r.is_nan() && f.is_nan(), "{op:?}({v}) = {f}, reference {r}");
                continue;
            }
            if r.is_infinite() {
                prop_assert_eq!(f, r, "{:?}({})", op, v);
                continue;
            }
            let tol = 2e-6 * r.abs() + 1e-7 * (1.0 + v.abs());
            prop_assert!((f - r).abs() <= tol, "{op:?}({v}) = {f}, reference {r}");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn fast_maps_match_the_scalar_twin(
            opi in 0usize..5,
            xs in prop::collection::vec(prop_oneof![-30.0f32..30.0, -100.0f32..100.0, -1e-3f32..1e-3], 0..67),
        ) {
            check(OPS[opi], &xs)?;
        }
    }

    #[test]
    fn edge_values() {
        let xs = [
            0.0,
            -0.0,
            88.0,
            88.7,
            89.0,
            200.0,
            -87.0,
            -88.0,
            -90.0,
            -200.0,
            f32::NAN,
            1e-30,
            -1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -3.04,
            -5.5,
        ];
        for op in OPS {
            // Exp's underflow below -87.3 is clamped to a tiny normal value.
            check(op, &xs).unwrap();
        }
    }
}
