//! The AVX2 and AVX-512 VNNI tiles of the K-quants with a scale per 16
//! values (Q2_K, Q3_K, Q6_K, Q8_KS), their code unpacking and row setup
//! (shared with the four-row decode tiles of `rows4`).

use std::arch::x86_64::*;

use super::super::block32::f16_at;
use super::x86::{finish_d, hsum_i32, madd_scaled, prefetch_next_row};
use super::{finish_q4k, q3k_scales, store, Ctx};
use crate::quant::QK_K;

/// The 32 six-bit codes of elements `128n + 32g ..` of the Q6_K block at
/// `p`, unsigned (0..=63).
#[inline(always)]
pub(super) unsafe fn q6_codes(p: *const u8, n: usize, g: usize) -> __m256i {
    let m4 = _mm256_set1_epi8(0x0F);
    let ql = _mm256_loadu_si256(p.add(64 * n + 32 * (g & 1)) as *const __m256i);
    let h = _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i);
    let low = if g < 2 {
        _mm256_and_si256(ql, m4)
    } else {
        _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4)
    };
    // Bits 2g, 2g + 1 of qh to bits 4, 5.
    let hm = _mm256_and_si256(h, _mm256_set1_epi8((3u8 << (2 * g)) as i8));
    let high = match g {
        0 => _mm256_slli_epi16(hm, 4),
        1 => _mm256_slli_epi16(hm, 2),
        2 => hm,
        _ => _mm256_srli_epi16(hm, 2),
    };
    _mm256_or_si256(low, high)
}

/// Scales `8n + 2g` (low half) and `8n + 2g + 1` (high half) in every
/// i16 lane, from `half` = scales `8n..8n + 8` in both halves.
#[inline(always)]
unsafe fn q6_scales(half: __m256i, g: usize) -> __m256i {
    let pick = |j: usize| (((2 * j + 1) << 8) | (2 * j)) as i16;
    let mask = _mm256_set_m128i(_mm_set1_epi16(pick(2 * g + 1)), _mm_set1_epi16(pick(2 * g)));
    _mm256_shuffle_epi8(half, mask)
}

/// The per-16-scaled dot products of super-block `sb` for the types with a
/// scale per 16 values (Q2_K, Q6_K): chunk `(n, g)` is elements
/// `128n + 32g ..`, whose unsigned codes `codes(r, n, g)` gives; `halves`
/// holds each row's scales 0-7 and 8-15 in both 128-bit halves.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn per16_dots<const R: usize, const C: usize, const VNNI: bool>(
    ctx: &Ctx,
    i: usize,
    sb: usize,
    halves: &[[__m256i; 2]; R],
    codes: impl Fn(usize, usize, usize) -> __m256i,
    iacc: &mut [[__m256i; C]; R],
    iacc2: &mut [[__m256i; C]; R],
) {
    // Unrolled (`unroll!`): with four rows the compiler kept the loops
    // over (n, g) and dispatched the per-g shifts of the codes through a
    // jump table (Q3_K's four-row tile ran at 0.6x its one-row tile).
    unroll!(n in [0, 1] {
        unroll!(g in [0, 1, 2, 3] {
            per16_step::<R, C, VNNI>(ctx, i, sb, halves, &codes, iacc, iacc2, n, g);
        });
    });
}

/// Chunk `(n, g)` of `per16_dots`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn per16_step<const R: usize, const C: usize, const VNNI: bool>(
    ctx: &Ctx,
    i: usize,
    sb: usize,
    halves: &[[__m256i; 2]; R],
    codes: &impl Fn(usize, usize, usize) -> __m256i,
    iacc: &mut [[__m256i; C]; R],
    iacc2: &mut [[__m256i; C]; R],
    n: usize,
    g: usize,
) {
    let k = ctx.nsb * QK_K;
    let mut q = [_mm256_setzero_si256(); R];
    let mut s = [_mm256_setzero_si256(); R];
    for r in 0..R {
        q[r] = codes(r, n, g);
        s[r] = q6_scales(halves[r][n], g);
    }
    for c in 0..C {
        let pa = ctx.aq.add((i + c) * k + sb * QK_K + 128 * n + 32 * g);
        let a = _mm256_loadu_si256(pa as *const __m256i);
        for r in 0..R {
            // Two chains, so a one-row tile is not bound by latency.
            if g.is_multiple_of(2) {
                iacc[r][c] = madd_scaled::<VNNI>(iacc[r][c], q[r], a, s[r]);
            } else {
                iacc2[r][c] = madd_scaled::<VNNI>(iacc2[r][c], q[r], a, s[r]);
            }
        }
    }
}

/// The codes of a Q6_K-shaped tile (an i8 scale per 16 values, `d`
/// last, unsigned codes less an offset): Q6_K's 6 bits.
pub(super) const F_Q6: u8 = 0;
/// Q3_K's 3 bits (its packed 6-bit scales).
pub(super) const F_Q3: u8 = 1;
/// Q8_KS's bytes.
pub(super) const F_Q8: u8 = 2;

