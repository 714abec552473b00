//! Arm i8mm prompt tiles of Q4_K, Q5_K and Q6_K: `smmla` multiplies two
//! weight rows by two activation rows at once (8 codes of each, lanes
//! (w0,a0), (w0,a1), (w1,a0), (w1,a1)), so 32 values of the 2x2 tile are
//! four instructions where the dotprod tiles spend eight `sdot`. Each
//! sub-block's (Q6_K: 16 values') integer dot is weighted by its rows'
//! scales (`[s0, s0, s1, s1]`); the minimum terms and the float finish
//! are the twin's lane by lane, so every output equals the twin's bits
//! and the tiles could run for any step (prompt chunks only, for now: see
//! `k_quants::gemm`). The activations come paired (`ActQ8K::pairs`). ggml
//! has the same kind of loop for Q4_K and Q6_K (`ggml_vec_dot_*_q8_K` with
//! `nrc == 2`); `bench/llvm_mca.sh` compares them.

use std::arch::aarch64::*;

use super::super::block32::{cols2, f16x4_neon, smmla, u16x2_at, u32x2_at, zip8};
use super::neon::{q6k_codes16, tile_fn as dot_tile_fn};
use super::{store, unpack_scales_u32, Ctx, Kind, Tile};
use crate::quant::QK_K;

/// A super-block's eight 6-bit scales (bytes 0..8) and mins (8..16), by
/// `unpack_scales_u32`.
#[inline(always)]
unsafe fn scale_min_bytes(p: *const u8) -> uint8x16_t {
    let w = unpack_scales_u32(std::slice::from_raw_parts(p, 12));
    vld1q_u8(w.as_ptr() as *const u8)
}

/// The eight sub-blocks' `[s0[t], s0[t], s1[t], s1[t]]` (weight row 0's
/// and row 1's scale of sub-block t in `smmla`'s lane order), from both
/// rows' scale bytes by two table lookups and widening (built from lanes,
/// LLVM extracted each scale into a general register and back).
#[inline(always)]
unsafe fn row_pair_scales(v0: uint8x16_t, v1: uint8x16_t) -> [int32x4_t; 8] {
    const IDX: [[u8; 16]; 2] = [
        [0, 0, 8, 8, 1, 1, 9, 9, 2, 2, 10, 10, 3, 3, 11, 11],
        [4, 4, 12, 12, 5, 5, 13, 13, 6, 6, 14, 14, 7, 7, 15, 15],
    ];
    let both = vcombine_u8(vget_low_u8(v0), vget_low_u8(v1));
    let mut out = [vdupq_n_s32(0); 8];
    for (q, idx) in IDX.iter().enumerate() {
        let b = vqtbl1q_u8(both, vld1q_u8(idx.as_ptr()));
        for (h, w) in [vmovl_u8(vget_low_u8(b)), vmovl_high_u8(b)]
            .into_iter()
            .enumerate()
        {
            out[4 * q + 2 * h] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w)));
            out[4 * q + 2 * h + 1] = vreinterpretq_s32_u32(vmovl_high_u16(w));
        }
    }
    out
}

/// A row's eight mins (the high half of `scale_min_bytes`) as i16.
#[inline(always)]
unsafe fn mins(v: uint8x16_t) -> int16x8_t {
    vreinterpretq_s16_u16(vmovl_high_u8(v))
}

