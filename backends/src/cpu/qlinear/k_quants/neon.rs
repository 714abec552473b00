//! The NEON tiles of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_KS and IQ4_XS (TQ2_0's
//! are in `tq2`, dispatched here): `sdot` where
//! the CPU has dotprod, widening multiplies where it does not (the `DOT`
//! parameter), each bit-identical to its scalar twin.

use std::arch::aarch64::*;

use super::super::block32::{f16_neon, sdot};
use super::tq2::neon::tile_tq2;
use super::{finish_q4k, store, unpack_scales_u32, Ctx, Kind, Tile};
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::QK_K;

/// Dot of 16 signed bytes as four i32 lanes.
#[inline(always)]
unsafe fn dot16<const DOT: bool>(w: int8x16_t, a: int8x16_t) -> int32x4_t {
    if DOT {
        sdot(vdupq_n_s32(0), w, a)
    } else {
        // |w| <= 127 (Q8_KS's codes; Q6_K's 63) and |a| <= 127: two
        // products fit an i16 lane.
        vpaddlq_s16(vmlal_high_s8(
            vmull_s8(vget_low_s8(w), vget_low_s8(a)),
            w,
            a,
        ))
    }
}

/// Dot of 32 signed bytes as four i32 lanes: one chain of two `sdot`
/// (or of two widening multiplies and pairwise accumulations), not two
/// dots and an add. Which lane holds which products differs from
/// `dot16`'s; the consumers only ever sum all four lanes.
#[inline(always)]
unsafe fn dot32<const DOT: bool>(w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t {
    if DOT {
        sdot(sdot(vdupq_n_s32(0), w[0], a[0]), w[1], a[1])
    } else {
        let m = |w: int8x16_t, a: int8x16_t| {
            vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a)
        };
        vpadalq_s16(vpaddlq_s16(m(w[0], a[0])), m(w[1], a[1]))
    }
}

/// Two 32-value dots under their two scales at once: `pair` folds the
/// dots into one vector (lanes 0-1 from the first, 2-3 from the second,
/// each lane a sum of two of the dot's lanes) and one multiply-add by
/// `[s0, s0, s1, s1]` (`scale_pairs`) weights it. The same integers as a
/// multiply-add per dot by a broadcast scale, with half the multiplies
/// and no broadcasts.
#[inline(always)]
unsafe fn pair(acc: int32x4_t, d0: int32x4_t, d1: int32x4_t, s: int32x4_t) -> int32x4_t {
    vmlaq_s32(acc, vpaddq_s32(d0, d1), s)
}

/// Eight scales `s` as the four `[s[2p], s[2p], s[2p + 1], s[2p + 1]]`
/// multipliers of `pair`, p = 0..4.
#[inline(always)]
unsafe fn scale_pairs(s: int16x8_t) -> [int32x4_t; 4] {
    let (a, b) = (vzip1q_s16(s, s), vzip2q_s16(s, s));
    [
        vmovl_s16(vget_low_s16(a)),
        vmovl_high_s16(a),
        vmovl_s16(vget_low_s16(b)),
        vmovl_high_s16(b),
    ]
}

/// A Q4_K/Q5_K super-block's eight 6-bit scales and mins (at `b`, 12
/// bytes) as two vectors, by the word-wide unpacking: `unpack_scales`'s
/// values without its eight byte-by-byte extractions.
#[inline(always)]
unsafe fn scales_mins(b: *const u8) -> (int16x8_t, int16x8_t) {
    let w = unpack_scales_u32(std::slice::from_raw_parts(b, 12));
    let v = vld1q_u8(w.as_ptr() as *const u8);
    (
        vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))),
        vreinterpretq_s16_u16(vmovl_high_u8(v)),
    )
}

/// `min_sum` in vectors (the same integers: pair sums of the 16-value
/// activation sums fit i16, products and their sum i32): `sum_j mins_j *
/// (bs[2j] + bs[2j + 1])`.
#[inline(always)]
unsafe fn min_sum_neon(mins: int16x8_t, bs: *const i16) -> i32 {
    let pairs = vpaddq_s16(vld1q_s16(bs), vld1q_s16(bs.add(8)));
    let lo = vmull_s16(vget_low_s16(mins), vget_low_s16(pairs));
    vaddvq_s32(vmlal_high_s16(lo, mins, pairs))
}

