//! Prefill tiles of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_KS, IQ4_XS and TQ2_0 on x86 (AVX2 and AVX-512 VNNI on
//! 256-bit vectors): four weight rows are unpacked once into a panel, then
//! every activation row streams past it two at a time.
//!
//! The plain tiles (`x86`) decode a super-block's nibbles, high bits and
//! 6-bit scales again for every activation row, and reduce and finish each
//! (row, super-block) with scalar code; for prefill that work outweighed
//! the integer dot products (pp512 at half llama.cpp's speed). Here a
//! panel holds, per super-block and row, the 256 codes in element order as
//! bytes, each 32-code chunk's i16 scale vector (ready for `vpmaddwd`) and
//! the per-16 minimum weights, so the inner loop is one `vpmaddubsw`, one
//! `vpmaddwd` (or `vpdpwssd`) and one add per chunk, row and activation row.
//! The eight (row, activation row) sums of a super-block are reduced
//! together and finished in one vector. IQ4_XS's table values are signed:
//! its panel holds `|v|` as the codes and `v` for the sign each activation
//! byte takes (`vpsignb`), one more instruction per chunk.
//!
//! Every product, sum and the float finish are those of the scalar twins
//! (`vec_dot_q4k`, `vec_dot_q6k`), lane by lane and in the same order, so
//! this path agrees with them bit for bit, and a row's output does not
//! depend on which path or how many rows a call has.

use std::arch::x86_64::*;

use super::super::block32::f16_at;
use super::x86::{iq4_values, madd_scaled, tile_fn};
use super::x86_per16::{q2_codes, q2_scales_mins, q3_codes, q6_codes, q8_codes};
use super::{iq4xs_scales, q3k_scales, unpack_scales, Ctx, Kind};
use crate::quant::QK_K;

/// Weight rows per panel.
pub(super) const R: usize = 4;
/// Activation rows per tile.
pub(super) const C: usize = 2;
/// Activation rows per block: the panel is rebuilt once per block, and a
/// block's activations (64 KiB at 1024 features) stay in L2 while every
/// panel of the task passes over them.
const MB: usize = 64;

/// One super-block of a panel's four rows.
#[repr(C, align(32))]
pub(super) struct Sb {
    /// The 256 codes of each row, unsigned, in element order (IQ4_XS:
    /// the table values' magnitudes).
    pub(super) codes: [[u8; QK_K]; R],
    /// IQ4_XS only: the signed table values.
    pub(super) signs: [[i8; QK_K]; R],
    /// Per row and 32-code chunk, the scale of each i16 pair lane of
    /// `vpmaddubsw`'s result (lanes 0-7: the chunk's first 16 codes).
    pub(super) scales: [[[i16; 16]; 8]; R],
    /// Per row, the weight of each 16-code activation sum: Q4_K/Q5_K the
    /// sub-block's minimum, Q6_K the scale (times the code offset 32).
    pub(super) mins: [[i16; 16]; R],
    /// `d` and `dmin` of row `l / C` in lane `l`: the lanes of the tile's
    /// reduced sums.
    pub(super) d: [f32; R * C],
    pub(super) dmin: [f32; R * C],
}

