//! The AVX2 and AVX-512 VNNI tiles of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
//! (256-bit; the 512-bit Q6_K tile is `k_zmm`): those of the types with a
//! scale per 16 values (Q2_K, Q3_K, Q6_K) are in `x86_per16`, TQ2_0's in
//! `tq2`, the helpers and the dispatch here.

use std::arch::x86_64::*;

use super::super::block32::f16_at;
use super::tq2::x86::tile_tq2;
use super::x86_per16::{tile_q2k, tile_q6k, F_Q3, F_Q6, F_Q8};
use super::{finish_q4k, iq4xs_scales, store, unpack_scales_u32, Ctx, Kind, Tile};
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::QK_K;

#[inline(always)]
pub(super) unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)))
}

/// The eight 6-bit scales of a Q4_K/Q5_K super-block as i16 in both
/// 128-bit halves, and its eight mins as i16.
#[inline(always)]
pub(super) unsafe fn scales_mins(p: *const u8) -> (__m256i, __m128i) {
    let u = unpack_scales_u32(std::slice::from_raw_parts(p, 12));
    let sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, u[1] as i32, u[0] as i32));
    let mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, u[3] as i32, u[2] as i32));
    (_mm256_set_m128i(sc, sc), mn)
}

/// Scale `j` (of `scales_mins`) in every i16 lane.
#[inline(always)]
pub(super) unsafe fn scale_at(sc: __m256i, j: usize) -> __m256i {
    // Bytes 2j, 2j + 1 (lane j) into every lane: one broadcast mask.
    let pick = (((2 * j + 1) << 8) | (2 * j)) as i16;
    _mm256_shuffle_epi8(sc, _mm256_set1_epi16(pick))
}

/// `sum_j mins_j * (sum of the 32 activation codes of sub-block j)` from
/// the 16 per-16 sums at `bs`: the integer `min_sum` computes.
#[inline(always)]
unsafe fn min_sum_simd(mn: __m128i, bs: *const i16) -> i32 {
    let lo = _mm_loadu_si128(bs as *const __m128i);
    let hi = _mm_loadu_si128(bs.add(8) as *const __m128i);
    // Per-32 sums reach 2 * 16 * 127: exact in i16.
    let s = _mm_madd_epi16(mn, _mm_hadd_epi16(lo, hi));
    let s2 = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)))
}

/// One-row tiles: fetch the same super-block 8 rows ahead (one row ahead
/// kept too few lines in flight: see `k_zmm`, where 8 rows took the LM
/// head from 1.3x to ~0.85x the time per byte of the Q4_0 tiles). A
/// prefetch never faults, wherever it points.
#[inline(always)]
pub(super) unsafe fn prefetch_next_row<const R: usize>(
    p: *const u8,
    row_bytes: usize,
    size: usize,
) {
    if R == 1 {
        let next = p.wrapping_add(8 * row_bytes);
        for line in (0..size).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8);
        }
    }
}

/// `acc + sum over pairs (u * a) * s`: u8 x i8 products summed in
/// pairs to i16, then multiplied by the i16 scales `s` and summed in
/// pairs into the eight i32 lanes.
#[inline(always)]
pub(super) unsafe fn madd_scaled<const VNNI: bool>(
    acc: __m256i,
    u: __m256i,
    a: __m256i,
    s: __m256i,
) -> __m256i {
    let p16 = _mm256_maddubs_epi16(u, a);
    if VNNI {
        _mm256_dpwssd_epi32(acc, p16, s)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s))
    }
}

/// Bytes of a Q4_K (144) or Q5_K (176) super-block.
pub(super) const fn q4k_size<const Q5: bool>() -> usize {
    if Q5 {
        176
    } else {
        144
    }
}

/// Super-block `sb` of Q4_K/Q5_K rows `j..j + R`: scales, mins, codes.
pub(super) struct Q4Rows<const R: usize> {
    pub(super) d: [f32; R],
    pub(super) dmin: [f32; R],
    /// Each row's eight scales (`scales_mins`).
    pub(super) sc: [__m256i; R],
    pub(super) mn: [__m128i; R],
    pub(super) qs: [*const u8; R],
    /// Q5_K's fifth bits, consumed two sub-blocks at a time by `q4k_codes`.
    pub(super) hb: [__m256i; R],
}