#[inline(always)]
unsafe fn tile_q4k<const R: usize, const C: usize, const DOT: bool, const Q5: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut d = [0.0f32; R];
        let mut dmin = [0.0f32; R];
        let mut sc = [[vdupq_n_s32(0); 4]; R];
        let mut mn = [vdupq_n_s16(0); R];
        let mut qs = [std::ptr::null::<u8>(); R];
        let mut qh = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            let p = ctx
                .w
                .add((j + r) * ctx.row_bytes + sb * if Q5 { 176 } else { 144 });
            let blk = std::slice::from_raw_parts(p, 16);
            d[r] = f16_neon(blk.as_ptr());
            dmin[r] = f16_neon(blk.as_ptr().add(2));
            let (s, m) = scales_mins(p.add(4));
            sc[r] = scale_pairs(s);
            mn[r] = m;
            if Q5 {
                qh[r] = p.add(16);
                qs[r] = p.add(48);
            } else {
                qs[r] = p.add(16);
            }
        }
        let mut iacc = [[vdupq_n_s32(0); C]; R];
        for pp in 0..4 {
            let mut lo = [[vdupq_n_s8(0); 2]; R];
            let mut hi = [[vdupq_n_s8(0); 2]; R];
            for r in 0..R {
                for h in 0..2 {
                    let q = vld1q_u8(qs[r].add(32 * pp + 16 * h));
                    let mut l = vandq_u8(q, vdupq_n_u8(0x0F));
                    let mut u = vshrq_n_u8::<4>(q);
                    if Q5 {
                        let bits = vld1q_u8(qh[r].add(16 * h));
                        let b0 = vtstq_u8(bits, vdupq_n_u8(1 << (2 * pp)));
                        let b1 = vtstq_u8(bits, vdupq_n_u8(2 << (2 * pp)));
                        l = vorrq_u8(l, vandq_u8(b0, vdupq_n_u8(16)));
                        u = vorrq_u8(u, vandq_u8(b1, vdupq_n_u8(16)));
                    }
                    lo[r][h] = vreinterpretq_s8_u8(l);
                    hi[r][h] = vreinterpretq_s8_u8(u);
                }
            }
            for c in 0..C {
                let pa = ctx.aq.add((i + c) * k + sb * QK_K + 64 * pp);
                let alo = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
                let ahi = [vld1q_s8(pa.add(32)), vld1q_s8(pa.add(48))];
                for r in 0..R {
                    let (dl, dh) = (dot32::<DOT>(lo[r], alo), dot32::<DOT>(hi[r], ahi));
                    iacc[r][c] = pair(iacc[r][c], dl, dh, sc[r][pp]);
                }
            }
        }
        for c in 0..C {
            let bi = (i + c) * nsb + sb;
            let da = *ctx.ad.add(bi);
            let bs = ctx.abs.add(bi * 16);
            for r in 0..R {
                let isum = vaddvq_s32(iacc[r][c]);
                acc[r][c] += finish_q4k(d[r], dmin[r], da, isum, min_sum_neon(mn[r], bs));
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// Adds to each (weight row, activation row) accumulator the two
/// 16-value dot products of the row's codes `q[r]` with the activation
/// codes at `at`, times the row's pair of scales `s[r]` (`[s0, s0, s1,
/// s1]`, see `pair`; Q2_K, Q3_K and Q6_K share this step).
#[inline(always)]
unsafe fn per16_acc<const R: usize, const C: usize, const DOT: bool>(
    ctx: &Ctx,
    i: usize,
    at: usize,
    q: &[[int8x16_t; 2]; R],
    s: &[int32x4_t; R],
    iacc: &mut [[int32x4_t; C]; R],
) {
    let k = ctx.nsb * QK_K;
    for c in 0..C {
        let pa = ctx.aq.add((i + c) * k + at);
        let a = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
        for r in 0..R {
            let (d0, d1) = (dot16::<DOT>(q[r][0], a[0]), dot16::<DOT>(q[r][1], a[1]));
            iacc[r][c] = pair(iacc[r][c], d0, d1, s[r]);
        }
    }
}

/// A super-block's 16 scales (`lo`: the first 8) as `scale_pairs`, by
/// half (`n`) and 32-value group (`g`).
#[inline(always)]
unsafe fn scale_pairs16(lo: int16x8_t, hi: int16x8_t) -> [[int32x4_t; 4]; 2] {
    [scale_pairs(lo), scale_pairs(hi)]
}

/// `sum_k s[k] * bsum[k]` over a super-block's 16 per-16 activation sums
/// at `bs`, the weights in two vectors (`s0`: the first 8): the mins of
/// Q2_K, the code offsets of Q3_K and Q6_K. Exact in i32 (|s| <= 127,
/// |bsum| <= 16 * 127).
#[inline(always)]
unsafe fn per16_weighted_v(s0: int16x8_t, s1: int16x8_t, bs: *const i16) -> i32 {
    let (b0, b1) = (vld1q_s16(bs), vld1q_s16(bs.add(8)));
    let p = vmull_s16(vget_low_s16(s0), vget_low_s16(b0));
    let p = vmlal_high_s16(p, s0, b0);
    let p = vmlal_s16(p, vget_low_s16(s1), vget_low_s16(b1));
    vaddvq_s32(vmlal_high_s16(p, s1, b1))
}

/// The 16 codes (0..=63) of the Q6_K block at `p`: half `n`, 32-value
/// group `g`, its 16-value half `h` (low 4 bits from `ql`, top 2 from
/// `qh`). Shared with the i8mm tile (`neon_mm`).
#[inline(always)]
pub(super) unsafe fn q6k_codes16(p: *const u8, n: usize, g: usize, h: usize) -> uint8x16_t {
    let ql = vld1q_u8(p.add(64 * n + 32 * (g & 1) + 16 * h));
    let qh = vld1q_u8(p.add(128 + 32 * n + 16 * h));
    let low = if g < 2 {
        vandq_u8(ql, vdupq_n_u8(0x0F))
    } else {
        vshrq_n_u8::<4>(ql)
    };
    let hm = vandq_u8(qh, vdupq_n_u8(3 << (2 * g)));
    let high = match g {
        0 => vshlq_n_u8::<4>(hm),
        1 => vshlq_n_u8::<2>(hm),
        2 => hm,
        _ => vshrq_n_u8::<2>(hm),
    };
    vorrq_u8(low, high)
}

/// Q6_K tile, and Q8_KS's (`Q8`: a byte per code, offset 64 instead of
/// 32, the same scales and `d` after the codes).
#[inline(always)]
unsafe fn tile_q6k<const R: usize, const C: usize, const DOT: bool, const Q8: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let size = if Q8 { 274 } else { 210 };
    let offset = if Q8 { 64 } else { 32 };
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut d = [0.0f32; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut iacc = [[vdupq_n_s32(0); C]; R];
        let mut corr = [[0i32; C]; R];
        let mut sc = [[[vdupq_n_s32(0); 4]; 2]; R];
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
            blk[r] = p;
            d[r] = f16_neon(p.add(size - 2));
            let s8 = vld1q_s8(p.add(size - 18) as *const i8);
            let (s0, s1) = (vmovl_s8(vget_low_s8(s8)), vmovl_high_s8(s8));
            sc[r] = scale_pairs16(s0, s1);
            for c in 0..C {
                let bs = ctx.abs.add(((i + c) * nsb + sb) * 16);
                corr[r][c] = per16_weighted_v(s0, s1, bs);
            }
        }
        for n in 0..2 {
            for g in 0..4 {
                let mut q = [[vdupq_n_s8(0); 2]; R];
                for r in 0..R {
                    let p = blk[r];
                    for h in 0..2 {
                        q[r][h] = if Q8 {
                            vld1q_s8(p.add(128 * n + 32 * g + 16 * h) as *const i8)
                        } else {
                            vreinterpretq_s8_u8(q6k_codes16(p, n, g, h))
                        };
                    }
                }
                let s: [int32x4_t; R] = std::array::from_fn(|r| sc[r][n][g]);
                let at = sb * QK_K + 128 * n + 32 * g;
                per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
            }
        }
        for c in 0..C {
            let da = *ctx.ad.add((i + c) * nsb + sb);
            for r in 0..R {
                let isum = vaddvq_s32(iacc[r][c]) - offset * corr[r][c];
                acc[r][c] += (d[r] * da) * isum as f32;
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// `iq4xs_scales` in a vector (the same values): the low 4 bits of scale
/// `j` are nibble `j % 2` of byte `4 + j / 2`, the high 2 bits bits `2j`
/// of the little-endian u16 at byte 2; less 32. (`iq4xs_scales` itself
/// compiled to a lane insert per value.)
#[inline(always)]
unsafe fn iq4xs_scales_neon(b: *const u8) -> int16x8_t {
    let v = vcreate_u8((b.add(4) as *const u32).read_unaligned() as u64);
    let lo = vzip1_u8(vand_u8(v, vdup_n_u8(0x0F)), vshr_n_u8::<4>(v));
    let h = vdupq_n_u16((b.add(2) as *const u16).read_unaligned());
    const SHIFTS: [i16; 8] = [0, -2, -4, -6, -8, -10, -12, -14];
    let hi = vandq_u16(vshlq_u16(h, vld1q_s16(SHIFTS.as_ptr())), vdupq_n_u16(3));
    let s = vorrq_u16(vmovl_u8(lo), vshlq_n_u16::<4>(hi));
    vsubq_s16(vreinterpretq_s16_u16(s), vdupq_n_s16(32))
}

/// IQ4_XS tile: the table values (|v| <= 127) by the activation codes,
/// `sdot` or widening multiplies (two products fit an i16), times each
/// sub-block's scale.
#[inline(always)]
unsafe fn tile_iq4xs<const R: usize, const C: usize, const DOT: bool>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let table = vld1q_s8(KVALUES_IQ4NL.as_ptr());
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut d = [0.0f32; R];
        let mut sc = [[vdupq_n_s32(0); 4]; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 136);
            (blk[r], d[r]) = (p, f16_neon(p));
            sc[r] = scale_pairs(iq4xs_scales_neon(p));
        }
        let mut iacc = [[vdupq_n_s32(0); C]; R];
        // Two 32-value sub-blocks (`t`, `t + 1`) per round, under one
        // `pair` of their scales.
        for tp in 0..4 {
            let mut v = [[[vdupq_n_s8(0); 2]; 2]; R];
            for r in 0..R {
                for h in 0..2 {
                    let q = vld1q_u8(blk[r].add(8 + 16 * (2 * tp + h)));
                    v[r][h][0] = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
                    v[r][h][1] = vqtbl1q_s8(table, vshrq_n_u8::<4>(q));
                }
            }
            for c in 0..C {
                let pa = ctx.aq.add((i + c) * k + sb * QK_K + 64 * tp);
                let a0 = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
                let a1 = [vld1q_s8(pa.add(32)), vld1q_s8(pa.add(48))];
                for r in 0..R {
                    let (d0, d1) = (dot32::<DOT>(v[r][0], a0), dot32::<DOT>(v[r][1], a1));
                    iacc[r][c] = pair(iacc[r][c], d0, d1, sc[r][tp]);
                }
            }
        }
        for c in 0..C {
            let da = *ctx.ad.add((i + c) * nsb + sb);
            for r in 0..R {
                acc[r][c] += (d[r] * da) * vaddvq_s32(iacc[r][c]) as f32;
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// Q2_K tile: 2-bit codes by the activation codes per 16, times the
/// 4-bit scales; the mins from the per-16 activation sums.
#[inline(always)]
unsafe fn tile_q2k<const R: usize, const C: usize, const DOT: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut iacc = [[vdupq_n_s32(0); C]; R];
        let mut sc = [[[vdupq_n_s32(0); 4]; 2]; R];
        for r in 0..R {
            blk[r] = ctx.w.add((j + r) * ctx.row_bytes + sb * 84);
            // The sixteen 4-bit scales (low nibbles of the scale bytes).
            let s = vandq_u8(vld1q_u8(blk[r]), vdupq_n_u8(0x0F));
            sc[r] = scale_pairs16(
                vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(s))),
                vreinterpretq_s16_u16(vmovl_high_u8(s)),
            );
        }
        for n in 0..2 {
            for g in 0..4 {
                let mut q = [[vdupq_n_s8(0); 2]; R];
                for r in 0..R {
                    for h in 0..2 {
                        let b = vld1q_u8(blk[r].add(16 + 32 * n + 16 * h));
                        let c = match g {
                            0 => b,
                            1 => vshrq_n_u8::<2>(b),
                            2 => vshrq_n_u8::<4>(b),
                            _ => vshrq_n_u8::<6>(b),
                        };
                        q[r][h] = vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(3)));
                    }
                }
                let s: [int32x4_t; R] = std::array::from_fn(|r| sc[r][n][g]);
                let at = sb * QK_K + 128 * n + 32 * g;
                per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
            }
        }
        for c in 0..C {
            let bi = (i + c) * nsb + sb;
            let da = *ctx.ad.add(bi);
            for r in 0..R {
                let p = blk[r];
                // The sixteen 4-bit mins (high nibbles of the scale bytes).
                let m = vshrq_n_u8::<4>(vld1q_u8(p));
                let imin = per16_weighted_v(
                    vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m))),
                    vreinterpretq_s16_u16(vmovl_high_u8(m)),
                    ctx.abs.add(bi * 16),
                );
                let head = std::slice::from_raw_parts(p.add(80), 4);
                let (d, dmin) = (f16_neon(head.as_ptr()), f16_neon(head.as_ptr().add(2)));
                acc[r][c] += finish_q4k(d, dmin, da, vaddvq_s32(iacc[r][c]), imin);
            }
        }
    }
    store(ctx, j, i, &acc);
}