/// Sums of each of eight vectors, lane `l` holding `v[l]`'s.
#[inline(always)]
unsafe fn reduce8(v: &[__m256i; 8]) -> __m256i {
    let a = _mm256_hadd_epi32(v[0], v[1]);
    let b = _mm256_hadd_epi32(v[2], v[3]);
    let c = _mm256_hadd_epi32(v[4], v[5]);
    let d = _mm256_hadd_epi32(v[6], v[7]);
    let x = _mm256_hadd_epi32(a, b);
    let y = _mm256_hadd_epi32(c, d);
    let lo = _mm256_permute2x128_si256(x, y, 0x20);
    let hi = _mm256_permute2x128_si256(x, y, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Unpacks weight rows `j..j + R` into `panel` (one `Sb` per super-block).
#[inline(always)]
pub(super) unsafe fn build(kind: Kind, ctx: &Ctx, j: usize, panel: &mut [Sb]) {
    let mask = _mm256_set1_epi8(0x0F);
    let size = kind.size();
    for (sb, p) in panel.iter_mut().enumerate() {
        for r in 0..R {
            let blk = ctx.w.add((j + r) * ctx.row_bytes + sb * size);
            let codes = p.codes[r].as_mut_ptr() as *mut __m256i;
            if kind == Kind::Q3K {
                let d = f16_at(blk.add(108));
                for c in 0..C {
                    (p.d[r * C + c], p.dmin[r * C + c]) = (d, 0.0);
                }
                for n in 0..2 {
                    for g in 0..4 {
                        _mm256_store_si256(codes.add(4 * n + g), q3_codes(blk, n, g));
                    }
                }
                let s = q3k_scales(std::slice::from_raw_parts(blk.add(96), 12));
                for t in 0..8 {
                    let (s0, s1) = (s[2 * t], s[2 * t + 1]);
                    p.scales[r][t] = [
                        s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1,
                    ];
                }
                p.mins[r] = s;
                continue;
            }
            if kind == Kind::TQ2 {
                // Ternary: the 2-bit codes under scales of 1, and the
                // offset 1 against each 16-value activation sum.
                let d = f16_at(blk.add(64));
                for c in 0..C {
                    (p.d[r * C + c], p.dmin[r * C + c]) = (d, 0.0);
                }
                for n in 0..2 {
                    for g in 0..4 {
                        _mm256_store_si256(codes.add(4 * n + g), q2_codes(blk, n, g));
                    }
                }
                p.scales[r] = [[1; 16]; 8];
                p.mins[r] = [1; 16];
                continue;
            }
            if kind == Kind::Q2K {
                let (d, dmin) = (f16_at(blk.add(80)), f16_at(blk.add(82)));
                for c in 0..C {
                    (p.d[r * C + c], p.dmin[r * C + c]) = (d, dmin);
                }
                for n in 0..2 {
                    for g in 0..4 {
                        _mm256_store_si256(codes.add(4 * n + g), q2_codes(blk.add(16), n, g));
                    }
                }
                let (sc, mn) = q2_scales_mins(blk);
                let mut s16 = [0i16; 16];
                _mm256_storeu_si256(s16.as_mut_ptr() as *mut __m256i, sc);
                _mm256_storeu_si256(p.mins[r].as_mut_ptr() as *mut __m256i, mn);
                for t in 0..8 {
                    let (s0, s1) = (s16[2 * t], s16[2 * t + 1]);
                    p.scales[r][t] = [
                        s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1,
                    ];
                }
                continue;
            }
            if kind == Kind::IQ4XS {
                let d = f16_at(blk);
                for c in 0..C {
                    (p.d[r * C + c], p.dmin[r * C + c]) = (d, 0.0);
                }
                let signs = p.signs[r].as_mut_ptr() as *mut __m256i;
                let scales = iq4xs_scales(std::slice::from_raw_parts(blk, 8));
                for t in 0..8 {
                    let v = iq4_values(blk.add(8 + 16 * t));
                    _mm256_store_si256(signs.add(t), v);
                    _mm256_store_si256(codes.add(t), _mm256_sign_epi8(v, v));
                    p.scales[r][t] = [scales[t]; 16];
                }
                p.mins[r] = [0; 16];
                continue;
            }
            if kind == Kind::Q6K || kind == Kind::Q8KS {
                // Both keep 16 i8 scales and then `d` at their end.
                let at = size - 18;
                let d = f16_at(blk.add(size - 2));
                for c in 0..C {
                    (p.d[r * C + c], p.dmin[r * C + c]) = (d, 0.0);
                }
                for n in 0..2 {
                    for g in 0..4 {
                        let q = if kind == Kind::Q8KS {
                            q8_codes(blk, n, g)
                        } else {
                            q6_codes(blk, n, g)
                        };
                        _mm256_store_si256(codes.add(4 * n + g), q);
                    }
                }
                for t in 0..8 {
                    let s0 = *blk.add(at + 2 * t) as i8 as i16;
                    let s1 = *blk.add(at + 1 + 2 * t) as i8 as i16;
                    p.scales[r][t] = [
                        s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1,
                    ];
                }
                for k in 0..16 {
                    p.mins[r][k] = *blk.add(at + k) as i8 as i16;
                }
                continue;
            }
            let q5 = kind == Kind::Q5K;
            let (d, dmin) = (f16_at(blk), f16_at(blk.add(2)));
            for c in 0..C {
                (p.d[r * C + c], p.dmin[r * C + c]) = (d, dmin);
            }
            let (sc, mn) = unpack_scales(std::slice::from_raw_parts(blk.add(4), 12));
            let qs = blk.add(if q5 { 48 } else { 16 });
            let mut hb = if q5 {
                _mm256_loadu_si256(blk.add(16) as *const __m256i)
            } else {
                _mm256_setzero_si256()
            };
            for pp in 0..4 {
                let q = _mm256_loadu_si256(qs.add(32 * pp) as *const __m256i);
                let mut lo = _mm256_and_si256(q, mask);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
                if q5 {
                    // As in `x86::tile_q4k`: bits 0 and 1 of each byte are
                    // sub-blocks 2pp and 2pp + 1.
                    let h0 = _mm256_and_si256(hb, _mm256_set1_epi8(1));
                    let h1 = _mm256_and_si256(hb, _mm256_set1_epi8(2));
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 3));
                    hb = _mm256_srli_epi16(hb, 2);
                }
                _mm256_store_si256(codes.add(2 * pp), lo);
                _mm256_store_si256(codes.add(2 * pp + 1), hi);
            }
            for t in 0..8 {
                p.scales[r][t] = [sc[t]; 16];
            }
            for k in 0..16 {
                p.mins[r][k] = mn[k / 2];
            }
        }
    }
}