/// Bytes of a Q6_K (210), Q3_K (110) or Q8_KS (274) super-block.
const fn q6k_size<const F: u8>() -> usize {
    match F {
        F_Q3 => 110,
        F_Q8 => 274,
        _ => 210,
    }
}

/// Super-block `sb` of Q6_K/Q3_K/Q8_KS rows `j..j + R`: scales and codes.
pub(super) struct Q6Rows<const R: usize> {
    pub(super) d: [f32; R],
    pub(super) blk: [*const u8; R],
    /// Each row's sixteen scales as i16.
    pub(super) sc16: [__m256i; R],
    /// The same, scales 0-7 (n = 0) and 8-15 (n = 1) in both halves, for
    /// `q6_scales`.
    pub(super) halves: [[__m256i; 2]; R],
}

#[inline(always)]
pub(super) unsafe fn q6_rows<const R: usize, const F: u8>(
    ctx: &Ctx,
    j: usize,
    sb: usize,
) -> Q6Rows<R> {
    let size = q6k_size::<F>();
    let mut rows = Q6Rows {
        d: [0.0; R],
        blk: [std::ptr::null(); R],
        sc16: [_mm256_setzero_si256(); R],
        halves: [[_mm256_setzero_si256(); 2]; R],
    };
    for r in 0..R {
        let p = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
        rows.blk[r] = p;
        rows.d[r] = f16_at(p.add(size - 2));
        let sc16 = match F {
            F_Q3 => {
                let s = q3k_scales(std::slice::from_raw_parts(p.add(96), 12));
                _mm256_loadu_si256(s.as_ptr() as *const __m256i)
            }
            // Q6_K's and Q8_KS's 16 bytes of i8 scales sit before `d`.
            _ => _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(size - 18) as *const __m128i)),
        };
        rows.sc16[r] = sc16;
        rows.halves[r] = [
            _mm256_permute2x128_si256(sc16, sc16, 0x00),
            _mm256_permute2x128_si256(sc16, sc16, 0x11),
        ];
    }
    rows
}

/// Where a Q6_K/Q3_K/Q8_KS integer sum starts: `-offset * sum_k sc_k *
/// bsum_k` (the codes are stored plus 32, Q3_K's taken plus 4, Q8_KS's
/// stored plus 64) for a row's scales `sc16` and the activation row's
/// per-16 sums at `bs`.
#[inline(always)]
pub(super) unsafe fn q6_start<const F: u8>(sc16: __m256i, bs: *const i16) -> __m256i {
    let m = _mm256_madd_epi16(sc16, _mm256_loadu_si256(bs as *const __m256i));
    let corr = match F {
        F_Q3 => _mm256_slli_epi32(m, 2),
        F_Q8 => _mm256_slli_epi32(m, 6),
        _ => _mm256_slli_epi32(m, 5),
    };
    _mm256_sub_epi32(_mm256_setzero_si256(), corr)
}

/// The unsigned codes of elements `128n + 32g ..` of the Q8_KS block at
/// `p`: its bytes as they are.
#[inline(always)]
pub(super) unsafe fn q8_codes(p: *const u8, n: usize, g: usize) -> __m256i {
    _mm256_loadu_si256(p.add(128 * n + 32 * g) as *const __m256i)
}

/// The unsigned codes of elements `128n + 32g ..` of the Q6_K, Q3_K or
/// Q8_KS block at `p`.
#[inline(always)]
pub(super) unsafe fn q6k_codes<const F: u8>(p: *const u8, n: usize, g: usize) -> __m256i {
    match F {
        F_Q3 => q3_codes(p, n, g),
        F_Q8 => q8_codes(p, n, g),
        _ => q6_codes(p, n, g),
    }
}

/// Q6_K tile (Q3_K's and Q8_KS's with their codes).
#[inline(always)]
pub(super) unsafe fn tile_q6k<const R: usize, const C: usize, const VNNI: bool, const F: u8>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let size = q6k_size::<F>();
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
            prefetch_next_row::<R>(p, ctx.row_bytes, size);
        }
        let q: Q6Rows<R> = q6_rows::<R, F>(ctx, j, sb);
        let mut iacc = [[_mm256_setzero_si256(); C]; R];
        let mut iacc2 = [[_mm256_setzero_si256(); C]; R];
        for r in 0..R {
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                iacc[r][c] = q6_start::<F>(q.sc16[r], ctx.abs.add(bi * 16));
            }
        }
        let codes = |r: usize, n: usize, g: usize| q6k_codes::<F>(q.blk[r], n, g);
        per16_dots::<R, C, VNNI>(ctx, i, sb, &q.halves, codes, &mut iacc, &mut iacc2);
        finish_d(ctx, sb, i, &q.d, &iacc, &iacc2, &mut acc);
    }
    store(ctx, j, i, &acc);
}

