//! W4A16 weights (groups of `g` 4-bit codes with an f16 scale) against f32
//! activations: the weights are decoded to floats in registers and
//! multiply-added with the activations, so no activation rounding happens.
//! A weight row is decoded once per tile of up to 4 activation rows.
//!
//! - scalar: the twin (per group `d * sum((q - 8) * x)`);
//! - AVX2 + FMA: 8 codes widened to f32 per step, scaled by `d` first, so
//!   one accumulator runs over all groups (only the order of float
//!   additions differs from the twin);
//! - NEON: the same with `vfmaq_f32`.
//!
//! AVX-512 is not used yet: decode is memory-bound, and prefill with f32
//! activations is what this type trades for accuracy.

use super::{Isa, Out};
use crate::quant::w4a16::group_bytes;

/// Scalar twin: weight row `row` (groups of `g`) against `x` (one row).
fn row_dot(g: usize, row: &[u8], x: &[f32]) -> f32 {
    let gb = group_bytes(g);
    let mut acc = 0.0f32;
    for (b, xs) in row.chunks_exact(gb).zip(x.chunks_exact(g)) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let (lo, hi) = xs.split_at(g / 2);
        let mut s = 0.0f32;
        for ((&q, &l), &h) in b[2..].iter().zip(lo).zip(hi) {
            s += ((q & 0x0F) as i32 - 8) as f32 * l + ((q >> 4) as i32 - 8) as f32 * h;
        }
        acc += d * s;
    }
    acc
}

/// `out [m][nr] = x [m][k] @ w^T` for `nr` rows of groups of `g`.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    isa: Isa,
    g: usize,
    w: &[u8],
    nr: usize,
    k: usize,
    x: &[f32],
    m: usize,
    out: Out,
) {
    let rb = k / g * group_bytes(g);
    for j in 0..nr {
        let row = &w[j * rb..(j + 1) * rb];
        let mut i = 0;
        while i < m {
            let c = (m - i).min(4);
            let mut acc = [0.0f32; 4];
            tile(isa, g, row, &x[i * k..(i + c) * k], k, c, &mut acc);
            for t in 0..c {
                *out.at(i + t, j) = acc[t];
            }
            i += c;
        }
    }
}

/// One weight row against `c` (1..=4) activation rows of `k`.
fn tile(isa: Isa, g: usize, row: &[u8], x: &[f32], k: usize, c: usize, acc: &mut [f32; 4]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked that the CPU has AVX2 + FMA + F16C
        // (Avx512Vnni implies them); `row` holds k / g groups, `x` c rows.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { x86::tile(g, row, x, k, c, acc) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot | Isa::NeonI8mm => unsafe { neon::tile(g, row, x, k, c, acc) },
        _ => {
            for t in 0..c {
                acc[t] = row_dot(g, row, &x[t * k..(t + 1) * k]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile(
        g: usize,
        row: &[u8],
        x: &[f32],
        k: usize,
        c: usize,
        out: &mut [f32; 4],
    ) {
        let gb = super::group_bytes(g);
        let mut acc = [_mm256_setzero_ps(); 4];
        let (mask, eight) = (_mm256_set1_epi32(0x0F), _mm256_set1_epi32(8));
        for (b, blk) in row.chunks_exact(gb).enumerate() {
            let d = _mm256_set1_ps(super::super::block32::f16_at(blk.as_ptr()));
            let qs = blk.as_ptr().add(2);
            let base = b * g;
            let mut t = 0;
            while t < g / 2 {
                let q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.add(t) as *const __m128i));
                let lo = _mm256_sub_epi32(_mm256_and_si256(q, mask), eight);
                let hi = _mm256_sub_epi32(_mm256_srli_epi32::<4>(q), eight);
                let wl = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d);
                let wh = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d);
                for r in 0..c {
                    let xp = x.as_ptr().add(r * k + base + t);
                    acc[r] = _mm256_fmadd_ps(wl, _mm256_loadu_ps(xp), acc[r]);
                    acc[r] = _mm256_fmadd_ps(wh, _mm256_loadu_ps(xp.add(g / 2)), acc[r]);
                }
                t += 8;
            }
        }
        for r in 0..c {
            out[r] = hsum(acc[r]);
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    pub(super) unsafe fn tile(
        g: usize,
        row: &[u8],
        x: &[f32],
        k: usize,
        c: usize,
        out: &mut [f32; 4],
    ) {
        let gb = super::group_bytes(g);
        let mut acc = [vdupq_n_f32(0.0); 4];
        for (b, blk) in row.chunks_exact(gb).enumerate() {
            let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let qs = blk.as_ptr().add(2);
            let base = b * g;
            let mut t = 0;
            while t < g / 2 {
                let q = vmovl_u8(vld1_u8(qs.add(t)));
                let lo = vsubq_s16(
                    vreinterpretq_s16_u16(vandq_u16(q, vdupq_n_u16(0x0F))),
                    vdupq_n_s16(8),
                );
                let hi = vsubq_s16(vreinterpretq_s16_u16(vshrq_n_u16::<4>(q)), vdupq_n_s16(8));
                let w = [
                    vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d),
                    vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d),
                    vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d),
                    vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d),
                ];
                for r in 0..c {
                    let xp = x.as_ptr().add(r * k + base + t);
                    let xh = xp.add(g / 2);
                    let mut a = acc[r];
                    a = vfmaq_f32(a, w[0], vld1q_f32(xp));
                    a = vfmaq_f32(a, w[1], vld1q_f32(xp.add(4)));
                    a = vfmaq_f32(a, w[2], vld1q_f32(xh));
                    a = vfmaq_f32(a, w[3], vld1q_f32(xh.add(4)));
                    acc[r] = a;
                }
                t += 8;
            }
        }
        for r in 0..c {
            out[r] = vaddvq_f32(acc[r]);
        }
    }
}
