//! TQ2_0's tiles (ternary weights): 2-bit codes `t + 1` in Q2_K's layout
//! (element `128n + 32g + l` is bits `2g..` of `qs[32n + l]`) under one f16
//! `d` per 256 values, nothing else. A super-block is one integer,
//! `sum(code * qa) - sum(qa)` (the activation sum from the per-16 sums),
//! and one float step, `(d * da) * isum`, as `vec_dot_tq2` computes it:
//! no sub-block scales to multiply (Q3_K's tiles, which TQ2_0 used to run
//! on, did sixteen and a third code bit). The codes are at most 3, so
//! `maddubs` pairs stay far inside an i16. Prompts on x86 take the
//! K-quants' panels (`panel`, `panel16`: the codes unpacked once per block
//! of activation rows, every scale 1, the offset 1 against the 16-value
//! sums), which give the same bits.

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::super::super::block32::f16_at;
    use super::super::rows4::prefetch_ahead;
    use super::super::x86::{hsum_i32, prefetch_next_row};
    use super::super::x86_per16::q2_codes;
    use super::super::{store, Ctx};
    use crate::quant::tq::BlockTQ2_0;
    use crate::quant::QK_K;

    /// The sum of an activation row's 256 codes from its 16 per-16 sums.
    #[inline(always)]
    unsafe fn act_sum(bs: *const i16) -> i32 {
        let v = _mm256_loadu_si256(bs as *const __m256i);
        hsum_i32(_mm256_madd_epi16(v, _mm256_set1_epi16(1)))
    }

    /// Four weight rows by one activation row: one-row decode (`rows4`).
    #[inline(always)]
    pub(in super::super) unsafe fn tile_tq2_rows4<const VNNI: bool>(ctx: &Ctx, j: usize, i: usize) {
        tile_tq2::<4, 1, VNNI>(ctx, j, i)
    }

    /// R weight rows by C activation rows (AVX2 `maddubs` + `madd`, or
    /// AVX-512 VNNI `vpdpbusd`): codes unsigned, activations signed.
    #[inline(always)]
    pub(in super::super) unsafe fn tile_tq2<const R: usize, const C: usize, const VNNI: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let (nsb, k) = (ctx.nsb, ctx.nsb * QK_K);
        let size = BlockTQ2_0::SIZE;
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut p = [std::ptr::null::<u8>(); R];
            for r in 0..R {
                p[r] = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
                prefetch_next_row::<R>(p[r], ctx.row_bytes, size);
            }
            if R == 4 && C == 1 {
                // The four-row decode tile (`rows4`): its prefetch.
                prefetch_ahead(ctx, j, sb);
            }
            // Two chains (even and odd chunks), so a one-row tile is not
            // bound by the latency of one. AVX2 keeps them in i16 lanes
            // and widens once per super-block: each lane adds at most 4
            // `maddubs` pairs of 2 * 3 * 127.
            let mut iacc = [[[_mm256_setzero_si256(); C]; R]; 2];
            unroll!(n in [0, 1] {
                unroll!(g in [0, 1, 2, 3] {
                    // A loop, not `array::from_fn`: a closure does not
                    // inherit the tile's target features, so the intrinsics
                    // inside it were calls (tg 10x slower).
                    let mut q = [_mm256_setzero_si256(); R];
                    for r in 0..R {
                        q[r] = q2_codes(p[r], n, g);
                    }
                    for c in 0..C {
                        let pa = ctx.aq.add((i + c) * k + sb * QK_K + 128 * n + 32 * g);
                        let a = _mm256_loadu_si256(pa as *const __m256i);
                        for r in 0..R {
                            let t = &mut iacc[g % 2][r][c];
                            *t = if VNNI {
                                _mm256_dpbusd_epi32(*t, q[r], a)
                            } else {
                                _mm256_add_epi16(*t, _mm256_maddubs_epi16(q[r], a))
                            };
                        }
                    }
                });
            });
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                let da = *ctx.ad.add(bi);
                let asum = act_sum(ctx.abs.add(bi * 16));
                for r in 0..R {
                    let both = if VNNI {
                        _mm256_add_epi32(iacc[0][r][c], iacc[1][r][c])
                    } else {
                        _mm256_madd_epi16(_mm256_add_epi16(iacc[0][r][c], iacc[1][r][c]), ones)
                    };
                    let isum = hsum_i32(both) - asum;
                    acc[r][c] += (f16_at(p[r].add(64)) * da) * isum as f32;
                }
            }
        }
        store(ctx, j, i, &acc);
    }
}

