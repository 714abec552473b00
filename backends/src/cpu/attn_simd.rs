//! The few f32 vector operations the tiled attention kernels
//! (`attn_tiled`) are written in, for each ISA: AVX-512 (16 lanes), AVX2 +
//! FMA (8) and NEON (4). The kernels are generic over `Vf` and
//! `#[inline(always)]`, so each `#[target_feature]` entry point compiles
//! them with its own registers; the compiler's auto-vectorisation of the
//! same loops on arrays was tried first and left the tiles scalar.

/// An f32 vector of `N` lanes. Every method is `unsafe`: the caller must
/// run on a CPU with the implementation's features, and pointers must be
/// valid for `N` values.
pub(super) trait Vf: Copy {
    const N: usize;
    unsafe fn zero() -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// `a * b + c`, rounded once.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn max(a: Self, b: Self) -> Self;
    /// `2^n` for lanes holding integers in -126..=127.
    unsafe fn pow2i(n: Self) -> Self;
}

/// e^x for x <= 0 (a score minus its running maximum), `vmath`'s
/// algorithm: `x = n ln2 + r` (ln2 in two parts), a degree-6 polynomial
/// for `e^r`, `2^n` in the exponent bits; clamped at -87.3 so `2^n` stays
/// normal (e^-87.3 ~ 1.2e-38 stands for every smaller value).
#[inline(always)]
pub(super) unsafe fn exp_neg<V: Vf>(x: V) -> V {
    const MAGIC: f32 = 12_582_912.0;
    let x = V::max(x, V::splat(-87.3));
    // Round to nearest: adding 1.5 * 2^23 leaves no fraction bits.
    let n = V::sub(
        V::fma(x, V::splat(std::f32::consts::LOG2_E), V::splat(MAGIC)),
        V::splat(MAGIC),
    );
    let r = V::fma(n, V::splat(-0.693_359_4), x);
    let r = V::fma(n, V::splat(2.121_944_4e-4), r);
    let mut p = V::splat(1.987_569_1e-4);
    for c in [
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = V::fma(p, r, V::splat(c));
    }
    let y = V::fma(V::mul(p, r), r, V::add(r, V::splat(1.0)));
    V::mul(y, V::pow2i(n))
}

/// `exp_neg` in scalar code, lane for lane the same operations (the twin
/// of the vector kernels in `attn_order::sdpa_ordered_ref`).
pub(super) fn exp_neg_scalar(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let x = x.max(-87.3);
    let n = x.mul_add(std::f32::consts::LOG2_E, MAGIC) - MAGIC;
    let r = n.mul_add(-0.693_359_4, x);
    let r = n.mul_add(2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    for c in [
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = p.mul_add(r, c);
    }
    let y = (p * r).mul_add(r, r + 1.0);
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `dst = src` widened, with F16C in registers where the CPU has it (the
/// `half` crate's slice conversion calls out per 8 values).
pub(super) fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::qlinear::Isa::allows_avx2() && src.len() == dst.len() {
        // SAFETY: AVX2 implies F16C here (`Isa::allows_avx2`); equal lengths.
        unsafe { x86::widen(src, dst) };
        return;
    }
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Vf;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen(src: &[half::f16], dst: &mut [f32]) {
        let n = src.len();
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(s.add(i) as *const __m128i));
            _mm256_storeu_ps(d.add(i), x);
            i += 8;
        }
        while i < n {
            *d.add(i) = (*s.add(i)).to_f32();
            i += 1;
        }
    }

    impl Vf for __m512 {
        const N: usize = 16;
        #[inline(always)]
        unsafe fn zero() -> Self {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            _mm512_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm512_storeu_ps(p, self)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            _mm512_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            _mm512_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            _mm512_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            _mm512_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn pow2i(n: Self) -> Self {
            let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
        }
    }

    impl Vf for __m256 {
        const N: usize = 8;
        #[inline(always)]
        unsafe fn zero() -> Self {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            _mm256_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm256_storeu_ps(p, self)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            _mm256_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            _mm256_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            _mm256_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            _mm256_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn pow2i(n: Self) -> Self {
            let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::Vf;
    use std::arch::aarch64::*;

    impl Vf for float32x4_t {
        const N: usize = 4;
        #[inline(always)]
        unsafe fn zero() -> Self {
            vdupq_n_f32(0.0)
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            vdupq_n_f32(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            vld1q_f32(p)
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            vst1q_f32(p, self)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            vfmaq_f32(c, a, b)
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            vaddq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            vsubq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            vmulq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            vmaxq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn pow2i(n: Self) -> Self {
            let e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
            vreinterpretq_f32_s32(vshlq_n_s32::<23>(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `exp_neg` lane 0 against libm over -90..0 (below -87.3: the
    /// clamp's tiny normal value, as `vmath`'s exp gives).
    fn check(exp: impl Fn(f32) -> f32) {
        for x in [0.0, -0.0, f32::NEG_INFINITY, -87.3, -88.0] {
            assert_eq!(exp(x).to_bits(), exp_neg_scalar(x).to_bits(), "{x}");
        }
        for i in 0..20_000 {
            let x = -(i as f32) * 0.0045;
            let (got, want) = (exp(x), x.exp());
            // The scalar twin gives the very bits (attention's order).
            assert_eq!(got.to_bits(), exp_neg_scalar(x).to_bits(), "{x}");
            if x >= -87.3 {
                assert!((got - want).abs() <= 2e-7 * want, "{x}: {got} vs {want}");
            } else {
                assert!(got > 0.0 && got < 1.3e-38, "{x}: {got}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_neg_matches_libm_x86() {
        use std::arch::x86_64::{__m256, __m512};
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn e512(x: f32) -> f32 {
            let mut out = [0.0f32; 16];
            exp_neg(<__m512 as Vf>::splat(x)).store(out.as_mut_ptr());
            out[0]
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn e256(x: f32) -> f32 {
            let mut out = [0.0f32; 8];
            exp_neg(<__m256 as Vf>::splat(x)).store(out.as_mut_ptr());
            out[0]
        }
        let has = |f| std::arch::is_x86_feature_detected!("fma") && f;
        if has(std::arch::is_x86_feature_detected!("avx512f")) {
            // SAFETY: features detected.
            check(|x| unsafe { e512(x) });
        }
        if has(std::arch::is_x86_feature_detected!("avx2")) {
            check(|x| unsafe { e256(x) });
        }
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn exp_neg_matches_libm_neon() {
        use std::arch::aarch64::float32x4_t;
        check(|x| {
            let mut out = [0.0f32; 4];
            // SAFETY: NEON is part of every aarch64 target.
            unsafe { exp_neg(<float32x4_t as Vf>::splat(x)).store(out.as_mut_ptr()) };
            out[0]
        });
    }
}
