//! K-quant decode tiles of four weight rows that finish the four rows
//! together. A one-row tile spends most of a super-block after its
//! products: a horizontal sum, the minimum term and the float finish, per
//! row (~30 cycles per super-block on an AMD EPYC core with the weight in
//! cache, where llama.cpp's interleaved Q4_K decodes 1.2x faster at one
//! thread). Here the four rows' integer sums are reduced together (three
//! `vphaddd`s for all four), their minimum terms too, and the float finish
//! runs once on a 4-lane vector: lane `r` computes exactly `finish_q4k`'s
//! `(d * da) * isum - (dmin * da) * imin` for row `r`, separate multiplies
//! and subtract as the twin, so the bits are the twin's (IQ4_XS: `(d * da)
//! * isum`, and Q3_K's likewise). Q6_K's AVX2 tile (`tile_q6k_seq`) computes
//! its four rows in turn and shares only the finish (see `tile_fn`).

use std::arch::x86_64::*;

use super::tq2::x86::tile_tq2_rows4;
use super::x86::{
    iq4_values2, iq4xs_rows, madd_scaled, prefetch_next_row, q4k_codes, q4k_rows, scale_at, IqRows,
    Q4Rows,
};
use super::x86_per16::{
    per16_dots, q2_codes, q2_rows, q3_codes, q6_rows, q6_start, q6k_codes, Q2Rows, Q6Rows, F_Q3,
    F_Q6,
};
use super::{store, Ctx, Kind, Tile};
use crate::quant::QK_K;

/// Rows per tile.
const R: usize = 4;
/// The rows of the tile this many tiles on are prefetched as contiguous
/// bytes, a slice per super-block: per-block prefetches of the four rows
/// (as the one-row tiles fetch the same block 8 rows ahead) streamed at
/// half the speed (qbench GEMV cold 0.19 vs 0.09 ms). A prefetch never
/// faults, wherever it points.
const AHEAD: usize = 2;

/// `[sum(a), sum(b), sum(c), sum(d)]` of four vectors of i32 (exact).
#[inline(always)]
unsafe fn sums4(v: [__m256i; 4]) -> __m128i {
    let ab = _mm256_hadd_epi32(v[0], v[1]);
    let cd = _mm256_hadd_epi32(v[2], v[3]);
    let abcd = _mm256_hadd_epi32(ab, cd);
    _mm_add_epi32(
        _mm256_castsi256_si128(abcd),
        _mm256_extracti128_si256(abcd, 1),
    )
}

/// The same for four vectors of four i32.
#[inline(always)]
unsafe fn sums4x(v: [__m128i; 4]) -> __m128i {
    _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]))
}

/// `finish_q4k` for four rows, lane by lane: `(d * da) * isum - (dmin *
/// da) * imin` with separate multiplies and subtract, as the twin.
#[inline(always)]
unsafe fn finish4(d: &[f32; R], dmin: &[f32; R], da: f32, isum: __m128i, imin: __m128i) -> __m128 {
    let da = _mm_set1_ps(da);
    let dd = _mm_mul_ps(_mm_loadu_ps(d.as_ptr()), da);
    let dm = _mm_mul_ps(_mm_loadu_ps(dmin.as_ptr()), da);
    _mm_sub_ps(
        _mm_mul_ps(dd, _mm_cvtepi32_ps(isum)),
        _mm_mul_ps(dm, _mm_cvtepi32_ps(imin)),
    )
}

/// `(d * da) * isum` for four rows, lane by lane, as the twins of the
/// types without mins (Q6_K, Q3_K, IQ4_XS).
#[inline(always)]
unsafe fn finish_d4(d: &[f32; R], da: f32, isum: __m128i) -> __m128 {
    let dd = _mm_mul_ps(_mm_loadu_ps(d.as_ptr()), _mm_set1_ps(da));
    _mm_mul_ps(dd, _mm_cvtepi32_ps(isum))
}

/// The four rows' sums into output `[i][j..j + 4]`.
#[inline(always)]
unsafe fn store4(ctx: &Ctx, j: usize, i: usize, acc: __m128) {
    let mut out = [0.0f32; R];
    _mm_storeu_ps(out.as_mut_ptr(), acc);
    store::<R, 1>(ctx, j, i, &out.map(|v| [v]));
}

