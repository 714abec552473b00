//! The AVX-512 VNNI tiles of the 32-value block types on 512-bit vectors:
//! two consecutive blocks of a row per instruction (the weight pair in one
//! register, the activation pair a single 64-byte load, since a row's
//! blocks are adjacent). Against the 256-bit tiles this halves the integer
//! dot products, the int-to-float conversions and the multiply-adds per
//! block, and builds each scale vector once per row or column of the tile
//! instead of broadcasting one per (row, column) pair. A row's odd last
//! block goes through the 256-bit step.
//!
//! The integers are the twin's: `dpbusd` of the unsigned codes
//! (`code + OFFSET`) against the int8 activations, started at
//! `-OFFSET * sum(a)` per block (lanes 0 and 8), so every block's integer
//! dot is exact; only the order of the float additions differs.

use std::arch::x86_64::*;

use super::block32::{Block32, Ctx};

/// One pair of blocks `(b, b + 1)` of an R x C tile into accumulator set
/// `u` of `acc`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn step2<B: Block32, const R: usize, const C: usize, const U: usize>(
    acc: &mut [[[__m512; U]; C]; R],
    acc_min: &mut [[f32; C]; R],
    ctx: &Ctx,
    w0: *const u8,
    i: usize,
    b: usize,
    u: usize,
) {
    let (nb, k) = (ctx.nb, ctx.nb * 32);
    let mut wv = [_mm512_setzero_si512(); R];
    let mut dw = [_mm512_setzero_ps(); R];
    let mut mw = [[0.0f32; 2]; R];
    for r in 0..R {
        let p0 = w0.add(r * ctx.row_bytes + b * B::SIZE);
        let p1 = p0.add(B::SIZE);
        wv[r] = B::load_u8_pair(p0, p1);
        let ((d0, m0), (d1, m1)) = (B::dm_x86(p0), B::dm_x86(p1));
        dw[r] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
        mw[r] = [m0, m1];
        if R == 1 {
            // The next row's pair, for the prefetchers (as the 256-bit
            // one-row tiles do).
            let ahead = p0.wrapping_add(ctx.row_bytes);
            _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64) as *const i8);
        }
    }
    for c in 0..C {
        let ai = (i + c) * nb + b;
        let a = _mm512_loadu_si512(ctx.aq.add((i + c) * k + b * 32) as *const __m512i);
        let (da0, da1) = (*ctx.ad.add(ai), *ctx.ad.add(ai + 1));
        let (sa0, sa1) = (*ctx.asum.add(ai), *ctx.asum.add(ai + 1));
        let da = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(da0), _mm512_set1_ps(da1));
        let init = _mm512_mask_set1_epi32(
            _mm512_maskz_set1_epi32(0x0001, -B::OFFSET * sa0),
            0x0100,
            -B::OFFSET * sa1,
        );
        for r in 0..R {
            let dot = _mm512_dpbusd_epi32(init, wv[r], a);
            let scale = _mm512_mul_ps(dw[r], da);
            acc[r][c][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r][c][u]);
            if B::HAS_MIN {
                acc_min[r][c] += mw[r][0] * (da0 * sa0 as f32) + mw[r][1] * (da1 * sa1 as f32);
            }
        }
    }
}

/// R x C tile over all blocks of the row, `U` accumulators per output
/// (pairs taken in turn) so that one-row tiles are not bound by the
/// latency of one multiply-add chain.
#[inline(always)]
unsafe fn tile_body<B: Block32, const R: usize, const C: usize, const U: usize>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    let nb = ctx.nb;
    let w0 = ctx.w.add(j * ctx.row_bytes);
    let mut acc = [[[_mm512_setzero_ps(); U]; C]; R];
    let mut acc_min = [[0.0f32; C]; R];
    let mut b = 0;
    while b + 2 * U <= nb {
        for u in 0..U {
            step2::<B, R, C, U>(&mut acc, &mut acc_min, ctx, w0, i, b + 2 * u, u);
        }
        b += 2 * U;
    }
    while b + 2 <= nb {
        step2::<B, R, C, U>(&mut acc, &mut acc_min, ctx, w0, i, b, 0);
        b += 2;
    }
    // The odd last block: the 256-bit step, into its own accumulators.
    let mut tail = [[[_mm256_setzero_ps(); 1]; C]; R];
    if b < nb {
        super::block32::step_x86::<B, R, C, 1, true>(&mut tail, &mut acc_min, ctx, w0, i, b, 0);
    }
    for r in 0..R {
        for c in 0..C {
            let mut v = acc[r][c][0];
            for u in 1..U {
                v = _mm512_add_ps(v, acc[r][c][u]);
            }
            let t = _mm512_castps256_ps512(tail[r][c][0]);
            let v = _mm512_add_ps(v, _mm512_maskz_mov_ps(0x00FF, t));
            *ctx.out.add((i + c) * ctx.nr + j + r) = _mm512_reduce_add_ps(v) + acc_min[r][c];
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<B: Block32, const R: usize, const C: usize, const U: usize>(
    ctx: &Ctx,
    j: usize,
    i: usize,
) {
    tile_body::<B, R, C, U>(ctx, j, i)
}

/// The tile function for an `r x c` tile (r: 4 or 1, c: 1..=4).
pub(super) fn tile_fn<B: Block32>(r: usize, c: usize) -> super::Tile<Ctx> {
    match (r, c) {
        (4, 4) => tile::<B, 4, 4, 1>,
        (4, 3) => tile::<B, 4, 3, 1>,
        (4, 2) => tile::<B, 4, 2, 1>,
        (4, 1) => tile::<B, 4, 1, 1>,
        (1, 4) => tile::<B, 1, 4, 1>,
        (1, 3) => tile::<B, 1, 3, 1>,
        (1, 2) => tile::<B, 1, 2, 1>,
        _ => tile::<B, 1, 1, 2>,
    }
}
