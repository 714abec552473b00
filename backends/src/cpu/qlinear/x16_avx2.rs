//! The AVX2 kernels of the interleaved 16-row layout (`x16`), for CPUs
//! without AVX-512: a tile is half a group, 8 rows, one 256-bit vector.
//!
//! Per 4-byte chunk of the 8 rows and activation row, one `vpmaddubsw`
//! against 4 activation bytes broadcast to every lane adds 4 products to
//! pairs of i16 of each row; the 16-bit sums then take one `vpmaddwd` per
//! block, and one conversion and one multiply-add per block serve all 8
//! rows (the plain `block32` tiles pay those per row). Without VNNI this is
//! what makes prefill and decode bound by the integer work, as llama.cpp's
//! repacked `q4_0_8x8` kernels are.
//!
//! Q4_0 and Q4_1 codes are nibbles (0..=15) and activation codes never
//! reach -128, so a pair is at most 2 * 15 * 127 = 3810 and a block's 8
//! pairs per lane sum to at most 30480: exact in i16. Q8_0 codes are signed
//! (|q| <= 128), so a pair reaches 32512 and each chunk's pairs are widened
//! at once; the sign trick (`|q|` times `a` with `q`'s sign) keeps them
//! exact, and needs no offset term. IQ4_NL's and MXFP4's table values
//! (|v| <= 127) are computed the same way, each chunk's nibbles looked up
//! first.
//!
//! The scalar twin is `x16::gemm_scalar`, checked against it in
//! `backends/tests/packed.rs` over random shapes.

use std::arch::x86_64::*;

use super::block32::Ctx;
use super::x16::{
    five_bits, has_min, head, looked_up, prefetch_block, table, type_size, MXFP4, PREFETCH_AHEAD,
    Q4_0, Q5_0, Q5_BIT, Q5_PICK, Q8_0,
};
use crate::quant::packed::ROWS;

/// Rows of a tile: half a group.
const HALF: usize = ROWS / 2;

/// `2^(e - 128)` of 8 e8m0 bytes at `p` (see `x16::x86::e8m0_x16`).
#[inline(always)]
unsafe fn e8m0_x8(p: *const u8) -> __m256 {
    let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small))
}