#[inline(always)]
pub(super) unsafe fn q4k_rows<const R: usize, const Q5: bool>(
    ctx: &Ctx,
    j: usize,
    sb: usize,
) -> Q4Rows<R> {
    let mut rows = Q4Rows {
        d: [0.0; R],
        dmin: [0.0; R],
        sc: [_mm256_setzero_si256(); R],
        mn: [_mm_setzero_si128(); R],
        qs: [std::ptr::null(); R],
        hb: [_mm256_setzero_si256(); R],
    };
    for r in 0..R {
        let p = ctx.w.add((j + r) * ctx.row_bytes + sb * q4k_size::<Q5>());
        rows.d[r] = f16_at(p);
        rows.dmin[r] = f16_at(p.add(2));
        (rows.sc[r], rows.mn[r]) = scales_mins(p.add(4));
        if Q5 {
            rows.hb[r] = _mm256_loadu_si256(p.add(16) as *const __m256i);
            rows.qs[r] = p.add(48);
        } else {
            rows.qs[r] = p.add(16);
        }
    }
    rows
}

/// The codes of sub-blocks `2pp` (low) and `2pp + 1` (high) of a Q4_K/Q5_K
/// block whose nibbles start at `qs`; for Q5_K, `hb` (the fifth bits)
/// moves on to the next pair. Called for `pp` = 0, 1, 2, 3 in order.
#[inline(always)]
pub(super) unsafe fn q4k_codes<const Q5: bool>(
    qs: *const u8,
    pp: usize,
    hb: &mut __m256i,
) -> (__m256i, __m256i) {
    let mask = _mm256_set1_epi8(0x0F);
    let q = _mm256_loadu_si256(qs.add(32 * pp) as *const __m256i);
    let mut lo = _mm256_and_si256(q, mask);
    let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
    if Q5 {
        // Bits 0 and 1 of each byte are sub-blocks 2pp and 2pp + 1 (hb is
        // shifted by 2 per pair; bits that cross from the next byte land
        // at bit 2 or above).
        let h = *hb;
        let h0 = _mm256_and_si256(h, _mm256_set1_epi8(1));
        let h1 = _mm256_and_si256(h, _mm256_set1_epi8(2));
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 3));
        *hb = _mm256_srli_epi16(h, 2);
    }
    (lo, hi)
}

