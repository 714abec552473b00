//! W8A8 weights (per row: an f32 scale and `k` int8 codes) against
//! activations quantized per token (`ActTok`: one scale per row of `x`).
//! Each output is one integer dot product over the whole row, scaled once:
//! `out = d_w * d_x * sum(q_w * q_x)`. The sum is exact in i32 for any
//! realistic `k` (|q| <= 127, so up to 133 000 values per row).
//!
//! - scalar: the twin every path must equal exactly (integers);
//! - AVX2: `maddubs(|w|, a * sign(w))` on 32 bytes (codes never reach -128);
//! - AVX-512 VNNI: `vpdpbusd(w + 128, a) - 128 * sum(a)`;
//! - NEON: `sdot` with dotprod, widening multiplies without.
//!
//! Rows need not be a multiple of 32 values: the tail is done in scalar.

use rayon::prelude::*;

use super::act_quant::round_to_i8;
use super::{Isa, Out};
use crate::cpu::refill;
use crate::quant::w8a8::row_scale;

/// Activations quantized per token: `qs [m][k]`, one scale and one code
/// sum per row.
#[derive(Default)]
pub struct ActTok {
    pub m: usize,
    pub k: usize,
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub sum: Vec<i32>,
}

impl ActTok {
    /// Quantizes `x [m, k]` into this value's buffers (reused).
    pub fn quantize_into(&mut self, x: &[f32], m: usize, k: usize) {
        assert_eq!(x.len(), m * k);
        (self.m, self.k) = (m, k);
        refill(&mut self.qs, m * k, 0);
        refill(&mut self.d, m, 0.0);
        refill(&mut self.sum, m, 0);
        if k > 0 {
            self.qs
                .par_chunks_mut(k)
                .zip(x.par_chunks(k))
                .zip(self.d.par_iter_mut().zip(self.sum.par_iter_mut()))
                .for_each(|((q, x), (d, s))| {
                    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                    *d = amax / 127.0;
                    let id = if *d != 0.0 { 1.0 / *d } else { 0.0 };
                    for (q, &v) in q.iter_mut().zip(x) {
                        *q = round_to_i8(v * id);
                    }
                    *s = q.iter().map(|&v| v as i32).sum();
                });
        }
    }
}

/// Scalar twin of one integer dot product.
fn dot_scalar(w: &[u8], a: &[i8]) -> i32 {
    w.iter()
        .zip(a)
        .map(|(&w, &a)| w as i8 as i32 * a as i32)
        .sum()
}

/// `sum(w * a)` over a row with the kernels of `isa` (available);
/// `sum_a` (the sum of `a`) is the VNNI path's offset correction.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn dot(isa: Isa, w: &[u8], a: &[i8], sum_a: i32) -> i32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked that the CPU has the features.
        Isa::Avx2 => unsafe { x86::dot_avx2(w, a) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => unsafe { x86::dot_vnni(w, a, sum_a) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::dot::<false>(w, a) },
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDot | Isa::NeonI8mm => unsafe { neon::dot_dotprod(w, a) },
        _ => dot_scalar(w, a),
    }
}

/// `out [m][nr] = x @ w^T` for `nr` weight rows of `k` values.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
pub(super) unsafe fn gemm(isa: Isa, w: &[u8], nr: usize, act: &ActTok, out: Out) {
    let k = act.k;
    let rb = k + 4;
    for j in 0..nr {
        let row = &w[j * rb..(j + 1) * rb];
        let (dw, codes) = (row_scale(row), &row[4..]);
        for i in 0..act.m {
            let a = &act.qs[i * k..(i + 1) * k];
            *out.at(i, j) = dw * act.d[i] * dot(isa, codes, a, act.sum[i]) as f32;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum_epi32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_avx2(w: &[u8], a: &[i8]) -> i32 {
        let n = w.len().min(a.len()) / 32 * 32;
        let mut acc = _mm256_setzero_si256();
        let ones = _mm256_set1_epi16(1);
        let mut i = 0;
        while i < n {
            let wv = _mm256_loadu_si256(w.as_ptr().add(i) as *const __m256i);
            let av = _mm256_loadu_si256(a.as_ptr().add(i) as *const __m256i);
            // |w| <= 127 and |a| <= 127: a pair stays below i16 saturation.
            let p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(av, wv));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, ones));
            i += 32;
        }
        hsum_epi32(acc) + super::dot_scalar(&w[n..], &a[n..])
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn dot_vnni(w: &[u8], a: &[i8], sum_a: i32) -> i32 {
        let n = w.len().min(a.len()) / 32 * 32;
        let mut acc = _mm256_setzero_si256();
        let flip = _mm256_set1_epi8(-128);
        let mut i = 0;
        while i < n {
            let wv = _mm256_loadu_si256(w.as_ptr().add(i) as *const __m256i);
            let av = _mm256_loadu_si256(a.as_ptr().add(i) as *const __m256i);
            acc = _mm256_dpbusd_epi32(acc, _mm256_xor_si256(wv, flip), av);
            i += 32;
        }
        // The unsigned weights were w + 128: remove 128 * sum(a) over the
        // vector part (the tail is summed directly).
        let tail_a: i32 = a[n..].iter().map(|&v| v as i32).sum();
        hsum_epi32(acc) - 128 * (sum_a - tail_a) + super::dot_scalar(&w[n..], &a[n..])
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    #[inline(always)]
    pub(super) unsafe fn dot<const DOT: bool>(w: &[u8], a: &[i8]) -> i32 {
        let n = w.len().min(a.len()) / 32 * 32;
        let mut acc = vdupq_n_s32(0);
        let mut i = 0;
        while i < n {
            let wp = w.as_ptr().add(i) as *const i8;
            let ap = a.as_ptr().add(i);
            let wv = [vld1q_s8(wp), vld1q_s8(wp.add(16))];
            let av = [vld1q_s8(ap), vld1q_s8(ap.add(16))];
            acc = vaddq_s32(acc, super::super::block32::dot_s8::<DOT>(wv, av));
            i += 32;
        }
        vaddvq_s32(acc) + super::dot_scalar(&w[n..], &a[n..])
    }

    #[target_feature(enable = "dotprod")]
    pub(super) unsafe fn dot_dotprod(w: &[u8], a: &[i8]) -> i32 {
        dot::<true>(w, a)
    }
}