/// Rows `8h0..8(h0 + H)` of group `g` against activation rows `i..i + C`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const KIND: u8, const C: usize, const H: usize>(
    ctx: &Ctx,
    g: usize,
    h0: usize,
    i: usize,
) {
    let (nb, k) = (ctx.nb, ctx.nb * 32);
    let gb = ROWS * type_size(KIND);
    let base = ctx.w.add(g * nb * gb);
    let ones = _mm256_set1_epi16(1);
    let mask = _mm256_set1_epi8(0x0F);
    let mut facc = [[_mm256_setzero_ps(); C]; H];
    let mut fmin = [[_mm256_setzero_ps(); C]; H];
    // Decode tiles (both halves, see `run`) and the group's first tile in
    // a small batch stream their weights from memory (blocks prefetched
    // whole: the second half's tile finds them in cache).
    let ahead = if H == 2 || (i == 0 && h0 == 0 && ctx.m <= 8) {
        PREFETCH_AHEAD
    } else {
        0
    };
    for b in 0..nb {
        let p = base.add(b * gb);
        prefetch_block(p, gb, ahead);
        for hh in 0..H {
            let h = h0 + hh;
            let (facc, fmin) = (&mut facc[hh], &mut fmin[hh]);
            let scales = if KIND == MXFP4 {
                e8m0_x8(p.add(HALF * h))
            } else {
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * HALF * h) as *const __m128i))
            };
            let codes = p.add(head(KIND) * ROWS + HALF * 4 * h);
            let act = |c: usize, e: usize| -> __m256i {
                let a = ctx.aq.add((i + c) * k + b * 32 + e) as *const i32;
                _mm256_set1_epi32(a.read_unaligned())
            };
            let mut isum = [_mm256_setzero_si256(); C];
            if looked_up(KIND) {
                let tab = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    table(KIND).as_ptr() as *const __m128i
                ));
                // MXFP4's values stay within 12: a pair of products is at
                // most 2 * 12 * 127 = 3048 and a block's 8 pairs per lane
                // 24384, exact in i16, so the widening waits for the block's
                // end as Q4_0's does; IQ4_NL's (up to 127) widen per chunk.
                let mut s16 = [_mm256_setzero_si256(); C];
                for t in 0..4 {
                    let raw = _mm256_loadu_si256(codes.add(t * 4 * ROWS) as *const __m256i);
                    let lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(raw, mask));
                    let hi =
                        _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask));
                    for c in 0..C {
                        // Signed values: `|v|` by `a` with `v`'s sign, two
                        // products (<= 2 * 127 * 127) per i16.
                        let plo = _mm256_maddubs_epi16(
                            _mm256_abs_epi8(lo),
                            _mm256_sign_epi8(act(c, 4 * t), lo),
                        );
                        let phi = _mm256_maddubs_epi16(
                            _mm256_abs_epi8(hi),
                            _mm256_sign_epi8(act(c, 16 + 4 * t), hi),
                        );
                        if KIND == MXFP4 {
                            s16[c] = _mm256_add_epi16(s16[c], _mm256_add_epi16(plo, phi));
                        } else {
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(plo, ones));
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(phi, ones));
                        }
                    }
                }
                if KIND == MXFP4 {
                    for c in 0..C {
                        isum[c] = _mm256_madd_epi16(s16[c], ones);
                    }
                }
            } else if KIND == Q8_0 {
                for t in 0..8 {
                    let raw = _mm256_loadu_si256(codes.add(t * 4 * ROWS) as *const __m256i);
                    let wa = _mm256_abs_epi8(raw);
                    for c in 0..C {
                        let p16 = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(act(c, 4 * t), raw));
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p16, ones));
                    }
                }
            } else {
                let mut s16 = [_mm256_setzero_si256(); C];
                // Q5_0: chunk 0 holds the fifth bits, the nibbles follow;
                // its codes reach 31, so a chunk's two pairs per lane reach
                // 2 * 2 * 31 * 127 = 15748 and two chunks fill an i16:
                // widened every second chunk.
                let (qh, nibbles) = if five_bits(KIND) {
                    (
                        _mm256_loadu_si256(codes as *const __m256i),
                        codes.add(4 * ROWS),
                    )
                } else {
                    (_mm256_setzero_si256(), codes)
                };
                for t in 0..4 {
                    let raw = _mm256_loadu_si256(nibbles.add(t * 4 * ROWS) as *const __m256i);
                    let mut lo = _mm256_and_si256(raw, mask);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                    if five_bits(KIND) {
                        let bit = _mm256_loadu_si256(Q5_BIT[t % 2].as_ptr() as *const __m256i);
                        let fifth = |h: usize| {
                            let ix = Q5_PICK[2 * t + h].as_ptr() as *const __m256i;
                            let b = _mm256_and_si256(
                                _mm256_shuffle_epi8(qh, _mm256_loadu_si256(ix)),
                                bit,
                            );
                            _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(16))
                        };
                        lo = _mm256_or_si256(lo, fifth(0));
                        hi = _mm256_or_si256(hi, fifth(1));
                    }
                    for c in 0..C {
                        let plo = _mm256_maddubs_epi16(lo, act(c, 4 * t));
                        let phi = _mm256_maddubs_epi16(hi, act(c, 16 + 4 * t));
                        s16[c] = _mm256_add_epi16(s16[c], _mm256_add_epi16(plo, phi));
                        if five_bits(KIND) && t % 2 == 1 {
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], ones));
                            s16[c] = _mm256_setzero_si256();
                        }
                    }
                }
                for c in 0..C {
                    if !five_bits(KIND) {
                        isum[c] = _mm256_madd_epi16(s16[c], ones);
                    }
                    if KIND == Q4_0 || KIND == Q5_0 {
                        // `asum` holds `-8 * sum(a)` for Q4_0 and Q5_0
                        // (see `x16::gemm`); Q5_0's offset is 16.
                        let o = *ctx.asum.add((i + c) * nb + b);
                        let off = _mm256_set1_epi32(if KIND == Q5_0 { 2 * o } else { o });
                        isum[c] = _mm256_add_epi32(isum[c], off);
                    }
                }
            }
            for c in 0..C {
                let da = *ctx.ad.add((i + c) * nb + b);
                let scale = _mm256_mul_ps(scales, _mm256_set1_ps(da));
                facc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), scale, facc[c]);
                if has_min(KIND) {
                    let at = p.add(2 * ROWS + 2 * HALF * h) as *const __m128i;
                    let mins = _mm256_cvtph_ps(_mm_loadu_si128(at));
                    let sa = *ctx.asum.add((i + c) * nb + b);
                    fmin[c] = _mm256_fmadd_ps(mins, _mm256_set1_ps(da * sa as f32), fmin[c]);
                }
            }
        }
    }
    for hh in 0..H {
        for c in 0..C {
            let v = if has_min(KIND) {
                _mm256_add_ps(facc[hh][c], fmin[hh][c])
            } else {
                facc[hh][c]
            };
            _mm256_storeu_ps(
                ctx.out.add((i + c) * ctx.ldo + g * ROWS + HALF * (h0 + hh)),
                v,
            );
        }
    }
}

