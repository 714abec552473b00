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

/// One pair of blocks `(b, b + 1)` of an R x C tile into the sums `acc`.
#[inline(always)]
unsafe fn step2<B: Block32, const R: usize, const C: usize>(
    acc: &mut [[__m512; C]; R],
    acc_min: &mut [[f32; C]; R],
    ctx: &Ctx,
    w0: *const u8,
    i: usize,
    b: usize,
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
        if R <= 2 {
            // The next tile's rows, for the prefetchers (as the 256-bit
            // one-row tiles do).
            let ahead = p0.wrapping_add(R * ctx.row_bytes);
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
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r][c]);
            if B::HAS_MIN {
                acc_min[r][c] += mw[r][0] * (da0 * sa0 as f32) + mw[r][1] * (da1 * sa1 as f32);
            }
        }
    }
}

/// R x C tile over all blocks of the row: one multiply-add chain per
/// output over the block pairs, in order; a row's odd last block through
/// the 256-bit step into its own sum, added last.
#[inline(always)]
unsafe fn tile_body<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
    let nb = ctx.nb;
    let w0 = ctx.w.add(j * ctx.row_bytes);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut acc_min = [[0.0f32; C]; R];
    for p in 0..nb / 2 {
        step2::<B, R, C>(&mut acc, &mut acc_min, ctx, w0, i, 2 * p);
    }
    let mut tail = [[_mm256_setzero_ps(); C]; R];
    let mut tail_min = [[0.0f32; C]; R];
    if nb % 2 == 1 {
        super::block32::step_x86::<B, R, C, true>(&mut tail, &mut tail_min, ctx, w0, i, nb - 1);
    }
    for r in 0..R {
        for c in 0..C {
            let t = _mm512_castps256_ps512(tail[r][c]);
            let v = _mm512_add_ps(acc[r][c], _mm512_maskz_mov_ps(0x00FF, t));
            *ctx.out.add((i + c) * ctx.ldo + j + r) =
                _mm512_reduce_add_ps(v) + (acc_min[r][c] + tail_min[r][c]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
    tile_body::<B, R, C>(ctx, j, i)
}

/// The tile function for an `r x c` tile (r: 4, 2 or 1; c: 1..=4).
pub(super) fn tile_fn<B: Block32>(r: usize, c: usize) -> super::Tile<Ctx> {
    super::block32::tile_table!(tile, r, c)
}
