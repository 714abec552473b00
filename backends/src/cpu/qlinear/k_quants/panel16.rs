//! AVX-512 VNNI prefill of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_KS, IQ4_XS and TQ2_0 with sixteen
//! weight rows interleaved, as the Q4_0 x16 tiles (`x16`) are: one
//! `vpdpbusd` multiplies four codes of all sixteen rows (one row per 32-bit
//! lane) by four activation bytes broadcast to every lane, so 64 products
//! take one instruction, where the 256-bit panel tiles (`panel`) spend a
//! `vpmaddubsw` and a `vpmaddwd` on 16 (pp512 of Qwen3-0.6B Q4_K_M ran at
//! 0.8x llama.cpp's, Q6_K at 0.35x, against 1.9x for Q4_0).
//!
//! A panel is built per sixteen weight rows and block of activation rows:
//! the 4-row panels' unpacking (`panel::build`, the same codes, scales and
//! minimum weights) run four times, then interleaved: per super-block, 64
//! vectors of codes (group `g` holds codes `4g..4g + 4` of each row), the
//! sub-block scales as i32 vectors (per 32 codes for Q4_K/Q5_K, per 16 for
//! the others: the sums of a sub-block are finished by one `vpmulld`), and
//! the minimum weights as i16 pairs for `vpdpwssd` against the activation
//! row's 16-value sums. IQ4_XS's table values are signed: its codes are
//! the values plus 128, and 128 times each sub-block's scaled activation
//! sum is taken off as Q6_K's offset of 32 is.
//!
//! The integers are the twins' (exact, whatever the order), and each
//! super-block's float finish is `finish_q4k` (Q2_K, Q4_K, Q5_K) or
//! `(d * da) * isum` (Q3_K, Q6_K, IQ4_XS) lane by lane, added in super-block order:
//! bit for bit what the twins and every other path give, so a row's output
//! does not depend on how many rows a call has.

use std::arch::x86_64::*;

use super::panel::{self, Ahead, Sb};
use super::{Ctx, Kind};
use crate::quant::QK_K;

/// Weight rows per panel: one per 32-bit lane.
const R: usize = 16;
/// Activation rows per tile: eight independent `vpdpbusd` chains keep
/// the multiplier busy (four left it waiting on their latency).
const C: usize = 8;
/// Activation rows per block: the panel is rebuilt once per block, and a
/// block's activations (128 KiB at 1024 features) stay in L2 while every
/// panel of the task passes over them.
const MB: usize = 128;

/// One super-block of a panel's sixteen rows.
#[repr(C, align(64))]
struct Sb16 {
    /// Group `g`: codes `4g..4g + 4` of row `l` in bytes `4l..4l + 4`.
    codes: [[u8; 64]; QK_K / 4],
    /// Per sub-block (16 codes; Q4_K/Q5_K: entries `2t` for 32 codes),
    /// the scale of each row.
    scales: [[i32; R]; 16],
    /// Per pair `t` of 16-value sums, the minimum weights of sums `2t` and
    /// `2t + 1` of each row as two i16.
    mins: [[i32; R]; 8],
    d: [f32; R],
    dmin: [f32; R],
}

