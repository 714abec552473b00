//! Arm i8mm prompt tiles of Q4_K and Q5_K: `smmla` multiplies two weight
//! rows by two activation rows at once (8 codes of each, lanes (w0,a0),
//! (w0,a1), (w1,a0), (w1,a1)), so a 32-value sub-block of the 2x2 tile is
//! four instructions where the dotprod tiles spend eight `sdot`. Each
//! sub-block's integer dot is weighted by its rows' scales (`[s0, s0, s1,
//! s1]`), the super-block's minimum terms and float finish are the twin's
//! (`finish_q4k`, lane by lane), so every output equals the twin's bits
//! and the tile may run for any step (prompt chunks only, for now: see
//! `k_quants::gemm`). ggml has the same kind of loop (`ggml_vec_dot_q4_K_q8_K`
//! with `nrc == 2`); `bench/llvm_mca.sh` compares the two.

use std::arch::aarch64::*;

use super::super::block32::{cols2, f16x4_neon, smmla, u32x2_at};
use super::neon::tile_fn as dot_tile_fn;
use super::{store, unpack_scales_u32, Ctx, Kind, Tile};
use crate::quant::QK_K;

/// Rows `[x0 | x1]` of 8 bytes each, for half `h` (0: bytes 0..8 of each
/// 16, 1: bytes 8..16): `smmla`'s operand of two rows.
#[inline(always)]
unsafe fn zip8(x0: int8x16_t, x1: int8x16_t, h: usize) -> int8x16_t {
    let (a, b) = (vreinterpretq_s64_s8(x0), vreinterpretq_s64_s8(x1));
    vreinterpretq_s8_s64(if h == 0 {
        vzip1q_s64(a, b)
    } else {
        vzip2q_s64(a, b)
    })
}

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

/// Tiles for `drive(.., 2, 2, ..)` of Q4_K (`Q5 = false`) or Q5_K:
/// `smmla` for full 2x2 tiles, the dotprod tiles for the edges.
pub(super) fn tile_fn_mm<const Q5: bool>() -> impl Fn(usize, usize) -> Tile<Ctx> {
    let (kind, mm, two): (Kind, Tile<Ctx>, Tile<Ctx>) = if Q5 {
        (Kind::Q5K, tile_mm::<true>, q5k_2x1)
    } else {
        (Kind::Q4K, tile_mm::<false>, q4k_2x1)
    };
    move |r: usize, c: usize| match (r, c) {
        (2, 2) => mm,
        (2, _) => two,
        _ => dot_tile_fn::<true>(kind, r, c),
    }
}