/// Q4_K/Q5_K rows `j..j + 4` by activation row `i` (the codes as
/// `x86::tile_q4k` takes them).
#[inline(always)]
unsafe fn tile<const VNNI: bool, const Q5: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut acc = _mm_setzero_ps();
    for sb in 0..nsb {
        let mut q: Q4Rows<R> = q4k_rows::<R, Q5>(ctx, j, sb);
        prefetch_ahead(ctx, j, sb);
        let pa = ctx.aq.add(i * k + sb * QK_K);
        let mut iacc = [_mm256_setzero_si256(); R];
        unroll!(pp in [0, 1, 2, 3] {
            let alo = _mm256_loadu_si256(pa.add(64 * pp) as *const __m256i);
            let ahi = _mm256_loadu_si256(pa.add(64 * pp + 32) as *const __m256i);
            for r in 0..R {
                let (lo, hi) = q4k_codes::<Q5>(q.qs[r], pp, &mut q.hb[r]);
                iacc[r] = madd_scaled::<VNNI>(iacc[r], lo, alo, scale_at(q.sc[r], 2 * pp));
                iacc[r] = madd_scaled::<VNNI>(iacc[r], hi, ahi, scale_at(q.sc[r], 2 * pp + 1));
            }
        });
        let isum = sums4(iacc);
        // The minimum terms: the per-32 activation sums once, then each
        // row's eight mins against them (`x86::min_sum_simd`, four rows).
        let bi = i * nsb + sb;
        let bs = ctx.abs.add(bi * 16);
        let b32 = _mm_hadd_epi16(
            _mm_loadu_si128(bs as *const __m128i),
            _mm_loadu_si128(bs.add(8) as *const __m128i),
        );
        let imin = sums4x(q.mn.map(|mn| _mm_madd_epi16(mn, b32)));
        acc = _mm_add_ps(acc, finish4(&q.d, &q.dmin, *ctx.ad.add(bi), isum, imin));
    }
    store4(ctx, j, i, acc);
}

/// The prefetch of the tile `AHEAD` tiles on, slice `sb` of `nsb`.
#[inline(always)]
pub(super) unsafe fn prefetch_ahead(ctx: &Ctx, j: usize, sb: usize) {
    let ahead = ctx.w.wrapping_add((j + AHEAD * R) * ctx.row_bytes);
    let lines = (R * ctx.row_bytes).div_ceil(64);
    for line in sb * lines / ctx.nsb..(sb + 1) * lines / ctx.nsb {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line) as *const i8);
    }
}

/// IQ4_XS rows `j..j + 4` by activation row `i` (the codes as
/// `x86::tile_iq4xs` takes them).
#[inline(always)]
unsafe fn tile_iq4xs<const VNNI: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut acc = _mm_setzero_ps();
    for sb in 0..nsb {
        let q: IqRows<R> = iq4xs_rows::<R>(ctx, j, sb);
        prefetch_ahead(ctx, j, sb);
        let pa = ctx.aq.add(i * k + sb * QK_K);
        let mut iacc = [_mm256_setzero_si256(); R];
        unroll!(t in [0, 2, 4, 6] {
            // |a| once for the four rows; a's sign moves to the table
            // values: |a| * (v * sign(a)) is each product v * a (and at
            // most 2 * 128 * 127 per pair, so `vpmaddubsw` cannot saturate).
            let a0 = _mm256_loadu_si256(pa.add(32 * t) as *const __m256i);
            let a1 = _mm256_loadu_si256(pa.add(32 * t + 32) as *const __m256i);
            let (u0, u1) = (_mm256_abs_epi8(a0), _mm256_abs_epi8(a1));
            for r in 0..R {
                let (v0, v1) = iq4_values2(q.blk[r].add(8 + 16 * t));
                let (s0, s1) = (_mm256_sign_epi8(v0, a0), _mm256_sign_epi8(v1, a1));
                iacc[r] = madd_scaled::<VNNI>(iacc[r], u0, s0, scale_at(q.sc[r], t));
                iacc[r] = madd_scaled::<VNNI>(iacc[r], u1, s1, scale_at(q.sc[r], t + 1));
            }
        });
        let isum = sums4(iacc);
        acc = _mm_add_ps(acc, finish_d4(&q.d, *ctx.ad.add(i * nsb + sb), isum));
    }
    store4(ctx, j, i, acc);
}