/// Q4_K / Q5_K tile: `R` weight rows by `C` activation rows.
#[inline(always)]
unsafe fn tile_q4k<const R: usize, const C: usize, const VNNI: bool, const Q5: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let size = q4k_size::<Q5>();
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
            prefetch_next_row::<R>(p, ctx.row_bytes, size);
        }
        let Q4Rows {
            d,
            dmin,
            sc,
            mn,
            qs,
            mut hb,
        } = q4k_rows::<R, Q5>(ctx, j, sb);
        // Two chains (low and high sub-block of each pair) so that a
        // one-row tile is not bound by the multiply-add latency.
        let mut iacc = [[_mm256_setzero_si256(); C]; R];
        let mut iacc2 = [[_mm256_setzero_si256(); C]; R];
        for pp in 0..4 {
            let mut lo = [_mm256_setzero_si256(); R];
            let mut hi = [_mm256_setzero_si256(); R];
            let mut slo = [_mm256_setzero_si256(); R];
            let mut shi = [_mm256_setzero_si256(); R];
            for r in 0..R {
                (lo[r], hi[r]) = q4k_codes::<Q5>(qs[r], pp, &mut hb[r]);
                slo[r] = scale_at(sc[r], 2 * pp);
                shi[r] = scale_at(sc[r], 2 * pp + 1);
            }
            for c in 0..C {
                let pa = ctx.aq.add((i + c) * k + sb * QK_K + 64 * pp);
                let alo = _mm256_loadu_si256(pa as *const __m256i);
                let ahi = _mm256_loadu_si256(pa.add(32) as *const __m256i);
                for r in 0..R {
                    iacc[r][c] = madd_scaled::<VNNI>(iacc[r][c], lo[r], alo, slo[r]);
                    iacc2[r][c] = madd_scaled::<VNNI>(iacc2[r][c], hi[r], ahi, shi[r]);
                }
            }
        }
        for c in 0..C {
            let bi = (i + c) * nsb + sb;
            let da = *ctx.ad.add(bi);
            for r in 0..R {
                let isum = hsum_i32(_mm256_add_epi32(iacc[r][c], iacc2[r][c]));
                let imin = min_sum_simd(mn[r], ctx.abs.add(bi * 16));
                acc[r][c] += finish_q4k(d[r], dmin[r], da, isum, imin);
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// Adds `(d * da) * isum` of super-block `sb` to each cell of a tile, the
/// integer sums split over two chains (Q6_K, IQ4_XS).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn finish_d<const R: usize, const C: usize>(
    ctx: &Ctx,
    sb: usize,
    i: usize,
    d: &[f32; R],
    iacc: &[[__m256i; C]; R],
    iacc2: &[[__m256i; C]; R],
    acc: &mut [[f32; C]; R],
) {
    for c in 0..C {
        let da = *ctx.ad.add((i + c) * ctx.nsb + sb);
        for r in 0..R {
            let isum = hsum_i32(_mm256_add_epi32(iacc[r][c], iacc2[r][c]));
            acc[r][c] += (d[r] * da) * isum as f32;
        }
    }
}

/// The table values (`KVALUES_IQ4NL`) of the 32 codes of an IQ4_XS
/// sub-block at `qs` (16 bytes: codes 0-15 in the low nibbles, 16-31 in
/// the high ones), as signed bytes in element order.
#[inline(always)]
pub(super) unsafe fn iq4_values(qs: *const u8) -> __m256i {
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let q = _mm_loadu_si128(qs as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    let idx = _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16(q, 4), m4),
        _mm_and_si128(q, m4),
    );
    _mm256_shuffle_epi8(table, idx)
}

/// `iq4_values` of sub-blocks `t` and `t + 1` (the 32 bytes at `qs`): one
/// load, one nibble split and one table lookup per sub-block, the halves
/// put in element order by two lane permutes (two loads and splits saved).
#[inline(always)]
pub(super) unsafe fn iq4_values2(qs: *const u8) -> (__m256i, __m256i) {
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let q = _mm256_loadu_si256(qs as *const __m256i);
    let m4 = _mm256_set1_epi8(0x0F);
    // Lane 0 holds sub-block t's codes, lane 1 sub-block t + 1's.
    let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
    let hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    (
        _mm256_permute2x128_si256(lo, hi, 0x20),
        _mm256_permute2x128_si256(lo, hi, 0x31),
    )
}

/// Super-block `sb` of IQ4_XS rows `j..j + R`: scales and blocks.
pub(super) struct IqRows<const R: usize> {
    pub(super) d: [f32; R],
    /// Each row's eight scales as i16 in both 128-bit halves.
    pub(super) sc: [__m256i; R],
    pub(super) blk: [*const u8; R],
}

#[inline(always)]
pub(super) unsafe fn iq4xs_rows<const R: usize>(ctx: &Ctx, j: usize, sb: usize) -> IqRows<R> {
    let mut rows = IqRows {
        d: [0.0; R],
        sc: [_mm256_setzero_si256(); R],
        blk: [std::ptr::null(); R],
    };
    for r in 0..R {
        let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 136);
        rows.blk[r] = p;
        rows.d[r] = f16_at(p);
        let s = iq4xs_scales(std::slice::from_raw_parts(p, 8));
        let s = _mm_loadu_si128(s.as_ptr() as *const __m128i);
        rows.sc[r] = _mm256_set_m128i(s, s);
    }
    rows
}