thread_local! {
    static PANELS: std::cell::Cell<(Vec<Sb>, Vec<Sb16>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// Unpacks weight rows `j..j + R` into `out`, one `Sb16` per super-block;
/// `four` is scratch for the 4-row panels.
#[inline(always)]
unsafe fn build(kind: Kind, ctx: &Ctx, j: usize, four: &mut [Sb], out: &mut [Sb16]) {
    for q in 0..R / panel::R {
        panel::build(kind, ctx, j + panel::R * q, four);
        for (p, o) in four.iter().zip(out.iter_mut()) {
            // The four rows' codes into lanes 4q..4q + 4 of every group:
            // 4 x 4 transposes of (row, group) dwords. IQ4_XS: the signed
            // table values plus 128 (the sign bit flipped), unsigned for
            // `vpdpbusd`; the 128 * sum of each sub-block's activations is
            // taken off below. (Copying lane by lane compiled to
            // `vpscatterdd`: 9% of this path's time.)
            let flip = _mm_set1_epi32(if kind == Kind::IQ4XS {
                0x8080_8080u32 as i32
            } else {
                0
            });
            let rows: [*const u8; panel::R] = std::array::from_fn(|r| {
                if kind == Kind::IQ4XS {
                    p.signs[r].as_ptr() as *const u8
                } else {
                    p.codes[r].as_ptr()
                }
            });
            for g in (0..QK_K / 4).step_by(4) {
                let [a, b, c, d] = rows.map(|row| {
                    _mm_xor_si128(_mm_loadu_si128(row.add(4 * g) as *const __m128i), flip)
                });
                let (ab0, cd0) = (_mm_unpacklo_epi32(a, b), _mm_unpacklo_epi32(c, d));
                let (ab1, cd1) = (_mm_unpackhi_epi32(a, b), _mm_unpackhi_epi32(c, d));
                let out = [
                    _mm_unpacklo_epi64(ab0, cd0),
                    _mm_unpackhi_epi64(ab0, cd0),
                    _mm_unpacklo_epi64(ab1, cd1),
                    _mm_unpackhi_epi64(ab1, cd1),
                ];
                for (t, v) in out.into_iter().enumerate() {
                    let dst = o.codes[g + t].as_mut_ptr().add(16 * q) as *mut __m128i;
                    _mm_storeu_si128(dst, v);
                }
            }
            for r in 0..panel::R {
                let lane = panel::R * q + r;
                // `panel`'s scale vector of 32-code chunk t: lanes 0-7
                // the chunk's first 16 codes, 8-15 its second.
                for u in 0..16 {
                    o.scales[u][lane] = p.scales[r][u / 2][8 * (u % 2)] as i32;
                }
                for t in 0..8 {
                    let (m0, m1) = if kind == Kind::IQ4XS {
                        // Each 16-value sum weighs its sub-block's scale.
                        (p.scales[r][t][0], p.scales[r][t][0])
                    } else {
                        (p.mins[r][2 * t], p.mins[r][2 * t + 1])
                    };
                    o.mins[t][lane] = (m0 as u16 as u32 | ((m1 as u16 as u32) << 16)) as i32;
                }
                o.d[lane] = p.d[r * panel::C];
                o.dmin[lane] = p.dmin[r * panel::C];
            }
        }
    }
}

/// Weight rows `j..j + R` (unpacked in `panel`) by activation rows
/// `i..i + N`.
#[inline(always)]
unsafe fn tile<const N: usize, const PER32: bool>(
    kind: Kind,
    ctx: &Ctx,
    panel: &[Sb16],
    j: usize,
    i: usize,
) {
    let nsb = ctx.nsb;
    let k = nsb * QK_K;
    // One scale multiplies the sums of 32 codes (Q4_K, Q5_K) or 16: a
    // constant, so that the loops unroll.
    let (subs, groups) = if PER32 { (8, 8) } else { (16, 4) };
    let mut facc = [_mm512_setzero_ps(); N];
    for (sb, p) in panel.iter().enumerate() {
        let pa: [*const u8; N] =
            std::array::from_fn(|c| ctx.aq.add((i + c) * k + sb * QK_K) as *const u8);
        let mut isum = [_mm512_setzero_si512(); N];
        for u in 0..subs {
            let mut acc = [_mm512_setzero_si512(); N];
            for g in 0..groups {
                let at = groups * u + g;
                let w = _mm512_load_si512(p.codes[at].as_ptr() as *const __m512i);
                for c in 0..N {
                    let a = (pa[c].add(4 * at) as *const i32).read_unaligned();
                    acc[c] = _mm512_dpbusd_epi32(acc[c], w, _mm512_set1_epi32(a));
                }
            }
            let s = _mm512_load_si512(
                p.scales[if PER32 { 2 * u } else { u }].as_ptr() as *const __m512i
            );
            for c in 0..N {
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(acc[c], s));
            }
        }
        // sum_k mins_k * bsum_k over the 16-value sums.
        let mut corr = [_mm512_setzero_si512(); N];
        for t in 0..8 {
            let m = _mm512_load_si512(p.mins[t].as_ptr() as *const __m512i);
            for c in 0..N {
                let bs =
                    (ctx.abs.add(((i + c) * nsb + sb) * 16 + 2 * t) as *const i32).read_unaligned();
                corr[c] = _mm512_dpwssd_epi32(corr[c], m, _mm512_set1_epi32(bs));
            }
        }
        let d = _mm512_load_ps(p.d.as_ptr());
        let dmin = _mm512_load_ps(p.dmin.as_ptr());
        for c in 0..N {
            let da = _mm512_set1_ps(*ctx.ad.add((i + c) * nsb + sb));
            let dd = _mm512_mul_ps(d, da);
            let v = match kind {
                // isum - 32 * sum_k sc_k * bsum_k, as `vec_dot_q6k` (Q3_K:
                // 4; Q8_KS: 64; IQ4_XS: the 128 its codes were moved by).
                Kind::Q6K | Kind::Q3K | Kind::Q8KS | Kind::IQ4XS | Kind::TQ2 => {
                    let shifted = match kind {
                        // TQ2_0: every scale 1, the offset 1.
                        Kind::TQ2 => corr[c],
                        Kind::Q6K => _mm512_slli_epi32::<5>(corr[c]),
                        Kind::Q8KS => _mm512_slli_epi32::<6>(corr[c]),
                        Kind::Q3K => _mm512_slli_epi32::<2>(corr[c]),
                        _ => _mm512_slli_epi32::<7>(corr[c]),
                    };
                    let isum = _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[c], shifted));
                    _mm512_mul_ps(dd, isum)
                }
                // `finish_q4k` lane by lane.
                _ => {
                    let dm = _mm512_mul_ps(dmin, da);
                    _mm512_sub_ps(
                        _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum[c])),
                        _mm512_mul_ps(dm, _mm512_cvtepi32_ps(corr[c])),
                    )
                }
            };
            facc[c] = _mm512_add_ps(facc[c], v);
        }
    }
    for (c, f) in facc.iter().enumerate() {
        _mm512_storeu_ps(ctx.out.add((i + c) * ctx.ldo + j), *f);
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn run(kind: Kind, ctx: &Ctx, nr: usize, m: usize) {
    // The panels are kept per thread: zeroing them for every call was ~3%
    // of a prefill (every field read is written by `build` first).
    let (mut four, mut sixteen) = PANELS.take();
    four.resize_with(ctx.nsb, || std::mem::zeroed());
    sixteen.resize_with(ctx.nsb, || std::mem::zeroed());
    let whole = nr / R * R;
    for i0 in (0..m).step_by(MB) {
        let i1 = (i0 + MB).min(m);
        for j in (0..whole).step_by(R) {
            build(kind, ctx, j, &mut four, &mut sixteen);
            // The next panel's weight bytes, fetched a slice per tile
            // while this panel's tiles compute: `build` reads sixteen
            // rows in an order the hardware prefetchers do not follow,
            // and waited on memory for ~13% of a Q6_K prefill.
            let next = if j + R < whole {
                Some(j + R)
            } else {
                (i1 < m).then_some(0)
            };
            let ahead = Ahead::new(ctx, next, R, (i1 - i0) / C);
            let mut i = i0;
            if matches!(kind, Kind::Q4K | Kind::Q5K | Kind::IQ4XS) {
                while i + C <= i1 {
                    ahead.slice((i - i0) / C);
                    tile::<C, true>(kind, ctx, &sixteen, j, i);
                    i += C;
                }
                for i in i..i1 {
                    tile::<1, true>(kind, ctx, &sixteen, j, i);
                }
            } else {
                while i + C <= i1 {
                    ahead.slice((i - i0) / C);
                    tile::<C, false>(kind, ctx, &sixteen, j, i);
                    i += C;
                }
                for i in i..i1 {
                    tile::<1, false>(kind, ctx, &sixteen, j, i);
                }
            }
        }
    }
    PANELS.set((four, sixteen));
    if whole < nr {
        // The rows left over: the 4-row panels, which give the same bits.
        let rest = Ctx {
            w: ctx.w.add(whole * ctx.row_bytes),
            out: ctx.out.add(whole),
            ..*ctx
        };
        panel::gemm(kind, true, &rest, nr - whole, m);
    }
}

/// This path over `ctx`'s `nr` weight rows and `m` activation rows.
///
/// # Safety
/// `ctx` must describe `nr` whole weight rows and `m` activation rows of
/// `ctx.nsb` super-blocks, and the CPU must have AVX-512 VNNI.
pub(super) unsafe fn gemm(kind: Kind, ctx: &Ctx, nr: usize, m: usize) {
    run(kind, ctx, nr, m)
}