/// Q2_K rows `j..j + 4` by activation row `i` (the products as
/// `x86::tile_q2k` takes them).
#[inline(always)]
unsafe fn tile_q2k<const VNNI: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let mut acc = _mm_setzero_ps();
    for sb in 0..nsb {
        let q: Q2Rows<R> = q2_rows(ctx, j, sb);
        prefetch_ahead(ctx, j, sb);
        let mut iacc = [[_mm256_setzero_si256(); 1]; R];
        let mut iacc2 = [[_mm256_setzero_si256(); 1]; R];
        per16_dots::<R, 1, VNNI>(
            ctx,
            i,
            sb,
            &q.halves,
            |r, n, g| q2_codes(q.qs[r], n, g),
            &mut iacc,
            &mut iacc2,
        );
        let isum = sums4(std::array::from_fn(|r| {
            _mm256_add_epi32(iacc[r][0], iacc2[r][0])
        }));
        let bi = i * nsb + sb;
        let bs = _mm256_loadu_si256(ctx.abs.add(bi * 16) as *const __m256i);
        let imin = sums4(q.mn.map(|m| _mm256_madd_epi16(m, bs)));
        acc = _mm_add_ps(acc, finish4(&q.d, &q.dmin, *ctx.ad.add(bi), isum, imin));
    }
    store4(ctx, j, i, acc);
}

/// Q3_K rows `j..j + 4` by activation row `i` (the products as
/// `x86_per16::tile_q6k::<.., true>` takes them).
#[inline(always)]
unsafe fn tile_q3k<const VNNI: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let mut acc = _mm_setzero_ps();
    for sb in 0..nsb {
        let q: Q6Rows<R> = q6_rows::<R, F_Q3>(ctx, j, sb);
        prefetch_ahead(ctx, j, sb);
        let bi = i * nsb + sb;
        let mut iacc = [[_mm256_setzero_si256(); 1]; R];
        for r in 0..R {
            iacc[r][0] = q6_start::<F_Q3>(q.sc16[r], ctx.abs.add(bi * 16));
        }
        let mut iacc2 = [[_mm256_setzero_si256(); 1]; R];
        per16_dots::<R, 1, VNNI>(
            ctx,
            i,
            sb,
            &q.halves,
            |r, n, g| q3_codes(q.blk[r], n, g),
            &mut iacc,
            &mut iacc2,
        );
        let isum = sums4(std::array::from_fn(|r| {
            _mm256_add_epi32(iacc[r][0], iacc2[r][0])
        }));
        acc = _mm_add_ps(acc, finish_d4(&q.d, *ctx.ad.add(bi), isum));
    }
    store4(ctx, j, i, acc);
}