/// Q4_K (`Q5 = false`) or Q5_K weight rows `j, j + 1` by activation rows
/// `i, i + 1`.
#[target_feature(enable = "dotprod,i8mm")]
unsafe fn tile_mm<const Q5: bool>(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let size = if Q5 { 176 } else { 144 };
    let mut acc = vdupq_n_f32(0.0);
    for sb in 0..nsb {
        let p = [0, 1].map(|r| ctx.w.add((j + r) * ctx.row_bytes + sb * size));
        let sm = p.map(|p| scale_min_bytes(p.add(4)));
        let sc = row_pair_scales(sm[0], sm[1]);
        let qs = p.map(|p| p.add(if Q5 { 48 } else { 16 }));
        // Activation rows i and i + 1 (i is even), paired in 8-byte slices.
        let pa = ctx.apairs.add(i * k + sb * 2 * QK_K);
        let mut iacc = vdupq_n_s32(0);
        for pp in 0..4 {
            // Sub-blocks 2pp (low nibbles) and 2pp + 1 (high), both rows.
            let mut codes = [[[vdupq_n_s8(0); 2]; 2]; 2];
            for r in 0..2 {
                for h in 0..2 {
                    let q = vld1q_u8(qs[r].add(32 * pp + 16 * h));
                    let mut l = vandq_u8(q, vdupq_n_u8(0x0F));
                    let mut u = vshrq_n_u8::<4>(q);
                    if Q5 {
                        let bits = vld1q_u8(p[r].add(16 + 16 * h));
                        let b0 = vtstq_u8(bits, vdupq_n_u8(1 << (2 * pp)));
                        let b1 = vtstq_u8(bits, vdupq_n_u8(2 << (2 * pp)));
                        l = vorrq_u8(l, vandq_u8(b0, vdupq_n_u8(16)));
                        u = vorrq_u8(u, vandq_u8(b1, vdupq_n_u8(16)));
                    }
                    codes[0][r][h] = vreinterpretq_s8_u8(l);
                    codes[1][r][h] = vreinterpretq_s8_u8(u);
                }
            }
            for (half, w) in codes.iter().enumerate() {
                let at = 64 * pp + 32 * half;
                let mut dot = vdupq_n_s32(0);
                for h in 0..2 {
                    for e in 0..2 {
                        let a = vld1q_s8(pa.add(2 * (at + 16 * h) + 16 * e));
                        dot = smmla(dot, zip8(w[0][h], w[1][h], e), a);
                    }
                }
                iacc = vmlaq_s32(iacc, dot, sc[2 * pp + half]);
            }
        }
        let bi = [i * nsb + sb, (i + 1) * nsb + sb];
        // The minimum terms `min_sum` of the four (row, column) pairs as
        // one vector: each activation row's 32-value sums once, products
        // widened, reduced by pairwise adds (the twin's integers).
        let bp = bi.map(|b| {
            let bs = ctx.abs.add(b * 16);
            vpaddq_s16(vld1q_s16(bs), vld1q_s16(bs.add(8)))
        });
        let mn = [mins(sm[0]), mins(sm[1])];
        let prod = |r: usize, c: usize| {
            vaddq_s32(
                vmull_s16(vget_low_s16(mn[r]), vget_low_s16(bp[c])),
                vmull_high_s16(mn[r], bp[c]),
            )
        };
        let imin = vpaddq_s32(
            vpaddq_s32(prod(0, 0), prod(0, 1)),
            vpaddq_s32(prod(1, 0), prod(1, 1)),
        );
        // `finish_q4k` on four lanes: (d * da) * isum - (dmin * da) * imin,
        // with both rows' (d, dmin) f16 pairs converted at once.
        let da = vreinterpretq_f32_u32(cols2(ctx.ad.add(bi[0]), ctx.ad.add(bi[1])));
        let dm = f16x4_neon(u32x2_at(p[0], p[1]));
        let (d, dmin) = (vtrn1q_f32(dm, dm), vtrn2q_f32(dm, dm));
        let f = vsubq_f32(
            vmulq_f32(vmulq_f32(d, da), vcvtq_f32_s32(iacc)),
            vmulq_f32(vmulq_f32(dmin, da), vcvtq_f32_s32(imin)),
        );
        acc = vaddq_f32(acc, f);
    }
    let mut f = [0.0f32; 4];
    vst1q_f32(f.as_mut_ptr(), acc);
    store::<2, 2>(ctx, j, i, &[[f[0], f[1]], [f[2], f[3]]]);
}

/// The sixteen 16-value groups' `[s0[t], s0[t], s1[t], s1[t]]` of two
/// Q6_K rows (their i8 scales at `p0`, `p1`), by table lookups.
#[inline(always)]
unsafe fn row_pair_scales16(p0: *const u8, p1: *const u8) -> [int32x4_t; 16] {
    let both = int8x16x2_t(vld1q_s8(p0 as *const i8), vld1q_s8(p1 as *const i8));
    let mut out = [vdupq_n_s32(0); 16];
    for q in 0..4u8 {
        let t = 4 * q;
        let idx: [u8; 16] = std::array::from_fn(|l| {
            let (tt, row) = (t + (l / 4) as u8, (l % 4 / 2) as u8);
            tt + 16 * row
        });
        let b = vqtbl2q_s8(both, vld1q_u8(idx.as_ptr()));
        for (h, w) in [vmovl_s8(vget_low_s8(b)), vmovl_high_s8(b)]
            .into_iter()
            .enumerate()
        {
            out[4 * q as usize + 2 * h] = vmovl_s16(vget_low_s16(w));
            out[4 * q as usize + 2 * h + 1] = vmovl_high_s16(w);
        }
    }
    out
}

