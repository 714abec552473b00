//! The AVX-512 VNNI Q6_K tile on 512-bit vectors: a 128-value half of a
//! super-block is two registers (the low nibbles of its 64 `ql` bytes are
//! values 0-63, the high nibbles values 64-127), so one load of `ql`, one
//! broadcast of the 32 `qh` bytes and per-half variable shifts build 64
//! six-bit codes at a time, where the 256-bit tile built 32 with a scale
//! broadcast each. The four 16-value scales of a register come from one
//! permute of the block's sixteen i16 scales. Decode reads Qwen3's tied
//! 151936 x 1024 Q6_K LM head (128 MB) every token; this is its kernel.
//!
//! The integers are the twin's (`q * a` summed per 16 values, times the
//! i8 scale, `-32 * sum(scale * bsum)` folded in at the start), and each
//! super-block adds `(d * da) * isum` in the twin's order: bit-identical.

use std::arch::x86_64::*;

use super::block32::f16_at;
use super::k_quants::Ctx;
use crate::quant::QK_K;

/// Indices of `_mm512_permutexvar_epi16` that spread scales `4h..4h+4`
/// over the four 128-bit lanes (8 i16 lanes each).
#[inline(always)]
unsafe fn scale_index(h: i16) -> __m512i {
    let b = 4 * h;
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(b + 1), _mm_set1_epi16(b))),
        _mm256_set_m128i(_mm_set1_epi16(b + 3), _mm_set1_epi16(b + 2)),
    )
}

#[inline(always)]
unsafe fn hsum(v: __m512i) -> i32 {
    _mm512_reduce_add_epi32(v)
}

/// `R` weight rows by `C` activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let m4 = _mm512_set1_epi8(0x0F);
    // Register `lo` of a half holds groups 0 (values 0-31) and 1 (32-63):
    // their top bits are qh bits 0-1 and 2-3, moved to bits 4-5. Register
    // `hi` holds groups 2 and 3: qh bits 4-5 and 6-7.
    let half_mask = |a: u8, b: u8| {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi8(a as i8)),
            _mm256_set1_epi8(b as i8),
        )
    };
    let half_count = |a: i16, b: i16| {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    };
    let (mask_lo, shl_lo) = (half_mask(0x03, 0x0C), half_count(4, 2));
    let (mask_hi, shr_hi) = (half_mask(0x30, 0xC0), half_count(0, 2));
    let idx = [
        scale_index(0),
        scale_index(1),
        scale_index(2),
        scale_index(3),
    ];
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut d = [0.0f32; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut sc = [_mm512_setzero_si512(); R];
        let mut iacc = [[_mm512_setzero_si512(); C]; R];
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 210);
            if R == 1 {
                // The same block 8 rows ahead: with one row ahead (as the
                // 256-bit tiles fetch) the LM head ran at 1.3x the time per
                // byte of the interleaved Q4_0 tiles; 2 rows ahead 1.0x,
                // 8 rows ~0.85x (perf shares of a 1-thread Qwen3-0.6B
                // decode). Tiles of 2 or 4 rows were slower still (more
                // streams, no software prefetch).
                let next = p.wrapping_add(8 * ctx.row_bytes);
                for line in (0..210).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8);
                }
            }
            blk[r] = p;
            d[r] = f16_at(p.add(208));
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
            sc[r] = _mm512_castsi256_si512(sc16);
            // -32 * sum_k sc_k * bsum_k starts the integer sum (lane 0).
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                let bs = _mm256_loadu_si256(ctx.abs.add(bi * 16) as *const __m256i);
                let corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
                iacc[r][c] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
            }
        }
        for n in 0..2 {
            let mut q = [[_mm512_setzero_si512(); 2]; R];
            let mut s = [[_mm512_setzero_si512(); 2]; R];
            for r in 0..R {
                let p = blk[r];
                let ql = _mm512_loadu_si512(p.add(64 * n) as *const __m512i);
                let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    p.add(128 + 32 * n) as *const __m256i
                ));
                let lo = _mm512_and_si512(ql, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
                let tlo = _mm512_sllv_epi16(_mm512_and_si512(qh, mask_lo), shl_lo);
                let thi = _mm512_srlv_epi16(_mm512_and_si512(qh, mask_hi), shr_hi);
                q[r] = [_mm512_or_si512(lo, tlo), _mm512_or_si512(hi, thi)];
                s[r] = [
                    _mm512_permutexvar_epi16(idx[2 * n], sc[r]),
                    _mm512_permutexvar_epi16(idx[2 * n + 1], sc[r]),
                ];
            }
            for c in 0..C {
                let pa = ctx.aq.add((i + c) * k + sb * QK_K + 128 * n);
                let a = [
                    _mm512_loadu_si512(pa as *const __m512i),
                    _mm512_loadu_si512(pa.add(64) as *const __m512i),
                ];
                for r in 0..R {
                    for h in 0..2 {
                        // Codes are 0..63 (unsigned), activations int8:
                        // pairs fit i16, then times the scales into i32.
                        let p16 = _mm512_maddubs_epi16(q[r][h], a[h]);
                        iacc[r][c] = _mm512_dpwssd_epi32(iacc[r][c], p16, s[r][h]);
                    }
                }
            }
        }
        for c in 0..C {
            let da = *ctx.ad.add((i + c) * nsb + sb);
            for r in 0..R {
                acc[r][c] += (d[r] * da) * hsum(iacc[r][c]) as f32;
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            *ctx.out.add((i + c) * ctx.ldo + j + r) = acc[r][c];
        }
    }
}

/// The tile for `r` weight rows (1 or 4) by `c` activation rows (1 or 2).
pub(super) fn tile_fn(r: usize, c: usize) -> super::Tile<Ctx> {
    match (r, c) {
        (4, 2) => tile::<4, 2>,
        (4, _) => tile::<4, 1>,
        (_, 2) => tile::<1, 2>,
        _ => tile::<1, 1>,
    }
}