/// IQ4_XS tile.
#[inline(always)]
unsafe fn tile_iq4xs<const R: usize, const C: usize, const VNNI: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 136);
            prefetch_next_row::<R>(p, ctx.row_bytes, 136);
        }
        let IqRows { d, sc, blk } = iq4xs_rows::<R>(ctx, j, sb);
        let mut iacc = [[_mm256_setzero_si256(); C]; R];
        let mut iacc2 = [[_mm256_setzero_si256(); C]; R];
        for t in 0..8 {
            let mut v = [_mm256_setzero_si256(); R];
            let mut u = [_mm256_setzero_si256(); R];
            let mut s = [_mm256_setzero_si256(); R];
            for r in 0..R {
                v[r] = iq4_values(blk[r].add(8 + 16 * t));
                u[r] = _mm256_sign_epi8(v[r], v[r]);
                s[r] = scale_at(sc[r], t);
            }
            for c in 0..C {
                let pa = ctx.aq.add((i + c) * k + sb * QK_K + 32 * t);
                let a = _mm256_loadu_si256(pa as *const __m256i);
                for r in 0..R {
                    // |v| times a with v's sign: the products of v and a.
                    let sa = _mm256_sign_epi8(a, v[r]);
                    if t % 2 == 0 {
                        iacc[r][c] = madd_scaled::<VNNI>(iacc[r][c], u[r], sa, s[r]);
                    } else {
                        iacc2[r][c] = madd_scaled::<VNNI>(iacc2[r][c], u[r], sa, s[r]);
                    }
                }
            }
        }
        finish_d(ctx, sb, i, &d, &iacc, &iacc2, &mut acc);
    }
    store(ctx, j, i, &acc);
}

macro_rules! wrappers {
    ($name:ident, $features:literal, $vnni:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize, const C: usize>(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
            match kind {
                Kind::Q4K => tile_q4k::<R, C, $vnni, false>(ctx, j, i),
                Kind::Q5K => tile_q4k::<R, C, $vnni, true>(ctx, j, i),
                Kind::Q6K => tile_q6k::<R, C, $vnni, F_Q6>(ctx, j, i),
                Kind::Q3K => tile_q6k::<R, C, $vnni, F_Q3>(ctx, j, i),
                Kind::Q8KS => tile_q6k::<R, C, $vnni, F_Q8>(ctx, j, i),
                Kind::IQ4XS => tile_iq4xs::<R, C, $vnni>(ctx, j, i),
                Kind::Q2K => tile_q2k::<R, C, $vnni>(ctx, j, i),
                Kind::TQ2 => tile_tq2::<R, C, $vnni>(ctx, j, i),
            }
        }
    };
}
wrappers!(tile_avx2, "avx2,fma,f16c", false);
wrappers!(tile_vnni, "avx2,fma,f16c,avx512f,avx512vl,avx512vnni", true);

macro_rules! per_kind {
    ($f:ident, $r:literal, $c:literal) => {{
        unsafe fn q4k(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q4K, ctx, j, i)
        }
        unsafe fn q5k(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q5K, ctx, j, i)
        }
        unsafe fn q6k(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q6K, ctx, j, i)
        }
        unsafe fn iq4xs(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::IQ4XS, ctx, j, i)
        }
        unsafe fn q2k(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q2K, ctx, j, i)
        }
        unsafe fn q3k(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q3K, ctx, j, i)
        }
        unsafe fn q8ks(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::Q8KS, ctx, j, i)
        }
        unsafe fn tq2(ctx: &Ctx, j: usize, i: usize) {
            $f::<$r, $c>(Kind::TQ2, ctx, j, i)
        }
        [q4k as Tile<Ctx>, q5k, q6k, iq4xs, q2k, q3k, q8ks, tq2]
    }};
}

pub(super) fn tile_fn<const VNNI: bool>(kind: Kind, r: usize, c: usize) -> Tile<Ctx> {
    let table = match (VNNI, r, c) {
        (false, 4, _) => per_kind!(tile_avx2, 4, 1),
        (false, _, _) => per_kind!(tile_avx2, 1, 1),
        (true, 4, 2) => per_kind!(tile_vnni, 4, 2),
        (true, 4, _) => per_kind!(tile_vnni, 4, 1),
        (true, _, 2) => per_kind!(tile_vnni, 1, 2),
        (true, _, _) => per_kind!(tile_vnni, 1, 1),
    };
    table[kind as usize]
}
