//! Linear over Q4_0 / Q8_0 weights with 16 rows interleaved
//! (`quant::packed`: `Q4_0x16`, `Q8_0x16`), the layout the CPU backend
//! repacks weights into at load when it runs the AVX-512 VNNI kernels.
//!
//! Per block of a 16-row group and activation row, the 512-bit path runs 8
//! `vpdpbusd` (each: 4 codes of all 16 rows against 4 activation bytes
//! broadcast to every lane), then one conversion and one multiply-add for
//! all 16 rows, with the 16 scales as one vector. The plain 32-value tiles
//! (`block32`, `zmm`) instead pay a conversion, a scale broadcast and a
//! multiply-add per row and block, which made prefill bound by that float
//! work rather than by the integer dot products.
//!
//! The scalar twin (`gemm_scalar`, also the path of every other ISA)
//! computes the same integers block by block.

use super::act_quant::ActQ8;
use super::block32::Ctx;
use super::Isa;
use crate::quant::packed::ROWS;
use crate::quant::QK;

/// Per row-block bytes of the plain type: Q4_0 18, Q8_0 34.
const fn type_size(q8: bool) -> usize {
    if q8 {
        34
    } else {
        18
    }
}

/// Code of element `e` (0..32) of lane `l` in a group block at `p`.
#[inline(always)]
fn code<const Q8: bool>(p: &[u8], l: usize, e: usize) -> i32 {
    let chunks = &p[2 * ROWS..];
    if Q8 {
        let (t, j) = (e / 4, e % 4);
        chunks[t * 4 * ROWS + 4 * l + j] as i8 as i32
    } else {
        let half = e / 16;
        let (t, j) = ((e % 16) / 4, e % 4);
        let byte = chunks[t * 4 * ROWS + 4 * l + j];
        let nib = if half == 0 { byte & 0x0F } else { byte >> 4 };
        nib as i32 - 8
    }
}

/// The scalar twin: `out [m][nr] = act . w^T` for `nr` rows (whole groups).
fn gemm_scalar<const Q8: bool>(w: &[u8], nr: usize, act: &ActQ8, out: &mut [f32]) {
    let (m, nb) = (act.m, act.blocks_per_row());
    let gb = ROWS * type_size(Q8);
    for g in 0..nr / ROWS {
        for i in 0..m {
            let qs = &act.qs[i * act.k..(i + 1) * act.k];
            let ds = &act.d[i * nb..(i + 1) * nb];
            for l in 0..ROWS {
                let mut acc = 0.0f32;
                for b in 0..nb {
                    let p = &w[(g * nb + b) * gb..][..gb];
                    let d = half::f16::from_le_bytes([p[2 * l], p[2 * l + 1]]).to_f32();
                    let a = &qs[b * QK..(b + 1) * QK];
                    let isum: i32 = (0..QK).map(|e| code::<Q8>(p, l, e) * a[e] as i32).sum();
                    acc += (d * ds[b]) * isum as f32;
                }
                out[i * nr + g * ROWS + l] = acc;
            }
        }
    }
}

/// `out [m][nr] = act [m, k] . w [nr, k]^T` for `nr` rows (a multiple of
/// 16) of a packed weight (`q8`: Q8_0x16, else Q4_0x16).
pub(super) fn gemm<const Q8: bool>(isa: Isa, w: &[u8], nr: usize, act: &ActQ8, out: &mut [f32]) {
    let (m, nb) = (act.m, act.blocks_per_row());
    assert!(nr.is_multiple_of(ROWS) && w.len() == nr * nb * type_size(Q8) && out.len() == m * nr);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            let ctx = Ctx {
                w: w.as_ptr(),
                row_bytes: nb * type_size(Q8),
                nb,
                aq: act.qs.as_ptr(),
                ad: act.d.as_ptr(),
                asum: act.sum.as_ptr(),
                out: out.as_mut_ptr(),
                nr,
            };
            // SAFETY: the tiles read groups g < nr / 16 of `w` and rows
            // i..i+C < m of the activations and write those cells of
            // `out` (sizes checked above); the CPU has the features.
            unsafe { x86::run::<Q8>(&ctx, m) }
        }
        _ => gemm_scalar::<Q8>(w, nr, act, out),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{type_size, Ctx, ROWS};

    /// One 16-row group `g` against activation rows `i..i + C`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const Q8: bool, const C: usize>(ctx: &Ctx, g: usize, i: usize) {
        let (nb, k) = (ctx.nb, ctx.nb * 32);
        let gb = ROWS * type_size(Q8);
        let base = ctx.w.add(g * nb * gb);
        let offset = if Q8 { 128 } else { 8 };
        let mut facc = [_mm512_setzero_ps(); C];
        for b in 0..nb {
            let p = base.add(b * gb);
            let scales = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
            let codes = p.add(2 * ROWS);
            let mut ia = [[_mm512_setzero_si512(); 2]; C];
            for c in 0..C {
                let sa = *ctx.asum.add((i + c) * nb + b);
                ia[c][0] = _mm512_set1_epi32(-offset * sa);
            }
            let act = |c: usize, e: usize| -> __m512i {
                let a = ctx.aq.add((i + c) * k + b * 32 + e) as *const i32;
                _mm512_set1_epi32(a.read_unaligned())
            };
            if Q8 {
                for t in 0..8 {
                    let raw = _mm512_loadu_si512(codes.add(t * 64) as *const __m512i);
                    let wu = _mm512_xor_si512(raw, _mm512_set1_epi8(-128));
                    for c in 0..C {
                        ia[c][t & 1] = _mm512_dpbusd_epi32(ia[c][t & 1], wu, act(c, 4 * t));
                    }
                }
            } else {
                let mask = _mm512_set1_epi8(0x0F);
                for t in 0..4 {
                    let raw = _mm512_loadu_si512(codes.add(t * 64) as *const __m512i);
                    let lo = _mm512_and_si512(raw, mask);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                    for c in 0..C {
                        ia[c][0] = _mm512_dpbusd_epi32(ia[c][0], lo, act(c, 4 * t));
                        ia[c][1] = _mm512_dpbusd_epi32(ia[c][1], hi, act(c, 16 + 4 * t));
                    }
                }
            }
            for c in 0..C {
                let da = _mm512_set1_ps(*ctx.ad.add((i + c) * nb + b));
                let isum = _mm512_add_epi32(ia[c][0], ia[c][1]);
                facc[c] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scales, da), facc[c]);
            }
        }
        for c in 0..C {
            _mm512_storeu_ps(ctx.out.add((i + c) * ctx.nr + g * ROWS), facc[c]);
        }
    }

    /// Every group against every activation row, in tiles of up to 4 rows.
    pub(super) unsafe fn run<const Q8: bool>(ctx: &Ctx, m: usize) {
        for g in 0..ctx.nr / ROWS {
            let mut i = 0;
            while i < m {
                let c = (m - i).min(4);
                match c {
                    4 => tile::<Q8, 4>(ctx, g, i),
                    3 => tile::<Q8, 3>(ctx, g, i),
                    2 => tile::<Q8, 2>(ctx, g, i),
                    _ => tile::<Q8, 1>(ctx, g, i),
                }
                i += c;
            }
        }
    }
}