/// Weight rows `j..j + R` (unpacked in `panel`) by activation rows
/// `i..i + C`.
#[inline(always)]
unsafe fn tile<const VNNI: bool>(kind: Kind, ctx: &Ctx, panel: &[Sb], j: usize, i: usize) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    let mut facc = _mm256_setzero_ps();
    for (sb, p) in panel.iter().enumerate() {
        let mut acc = [_mm256_setzero_si256(); R * C];
        let pa = [
            ctx.aq.add(i * k + sb * QK_K),
            ctx.aq.add((i + 1) * k + sb * QK_K),
        ];
        for t in 0..8 {
            let a = [
                _mm256_loadu_si256(pa[0].add(32 * t) as *const __m256i),
                _mm256_loadu_si256(pa[1].add(32 * t) as *const __m256i),
            ];
            for r in 0..R {
                let w = _mm256_load_si256(p.codes[r].as_ptr().add(32 * t) as *const __m256i);
                let s = _mm256_load_si256(p.scales[r][t].as_ptr() as *const __m256i);
                if kind == Kind::IQ4XS {
                    let v = _mm256_load_si256(p.signs[r].as_ptr().add(32 * t) as *const __m256i);
                    for c in 0..C {
                        let sa = _mm256_sign_epi8(a[c], v);
                        acc[r * C + c] = madd_scaled::<VNNI>(acc[r * C + c], w, sa, s);
                    }
                } else {
                    for c in 0..C {
                        acc[r * C + c] = madd_scaled::<VNNI>(acc[r * C + c], w, a[c], s);
                    }
                }
            }
        }
        let bs = [
            _mm256_loadu_si256(ctx.abs.add((i * nsb + sb) * 16) as *const __m256i),
            _mm256_loadu_si256(ctx.abs.add(((i + 1) * nsb + sb) * 16) as *const __m256i),
        ];
        let mut mins = [_mm256_setzero_si256(); R * C];
        if kind == Kind::IQ4XS {
            let isum = _mm256_cvtepi32_ps(reduce8(&acc));
            let da0 = *ctx.ad.add(i * nsb + sb);
            let da1 = *ctx.ad.add((i + 1) * nsb + sb);
            let da = _mm256_setr_ps(da0, da1, da0, da1, da0, da1, da0, da1);
            let dd = _mm256_mul_ps(_mm256_load_ps(p.d.as_ptr()), da);
            facc = _mm256_add_ps(facc, _mm256_mul_ps(dd, isum));
            continue;
        }
        for r in 0..R {
            let m16 = _mm256_load_si256(p.mins[r].as_ptr() as *const __m256i);
            for c in 0..C {
                mins[r * C + c] = _mm256_madd_epi16(m16, bs[c]);
            }
        }
        let da0 = *ctx.ad.add(i * nsb + sb);
        let da1 = *ctx.ad.add((i + 1) * nsb + sb);
        let da = _mm256_setr_ps(da0, da1, da0, da1, da0, da1, da0, da1);
        let dd = _mm256_mul_ps(_mm256_load_ps(p.d.as_ptr()), da);
        if matches!(kind, Kind::Q6K | Kind::Q3K | Kind::Q8KS | Kind::TQ2) {
            // isum - 32 * sum_k sc_k * bsum_k, as `vec_dot_q6k` (Q3_K: 4,
            // Q8_KS: 64, TQ2_0: 1 with every scale 1, `vec_dot_tq2`).
            for l in 0..R * C {
                let corr = match kind {
                    Kind::TQ2 => mins[l],
                    Kind::Q3K => _mm256_slli_epi32(mins[l], 2),
                    Kind::Q8KS => _mm256_slli_epi32(mins[l], 6),
                    _ => _mm256_slli_epi32(mins[l], 5),
                };
                acc[l] = _mm256_sub_epi32(acc[l], corr);
            }
            let isum = _mm256_cvtepi32_ps(reduce8(&acc));
            facc = _mm256_add_ps(facc, _mm256_mul_ps(dd, isum));
        } else {
            // `finish_q4k` lane by lane.
            let isum = _mm256_cvtepi32_ps(reduce8(&acc));
            let imin = _mm256_cvtepi32_ps(reduce8(&mins));
            let dm = _mm256_mul_ps(_mm256_load_ps(p.dmin.as_ptr()), da);
            let v = _mm256_sub_ps(_mm256_mul_ps(dd, isum), _mm256_mul_ps(dm, imin));
            facc = _mm256_add_ps(facc, v);
        }
    }
    let mut out = [0.0f32; R * C];
    _mm256_storeu_ps(out.as_mut_ptr(), facc);
    for r in 0..R {
        for c in 0..C {
            *ctx.out.add((i + c) * ctx.ldo + j + r) = out[r * C + c];
        }
    }
}