/// `q3k_scales` in vectors (the same values): the low 4 bits of scale `i`
/// are nibble `i / 8` of byte `i % 8`, the high 2 bits bits `2 (i / 4)` of
/// byte `8 + i % 4`; less 32. The scales for `i < 8` and `i >= 8`.
#[inline(always)]
unsafe fn q3k_scales_neon(b: *const u8) -> (int16x8_t, int16x8_t) {
    let v = vld1_u8(b);
    let lo = vcombine_u8(vand_u8(v, vdup_n_u8(0x0F)), vshr_n_u8::<4>(v));
    let h = vreinterpretq_u8_u32(vdupq_n_u32((b.add(8) as *const u32).read_unaligned()));
    const SHIFTS: [i8; 16] = [0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6];
    let hi = vandq_u8(vshlq_u8(h, vld1q_s8(SHIFTS.as_ptr())), vdupq_n_u8(3));
    let s = vsubq_s8(
        vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8::<4>(hi))),
        vdupq_n_s8(32),
    );
    (vmovl_s8(vget_low_s8(s)), vmovl_high_s8(s))
}

/// Q3_K tile: codes plus 4 (0..=7) by the activation codes per 16,
/// times the scales, less `4 * sum_k sc_k * bsum_k`.
#[inline(always)]
unsafe fn tile_q3k<const R: usize, const C: usize, const DOT: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let mut acc = [[0.0f32; C]; R];
    for sb in 0..nsb {
        let mut d = [0.0f32; R];
        let mut sc = [[[vdupq_n_s32(0); 4]; 2]; R];
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut iacc = [[vdupq_n_s32(0); C]; R];
        let mut corr = [[0i32; C]; R];
        for r in 0..R {
            let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 110);
            blk[r] = p;
            d[r] = f16_neon(p.add(108));
            let (s0, s1) = q3k_scales_neon(p.add(96));
            sc[r] = scale_pairs16(s0, s1);
            for c in 0..C {
                let bs = ctx.abs.add(((i + c) * nsb + sb) * 16);
                corr[r][c] = per16_weighted_v(s0, s1, bs);
            }
        }
        for n in 0..2 {
            for g in 0..4 {
                let mut q = [[vdupq_n_s8(0); 2]; R];
                for r in 0..R {
                    for h in 0..2 {
                        let b = vld1q_u8(blk[r].add(32 + 32 * n + 16 * h));
                        let m = vld1q_u8(blk[r].add(16 * h));
                        // Bits 0-1: the low code bits (the rest shifted
                        // out by the insert below); bit 2: the high bit.
                        let low = vshlq_u8(b, vdupq_n_s8(-(2 * g as i8)));
                        let high = vshlq_u8(m, vdupq_n_s8(-((4 * n + g) as i8)));
                        let high = vandq_u8(high, vdupq_n_u8(1));
                        q[r][h] = vreinterpretq_s8_u8(vsliq_n_u8::<2>(low, high));
                    }
                }
                let s: [int32x4_t; R] = std::array::from_fn(|r| sc[r][n][g]);
                let at = sb * QK_K + 128 * n + 32 * g;
                per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
            }
        }
        for c in 0..C {
            let da = *ctx.ad.add((i + c) * nsb + sb);
            for r in 0..R {
                let isum = vaddvq_s32(iacc[r][c]) - 4 * corr[r][c];
                acc[r][c] += (d[r] * da) * isum as f32;
            }
        }
    }
    store(ctx, j, i, &acc);
}