/// The 2-bit codes of elements `128n + 32g ..` of the Q2_K block whose
/// codes start at `qs`, one per byte.
#[inline(always)]
pub(super) unsafe fn q2_codes(qs: *const u8, n: usize, g: usize) -> __m256i {
    let b = _mm256_loadu_si256(qs.add(32 * n) as *const __m256i);
    let c = match g {
        0 => b,
        1 => _mm256_srli_epi16(b, 2),
        2 => _mm256_srli_epi16(b, 4),
        _ => _mm256_srli_epi16(b, 6),
    };
    _mm256_and_si256(c, _mm256_set1_epi8(3))
}

/// The 16 scales (low nibbles) and the 16 mins (high nibbles) of a Q2_K
/// block's first 16 bytes, as i16.
#[inline(always)]
pub(super) unsafe fn q2_scales_mins(p: *const u8) -> (__m256i, __m256i) {
    let raw = _mm_loadu_si128(p as *const __m128i);
    let m4 = _mm_set1_epi8(0x0F);
    (
        _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)),
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4)),
    )
}

/// Super-block `sb` of Q2_K rows `j..j + R`: scales, mins, codes.
pub(super) struct Q2Rows<const R: usize> {
    pub(super) d: [f32; R],
    pub(super) dmin: [f32; R],
    /// Each row's sixteen scales, 0-7 and 8-15 in both 128-bit halves.
    pub(super) halves: [[__m256i; 2]; R],
    pub(super) mn: [__m256i; R],
    pub(super) qs: [*const u8; R],
}

#[inline(always)]
pub(super) unsafe fn q2_rows<const R: usize>(ctx: &Ctx, j: usize, sb: usize) -> Q2Rows<R> {
    let mut rows = Q2Rows {
        d: [0.0; R],
        dmin: [0.0; R],
        halves: [[_mm256_setzero_si256(); 2]; R],
        mn: [_mm256_setzero_si256(); R],
        qs: [std::ptr::null(); R],
    };
    for r in 0..R {
        let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 84);
        (rows.d[r], rows.dmin[r]) = (f16_at(p.add(80)), f16_at(p.add(82)));
        let (sc16, mn16) = q2_scales_mins(p);
        rows.mn[r] = mn16;
        rows.halves[r] = [
            _mm256_permute2x128_si256(sc16, sc16, 0x00),
            _mm256_permute2x128_si256(sc16, sc16, 0x11),
        ];
        rows.qs[r] = p.add(16);
    }
    rows
}

/// Q2_K tile.
#[inline(always)]
pub(super) unsafe fn tile_q2k<const R: usize, const C: usize, const VNNI: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 84);
            prefetch_next_row::<R>(p, ctx.row_bytes, 84);
        }
        let Q2Rows {
            d,
            dmin,
            halves,
            mn,
            qs,
        } = q2_rows::<R>(ctx, j, sb);
        let mut iacc = [[_mm256_setzero_si256(); C]; R];
        let mut iacc2 = [[_mm256_setzero_si256(); C]; R];
        per16_dots::<R, C, VNNI>(
            ctx,
            i,
            sb,
            &halves,
            |r, n, g| q2_codes(qs[r], n, g),
            &mut iacc,
            &mut iacc2,
        );
        for c in 0..C {
            let bi = (i + c) * nsb + sb;
            let da = *ctx.ad.add(bi);
            let bs = _mm256_loadu_si256(ctx.abs.add(bi * 16) as *const __m256i);
            for r in 0..R {
                let isum = hsum_i32(_mm256_add_epi32(iacc[r][c], iacc2[r][c]));
                let imin = hsum_i32(_mm256_madd_epi16(mn[r], bs));
                acc[r][c] += finish_q4k(d[r], dmin[r], da, isum, imin);
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// The codes plus 4 (0..=7) of elements `128n + 32g ..` of the Q3_K block
/// at `p`: 2 bits from `qs` (as Q2_K's), bit 2 from bit `4n + g` of
/// `hmask`.
#[inline(always)]
pub(super) unsafe fn q3_codes(p: *const u8, n: usize, g: usize) -> __m256i {
    let h = _mm256_loadu_si256(p as *const __m256i);
    let bit = match 4 * n + g {
        0 => h,
        1 => _mm256_srli_epi16(h, 1),
        2 => _mm256_srli_epi16(h, 2),
        3 => _mm256_srli_epi16(h, 3),
        4 => _mm256_srli_epi16(h, 4),
        5 => _mm256_srli_epi16(h, 5),
        6 => _mm256_srli_epi16(h, 6),
        _ => _mm256_srli_epi16(h, 7),
    };
    let high = _mm256_slli_epi16(_mm256_and_si256(bit, _mm256_set1_epi8(1)), 2);
    _mm256_or_si256(q2_codes(p.add(32), n, g), high)
}