#[cfg(target_arch = "aarch64")]
pub(super) mod neon {
    use std::arch::aarch64::*;

    use super::super::super::block32::{f16_neon, sdot};
    use super::super::{store, Ctx};
    use crate::quant::tq::BlockTQ2_0;
    use crate::quant::QK_K;

    /// `acc` plus the dot of 32 codes `w` and activations `a` (one chain
    /// of two `sdot`, or of two widening multiplies and pairwise adds:
    /// two products of at most 3 * 127 per i16 lane).
    #[inline(always)]
    unsafe fn acc32<const DOT: bool>(
        acc: int32x4_t,
        w: [int8x16_t; 2],
        a: [int8x16_t; 2],
    ) -> int32x4_t {
        if DOT {
            sdot(sdot(acc, w[0], a[0]), w[1], a[1])
        } else {
            let m = |w: int8x16_t, a: int8x16_t| {
                vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a)
            };
            vpadalq_s16(vpadalq_s16(acc, m(w[0], a[0])), m(w[1], a[1]))
        }
    }

    /// R weight rows by C activation rows.
    #[inline(always)]
    pub(in super::super) unsafe fn tile_tq2<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let (nsb, k) = (ctx.nsb, ctx.nsb * QK_K);
        let size = BlockTQ2_0::SIZE;
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let p: [*const u8; R] =
                std::array::from_fn(|r| ctx.w.add((j + r) * ctx.row_bytes + sb * size));
            // Two chains (even and odd code shifts) in the decode tiles,
            // so a 1x1 tile is not bound by one chain's latency; one where
            // the tile's own cells are enough chains (and registers are
            // not).
            let chains = if R * C <= 2 { 2 } else { 1 };
            let mut iacc = [[[vdupq_n_s32(0); C]; R]; 2];
            for n in 0..2 {
                let b: [[uint8x16_t; 2]; R] = std::array::from_fn(|r| {
                    [vld1q_u8(p[r].add(32 * n)), vld1q_u8(p[r].add(32 * n + 16))]
                });
                // One activation row: its 128 bytes of this half as two
                // four-register `ld1` (LLVM paired single loads into `ldp
                // q`, three micro-ops each on Neoverse V2, the decode
                // loop's bound by llvm-mca).
                let a128 = if C == 1 {
                    let pa = ctx.aq.add(i * k + sb * QK_K + 128 * n);
                    let (x, y) = (vld1q_s8_x4(pa), vld1q_s8_x4(pa.add(64)));
                    [x.0, x.1, x.2, x.3, y.0, y.1, y.2, y.3]
                } else {
                    [vdupq_n_s8(0); 8]
                };
                for g in 0..4 {
                    let q: [[int8x16_t; 2]; R] = std::array::from_fn(|r| {
                        b[r].map(|b| {
                            let c = match g {
                                0 => b,
                                1 => vshrq_n_u8::<2>(b),
                                2 => vshrq_n_u8::<4>(b),
                                _ => vshrq_n_u8::<6>(b),
                            };
                            vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(3)))
                        })
                    });
                    for c in 0..C {
                        let a = if C == 1 {
                            [a128[2 * g], a128[2 * g + 1]]
                        } else {
                            let pa = ctx.aq.add((i + c) * k + sb * QK_K + 128 * n + 32 * g);
                            [vld1q_s8(pa), vld1q_s8(pa.add(16))]
                        };
                        for r in 0..R {
                            let t = &mut iacc[g % chains][r][c];
                            *t = acc32::<DOT>(*t, q[r], a);
                        }
                    }
                }
            }
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                let da = *ctx.ad.add(bi);
                // The activation sum as four lanes (pairs of 16-value sums
                // stay within 2 * 16 * 127 in i16), taken off before the
                // one reduction across lanes: the sum then stays in a
                // vector register for the conversion (a scalar subtraction
                // moved it through general registers).
                let bs = ctx.abs.add(bi * 16);
                let asum = vpaddlq_s16(vaddq_s16(vld1q_s16(bs), vld1q_s16(bs.add(8))));
                for r in 0..R {
                    let v = vsubq_s32(vaddq_s32(iacc[0][r][c], iacc[1][r][c]), asum);
                    let isum = vaddvq_s32(v);
                    acc[r][c] += (f16_neon(p[r].add(64)) * da) * isum as f32;
                }
            }
        }
        store(ctx, j, i, &acc);
    }
}