unsafe fn tile_neon<const R: usize, const C: usize>(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
    match kind {
        Kind::Q4K => tile_q4k::<R, C, false, false>(ctx, j, i),
        Kind::Q5K => tile_q4k::<R, C, false, true>(ctx, j, i),
        Kind::Q6K => tile_q6k::<R, C, false, false>(ctx, j, i),
        Kind::Q8KS => tile_q6k::<R, C, false, true>(ctx, j, i),
        Kind::IQ4XS => tile_iq4xs::<R, C, false>(ctx, j, i),
        Kind::Q2K => tile_q2k::<R, C, false>(ctx, j, i),
        Kind::Q3K => tile_q3k::<R, C, false>(ctx, j, i),
        Kind::TQ2 => tile_tq2::<R, C, false>(ctx, j, i),
    }
}

#[target_feature(enable = "dotprod")]
unsafe fn tile_dot<const R: usize, const C: usize>(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
    match kind {
        Kind::Q4K => tile_q4k::<R, C, true, false>(ctx, j, i),
        Kind::Q5K => tile_q4k::<R, C, true, true>(ctx, j, i),
        Kind::Q6K => tile_q6k::<R, C, true, false>(ctx, j, i),
        Kind::Q8KS => tile_q6k::<R, C, true, true>(ctx, j, i),
        Kind::IQ4XS => tile_iq4xs::<R, C, true>(ctx, j, i),
        Kind::Q2K => tile_q2k::<R, C, true>(ctx, j, i),
        Kind::Q3K => tile_q3k::<R, C, true>(ctx, j, i),
        Kind::TQ2 => tile_tq2::<R, C, true>(ctx, j, i),
    }
}

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

pub(super) fn tile_fn<const DOT: bool>(kind: Kind, r: usize, c: usize) -> Tile<Ctx> {
    let table = match (DOT, r, c) {
        (false, 4, 2) => per_kind!(tile_neon, 4, 2),
        (false, 4, _) => per_kind!(tile_neon, 4, 1),
        (false, _, 2) => per_kind!(tile_neon, 1, 2),
        (false, _, _) => per_kind!(tile_neon, 1, 1),
        (true, 4, 2) => per_kind!(tile_dot, 4, 2),
        (true, 4, _) => per_kind!(tile_dot, 4, 1),
        (true, _, 2) => per_kind!(tile_dot, 1, 2),
        (true, _, _) => per_kind!(tile_dot, 1, 1),
    };
    table[kind as usize]
}