/// Q6_K rows `j..j + 4` by activation row `i`, each row's products in the
/// one-row tiles' order (a row at a time, prefetching 8 rows ahead, which
/// streams at memory speed where the interleaved four-row order did not:
/// see `tile_fn`), the four rows' per-super-block sums kept and finished
/// together. Lane `r` adds row `r`'s super-blocks in order, as the twin.
#[inline(always)]
unsafe fn tile_q6k_seq(ctx: &Ctx, j: usize, i: usize) {
    /// Super-blocks per pass: 16 x 4 sums of 32 bytes stay on the stack.
    const CHUNK: usize = 16;
    let nsb = ctx.nsb;
    let mut acc = _mm_setzero_ps();
    let mut s0 = 0;
    while s0 < nsb {
        let len = CHUNK.min(nsb - s0);
        let mut sums = [[_mm256_setzero_si256(); R]; CHUNK];
        let mut d = [[0.0f32; R]; CHUNK];
        for r in 0..R {
            for c in 0..len {
                let sb = s0 + c;
                let q: Q6Rows<1> = q6_rows::<1, F_Q6>(ctx, j + r, sb);
                prefetch_next_row::<1>(q.blk[0], ctx.row_bytes, 210);
                let bi = i * nsb + sb;
                let mut iacc = [[q6_start::<F_Q6>(q.sc16[0], ctx.abs.add(bi * 16))]];
                let mut iacc2 = [[_mm256_setzero_si256()]];
                per16_dots::<1, 1, false>(
                    ctx,
                    i,
                    sb,
                    &q.halves,
                    |_, n, g| q6k_codes::<F_Q6>(q.blk[0], n, g),
                    &mut iacc,
                    &mut iacc2,
                );
                sums[c][r] = _mm256_add_epi32(iacc[0][0], iacc2[0][0]);
                d[c][r] = q.d[0];
            }
        }
        for c in 0..len {
            let da = *ctx.ad.add(i * nsb + s0 + c);
            acc = _mm_add_ps(acc, finish_d4(&d[c], da, sums4(sums[c])));
        }
        s0 += len;
    }
    store4(ctx, j, i, acc);
}

/// A pair of `#[target_feature]` entry points (AVX2, AVX-512 VNNI) per tile.
macro_rules! wrappers {
    ($($avx2:ident, $vnni:ident => $tile:ident $(, $g:tt)*;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $avx2(ctx: &Ctx, j: usize, i: usize) {
            $tile::<false $(, $g)*>(ctx, j, i)
        }
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
        unsafe fn $vnni(ctx: &Ctx, j: usize, i: usize) {
            $tile::<true $(, $g)*>(ctx, j, i)
        }
    )*};
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_avx2(ctx: &Ctx, j: usize, i: usize) {
    tile_q6k_seq(ctx, j, i)
}

wrappers! {
    q4k_avx2, q4k_vnni => tile, false;
    q5k_avx2, q5k_vnni => tile, true;
    iq4xs_avx2, iq4xs_vnni => tile_iq4xs;
    q2k_avx2, q2k_vnni => tile_q2k;
    q3k_avx2, q3k_vnni => tile_q3k;
    tq2_avx2, tq2_vnni => tile_tq2_rows4;
}

/// The four-row tile of `kind` (Q4_K, Q5_K, IQ4_XS, Q2_K, Q3_K) by one activation row, if
/// there is one.
pub(super) fn tile_fn(kind: Kind, vnni: bool) -> Option<Tile<Ctx>> {
    Some(match (kind, vnni) {
        (Kind::Q4K, false) => q4k_avx2,
        (Kind::Q5K, false) => q5k_avx2,
        (Kind::Q4K, true) => q4k_vnni,
        (Kind::Q5K, true) => q5k_vnni,
        (Kind::IQ4XS, false) => iq4xs_avx2,
        (Kind::IQ4XS, true) => iq4xs_vnni,
        (Kind::Q2K, false) => q2k_avx2,
        (Kind::Q2K, true) => q2k_vnni,
        (Kind::Q3K, false) => q3k_avx2,
        (Kind::Q3K, true) => q3k_vnni,
        // Q6_K: rows in turn (`tile_q6k_seq`). Interleaved as the others
        // (the Q3_K tile with Q6_K's codes, 256- or 512-bit) it was faster with the
        // weight in cache (qbench GEMV hot 0.095 -> 0.081 ms) but streamed
        // from memory at half speed (cold 0.13 -> 0.22 ms); why is open. On
        // AVX-512 the 512-bit one-row tile (`k_zmm`) streams faster than
        // either (qbench GEMV cold 52-54 vs 41-45 GFLOP/s).
        (Kind::Q6K, false) => q6k_avx2,
        (Kind::Q6K, true) => return None,
        // Q8_KS (IQ2 files): the one-row tiles of `x86`.
        (Kind::Q8KS, _) => return None,
        // TQ2_0: the four rows share each activation load and sum.
        (Kind::TQ2, false) => tq2_avx2,
        (Kind::TQ2, true) => tq2_vnni,
    })
}