/// Every half group against every activation row, in tiles of up to 4
/// activation rows (each decoded weight chunk serves them all; more would
/// spill the 16 vector registers). With fewer than 4 rows (decode) a tile
/// takes both halves of a group, so each weight cache line is read once,
/// in order (against two passes over half lines: Q8_0 decode, 1 thread,
/// 23 -> 28 tok/s, measured on a busy machine).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `ctx` describes whole groups of a
/// packed weight of `KIND` and `m` activation rows (`x16::gemm` checks).
pub(super) unsafe fn run<const KIND: u8>(ctx: &Ctx, m: usize) {
    for g in 0..ctx.nr / ROWS {
        if m < 4 {
            for i in 0..m {
                tile::<KIND, 1, 2>(ctx, g, 0, i);
            }
            continue;
        }
        for h in 0..2 {
            let mut i = 0;
            while i < m {
                let c = (m - i).min(4);
                match c {
                    4 => tile::<KIND, 4, 1>(ctx, g, h, i),
                    3 => tile::<KIND, 3, 1>(ctx, g, h, i),
                    2 => tile::<KIND, 2, 1>(ctx, g, h, i),
                    _ => tile::<KIND, 1, 1>(ctx, g, h, i),
                }
                i += c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    use crate::quant::mxfp4::e8m0_to_fp32_half;

    #[target_feature(enable = "avx2")]
    unsafe fn x8(p: *const u8, out: &mut [f32; 8]) {
        _mm256_storeu_ps(out.as_mut_ptr(), super::e8m0_x8(p));
    }

    /// Every e8m0 byte becomes `e8m0_to_fp32_half`'s exact bits, 8 at a
    /// time (subnormals and the largest scales included).
    #[test]
    fn e8m0_x8_is_e8m0_to_fp32_half_for_every_byte() {
        assert!(
            std::arch::is_x86_feature_detected!("avx2"),
            "the x86 kernels need AVX2"
        );
        let bytes: Vec<u8> = (0..=255).collect();
        for c in bytes.chunks_exact(8) {
            let mut out = [0.0f32; 8];
            // SAFETY: 8 readable bytes; the CPU has AVX2 (asserted).
            unsafe { x8(c.as_ptr(), &mut out) };
            for (e, v) in c.iter().zip(out) {
                assert_eq!(v.to_bits(), e8m0_to_fp32_half(*e).to_bits(), "e = {e}");
            }
        }
    }
}