/// The weight bytes of one panel, prefetched in `parts` slices of cache
/// lines while the panel before it computes: `build` reads a panel's rows
/// in an order the hardware prefetchers do not follow.
pub(super) struct Ahead {
    base: *const u8,
    lines: usize,
    parts: usize,
}

impl Ahead {
    /// Rows `next..next + rows` of `ctx`, or nothing.
    pub(super) fn new(ctx: &Ctx, next: Option<usize>, rows: usize, parts: usize) -> Ahead {
        match next {
            Some(j) => Ahead {
                base: ctx.w.wrapping_add(j * ctx.row_bytes),
                lines: (rows * ctx.row_bytes).div_ceil(64),
                parts: parts.max(1),
            },
            None => Ahead {
                base: ctx.w,
                lines: 0,
                parts: 1,
            },
        }
    }

    /// Prefetches slice `t` of `parts` (a prefetch never faults).
    #[inline(always)]
    pub(super) unsafe fn slice(&self, t: usize) {
        let (a, b) = (
            t * self.lines / self.parts,
            (t + 1) * self.lines / self.parts,
        );
        for line in a..b.min(self.lines) {
            _mm_prefetch::<_MM_HINT_T0>(self.base.wrapping_add(64 * line) as *const i8);
        }
    }
}

/// `ctx.out [m][nr]` for all `nr` weight rows: panels of four rows with
/// two-row tiles; the rows a panel or tile leaves over go to the plain
/// tiles (which give the same bits).
#[inline(always)]
unsafe fn run<const VNNI: bool>(kind: Kind, ctx: &Ctx, nr: usize, m: usize) {
    let mut panel: Vec<Sb> = (0..ctx.nsb).map(|_| std::mem::zeroed()).collect();
    let whole = nr / R * R;
    for i0 in (0..m).step_by(MB) {
        let i1 = (i0 + MB).min(m);
        for j in (0..whole).step_by(R) {
            build(kind, ctx, j, &mut panel);
            let next = if j + R < whole {
                Some(j + R)
            } else {
                (i1 < m).then_some(0)
            };
            let ahead = Ahead::new(ctx, next, R, (i1 - i0) / C);
            let mut i = i0;
            while i + C <= i1 {
                ahead.slice((i - i0) / C);
                tile::<VNNI>(kind, ctx, &panel, j, i);
                i += C;
            }
            if i < i1 {
                tile_fn::<VNNI>(kind, R, 1)(ctx, j, i);
            }
        }
    }
    let one = tile_fn::<VNNI>(kind, 1, 1);
    for j in whole..nr {
        for i in 0..m {
            one(ctx, j, i);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2(kind: Kind, ctx: &Ctx, nr: usize, m: usize) {
    run::<false>(kind, ctx, nr, m)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn run_vnni(kind: Kind, ctx: &Ctx, nr: usize, m: usize) {
    run::<true>(kind, ctx, nr, m)
}

/// The panel path over `ctx`'s `nr` weight rows and `m` activation rows.
///
/// # Safety
/// `ctx` must describe `nr` whole weight rows and `m` activation rows of
/// `ctx.nsb` super-blocks, and the CPU must have AVX2 (and AVX-512 VNNI
/// with `vnni`).
pub(super) unsafe fn gemm(kind: Kind, vnni: bool, ctx: &Ctx, nr: usize, m: usize) {
    if vnni {
        run_vnni(kind, ctx, nr, m)
    } else {
        run_avx2(kind, ctx, nr, m)
    }
}