/// `iacc` plus 32-value group `G` of half `n` of a Q6_K super-block pair
/// (rows at `p`, paired activations at `pa`): codes less 32, two `smmla`
/// per 16 values, each 16 weighted by its rows' scales `sc`.
#[inline(always)]
unsafe fn q6k_group<const G: usize>(
    mut iacc: int32x4_t,
    p: [*const u8; 2],
    pa: *const i8,
    sc: &[int32x4_t; 16],
    n: usize,
) -> int32x4_t {
    let mut q = [[vdupq_n_s8(0); 2]; 2];
    for r in 0..2 {
        for h in 0..2 {
            let code = vreinterpretq_s8_u8(q6k_codes16(p[r], n, G, h));
            q[r][h] = vsubq_s8(code, vdupq_n_s8(32));
        }
    }
    for h in 0..2 {
        let at = 128 * n + 32 * G + 16 * h;
        let mut dot = vdupq_n_s32(0);
        for e in 0..2 {
            let a = vld1q_s8(pa.add(2 * at + 16 * e));
            dot = smmla(dot, zip8(q[0][h], q[1][h], e), a);
        }
        iacc = vmlaq_s32(iacc, dot, sc[8 * n + 2 * G + h]);
    }
    iacc
}

/// Q6_K weight rows `j, j + 1` by activation rows `i, i + 1`: codes less
/// 32 (signed, so no `-32 * sum(a)` term), two `smmla` per 16-value group
/// weighted by its rows' scales; the twin's integers and finish.
#[target_feature(enable = "dotprod,i8mm")]
unsafe fn tile_mm_q6k(ctx: &Ctx, j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut acc = vdupq_n_f32(0.0);
    for sb in 0..nsb {
        let p = [0, 1].map(|r| ctx.w.add((j + r) * ctx.row_bytes + sb * 210));
        let sc = row_pair_scales16(p[0].add(192), p[1].add(192));
        let pa = ctx.apairs.add(i * k + sb * 2 * QK_K);
        let mut iacc = vdupq_n_s32(0);
        for n in 0..2 {
            // The four 32-value groups by hand: with `g` a constant each
            // group's shifts are immediates (as a loop, LLVM kept it and
            // chose them by branches).
            iacc = q6k_group::<0>(iacc, p, pa, &sc, n);
            iacc = q6k_group::<1>(iacc, p, pa, &sc, n);
            iacc = q6k_group::<2>(iacc, p, pa, &sc, n);
            iacc = q6k_group::<3>(iacc, p, pa, &sc, n);
        }
        let bi = [i * nsb + sb, (i + 1) * nsb + sb];
        let da = vreinterpretq_f32_u32(cols2(ctx.ad.add(bi[0]), ctx.ad.add(bi[1])));
        let d = f16x4_neon(u16x2_at(p[0].add(208), p[1].add(208)));
        // The twin's `(d * da) * isum` on four lanes.
        let f = vmulq_f32(vmulq_f32(vzip1q_f32(d, d), da), vcvtq_f32_s32(iacc));
        acc = vaddq_f32(acc, f);
    }
    let mut f = [0.0f32; 4];
    vst1q_f32(f.as_mut_ptr(), acc);
    store::<2, 2>(ctx, j, i, &[[f[0], f[1]], [f[2], f[3]]]);
}

/// Two weight rows by one activation row (an odd last row), as two of the
/// dotprod tiles' one-row tiles.
#[target_feature(enable = "dotprod")]
unsafe fn tile_2x1(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
    let one = dot_tile_fn::<true>(kind, 1, 1);
    one(ctx, j, i);
    one(ctx, j + 1, i);
}

#[target_feature(enable = "dotprod")]
unsafe fn q4k_2x1(ctx: &Ctx, j: usize, i: usize) {
    tile_2x1(Kind::Q4K, ctx, j, i)
}

#[target_feature(enable = "dotprod")]
unsafe fn q5k_2x1(ctx: &Ctx, j: usize, i: usize) {
    tile_2x1(Kind::Q5K, ctx, j, i)
}

#[target_feature(enable = "dotprod")]
unsafe fn q6k_2x1(ctx: &Ctx, j: usize, i: usize) {
    tile_2x1(Kind::Q6K, ctx, j, i)
}

/// Tiles for `drive(.., 2, 2, ..)` of Q4_K, Q5_K or Q6_K (None for the
/// other kinds): `smmla` for full 2x2 tiles, the dotprod tiles for the
/// edges.
pub(super) fn tile_fn_mm(kind: Kind) -> Option<impl Fn(usize, usize) -> Tile<Ctx>> {
    let (mm, two): (Tile<Ctx>, Tile<Ctx>) = match kind {
        Kind::Q4K => (tile_mm::<false>, q4k_2x1),
        Kind::Q5K => (tile_mm::<true>, q5k_2x1),
        Kind::Q6K => (tile_mm_q6k, q6k_2x1),
        _ => return None,
    };
    Some(move |r: usize, c: usize| match (r, c) {
        (2, 2) => mm,
        (2, _) => two,
        _ => dot_tile_fn::<true>(kind, r, c),
    })
}
