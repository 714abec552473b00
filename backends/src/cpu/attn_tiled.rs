//! Prefill attention as one parallel loop of tiles: a task is one key head
//! and a block of `QB` queries (for every query head of the key head's
//! group), walking the keys it can see in blocks of `KB` with an online
//! softmax (flash attention's running maximum and sum).
//!
//! Why not per-head matrix products (`attention::sdpa_gemm`): those ran a
//! serial gather and transpose of each head, then three parallel loops per
//! head and query block (scores, softmax, values), so a 128-token prefill
//! chunk of a 16-head model paid ~50 pool hand-offs per layer with one
//! thread gathering while the other waited, computed the causally masked
//! half of every score block, and reduced each score horizontally. Here:
//! - one hand-off per call; the tasks gather their own keys and values
//!   (widening an f16 / q8_0 cache once per key block and group);
//! - only key blocks some query of the block can see are computed;
//! - scores come out key-major (`s[key][query]`), so the score tile is
//!   `QB`-wide vectors (a broadcast key value times a row of transposed,
//!   pre-scaled queries), the softmax runs down columns with plain vector
//!   maxima and sums, and the value product broadcasts one probability
//!   against a contiguous value row: no horizontal reductions anywhere.
//!
//! The kernels are portable Rust over fixed-size arrays, compiled per ISA
//! through `#[target_feature]` wrappers (AVX-512, AVX2 + FMA, and NEON,
//! which aarch64 always has); x86 without FMA keeps the GEMM path.
//! Scores and sums follow `attn_order`, the order the per-query kernel
//! (`attn_one`) follows too, so a query's bits do not depend on the
//! number of queries in its step; `attention::sdpa_ref` is the oracle of
//! the arithmetic (property test below), `attn_order::sdpa_ordered_ref` of
//! the order (`attn_one`'s test).

// The kernels index small register tiles by row and column on purpose.
#![allow(clippy::needless_range_loop)]

use std::cell::RefCell;

use super::attention::{visible, Rows, SdpaShape};
use super::attn_order::{block_end, KB, PARTS};
use super::attn_simd::{exp_neg, Vf};
use super::qlinear::SendPtr;
use super::refill;

/// Queries per task (the vector width of the score tile).
const QB: usize = 32;

#[derive(Default)]
struct Scratch {
    /// A key block's keys `[KB][d]` and values `[KB][dv]`, widened to f32.
    kf: Vec<f32>,
    vf: Vec<f32>,
    /// Per head of the group: queries transposed and scaled `[d][QB]`,
    /// the output accumulator `[QB][dv]`, running maximum and sum `[QB]`.
    qt: Vec<f32>,
    o: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    /// One head's scores of a key block, `[KB][QB]`, then probabilities.
    s: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What a task reads and where it writes.
struct Ctx<'a> {
    q: &'a [f32],
    k: Rows<'a>,
    v: Rows<'a>,
    sh: &'a SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: SendPtr,
}

/// Which compiled variant runs here, if any.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Path {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "aarch64")]
    Neon,
}

pub(super) fn path() -> Option<Path> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static P: OnceLock<Option<Path>> = OnceLock::new();
        *P.get_or_init(|| {
            // The forced ISA caps this path too (see `Isa::allows_avx2`).
            use super::qlinear::Isa;
            if !Isa::allows_avx2() {
                None
            } else if Isa::allows_avx512() {
                Some(Path::Avx512)
            } else {
                Some(Path::Avx2)
            }
        })
    }
    #[cfg(target_arch = "aarch64")]
    {
        Some(Path::Neon)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// Every tiled path this CPU can run (the tests run each).
#[cfg(test)]
pub(super) fn paths() -> Vec<Path> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut v = Vec::new();
        if path() == Some(Path::Avx512) {
            v.push(Path::Avx512);
        }
        if path().is_some() {
            v.push(Path::Avx2);
        }
        v
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        path().into_iter().collect()
    }
}

/// `attention::sdpa_into` for many queries; `false` (and `out` untouched)
/// when this CPU has no tiled path.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_tiled_into(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    let Some(p) = path() else {
        return false;
    };
    run_path(p, q, k, v, sh, causal, window, scale, out);
    true
}

/// `sdpa_tiled_into` on path `p` (which the CPU must have).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_path(
    p: Path,
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert_eq!(out.len(), sh.sq * sh.hq * sh.dv);
    let ctx = Ctx {
        q,
        k,
        v,
        sh,
        causal,
        window,
        scale,
        out: SendPtr(out.as_mut_ptr()),
    };
    let nqb = sh.sq.div_ceil(QB);
    let run = |t: usize| {
        // Later query blocks see more keys (causal): hand them out first.
        let (qb, kh) = (nqb - 1 - t / sh.hk, t % sh.hk);
        SCRATCH.with_borrow_mut(|sc| match p {
            // SAFETY: the path's features were detected.
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => unsafe { task_avx512(&ctx, sc, kh, qb) },
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => unsafe { task_avx2(&ctx, sc, kh, qb) },
            #[cfg(target_arch = "aarch64")]
            Path::Neon => task_neon(&ctx, sc, kh, qb),
        });
    };
    let tasks = sh.hk * nqb;
    if sh.sq * sh.hq * sh.sk * sh.d >= 1 << 16 {
        super::pool::for_each(tasks, run);
    } else {
        (0..tasks).for_each(run);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn task_avx512(ctx: &Ctx, sc: &mut Scratch, kh: usize, qb: usize) {
    use std::arch::x86_64::__m512;
    task::<__m512, 2, 6, 4, 4>(ctx, sc, kh, qb)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn task_avx2(ctx: &Ctx, sc: &mut Scratch, kh: usize, qb: usize) {
    use std::arch::x86_64::__m256;
    task::<__m256, 4, 2, 4, 2>(ctx, sc, kh, qb)
}

#[cfg(target_arch = "aarch64")]
fn task_neon(ctx: &Ctx, sc: &mut Scratch, kh: usize, qb: usize) {
    use std::arch::aarch64::float32x4_t;
    // SAFETY: NEON is part of every aarch64 target.
    unsafe { task::<float32x4_t, 8, 2, 4, 4>(ctx, sc, kh, qb) }
}

/// One task: key head `kh`, queries `qb * QB ..`. `QV` vectors make a row
/// of `QB` queries; `JR` keys per score tile; `IR` queries by `CV`
/// vectors of value columns per value tile.
///
/// # Safety
/// The CPU must have `V`'s features.
#[inline(always)]
unsafe fn task<V: Vf, const QV: usize, const JR: usize, const IR: usize, const CV: usize>(
    ctx: &Ctx,
    sc: &mut Scratch,
    kh: usize,
    qb: usize,
) {
    debug_assert_eq!(QV * V::N, QB);
    let sh = ctx.sh;
    let (d, dv, group) = (sh.d, sh.dv, sh.hq / sh.hk);
    let i0 = qb * QB;
    let qn = QB.min(sh.sq - i0);
    // Keys each query sees. Both ends grow with the query (causal edge,
    // window), so each key is seen by a contiguous run of queries.
    let mut lo = [0usize; QB];
    let mut hi = [0usize; QB];
    for ii in 0..qn {
        (lo[ii], hi[ii]) = visible(sh, ctx.causal, ctx.window, i0 + ii);
    }
    let first = lo[..qn].iter().copied().min().unwrap_or(0);
    let last = hi[..qn].iter().copied().max().unwrap_or(0);
    let Scratch {
        kf,
        vf,
        qt,
        o,
        m,
        l,
        s,
    } = sc;
    let qt = refill(qt, group * d * QB, 0.0);
    for g in 0..group {
        let h = kh * group + g;
        for ii in 0..qn {
            let row = &ctx.q[((i0 + ii) * sh.hq + h) * d..][..d];
            for (dd, &x) in row.iter().enumerate() {
                qt[(g * d + dd) * QB + ii] = x * ctx.scale;
            }
        }
    }
    let o = refill(o, group * QB * dv, 0.0);
    let m = refill(m, group * QB, f32::NEG_INFINITY);
    let l = refill(l, group * QB, 0.0);
    let kf = refill(kf, KB * d, 0.0);
    let vf = refill(vf, KB * dv, 0.0);
    let s = refill(s, KB * QB, 0.0);
    // Per key of a block: the queries that see it, `seen[jj] = (a, b)`.
    let mut seen = [(0usize, 0usize); KB];
    let mut j0 = first;
    while j0 < last {
        // Blocks end at multiples of KB whatever the step's first key
        // (`attn_order`).
        let nk = block_end(j0, last) - j0;
        for jj in 0..nk {
            let j = j0 + jj;
            let a = hi[..qn].iter().take_while(|&&h| h <= j).count();
            let b = lo[..qn].iter().take_while(|&&l| l <= j).count();
            seen[jj] = (a, b.max(a));
        }
        // f32 keys and values are read where they lie (rows `hk` heads
        // apart); other storage is widened into the block buffers. Copying
        // f32 rows too cost a third of a 3136-token vision prefill: every
        // query block of a head re-copied all of the head's keys.
        let first_row = j0 * sh.hk + kh;
        let (kb, ks, vb, vs) = match (ctx.k, ctx.v) {
            (Rows::F32(k), Rows::F32(v)) => {
                let kb = &k[first_row * d..][..(nk - 1) * sh.hk * d + d];
                let vb = &v[first_row * dv..][..(nk - 1) * sh.hk * dv + dv];
                (kb, sh.hk * d, vb, sh.hk * dv)
            }
            _ => {
                for jj in 0..nk {
                    let r = first_row + jj * sh.hk;
                    ctx.k.row_into(r, d, &mut kf[jj * d..(jj + 1) * d]);
                    ctx.v.row_into(r, dv, &mut vf[jj * dv..(jj + 1) * dv]);
                }
                (&kf[..nk * d], d, &vf[..nk * dv], dv)
            }
        };
        for g in 0..group {
            let qg = &qt[g * d * QB..(g + 1) * d * QB];
            scores::<V, QV, JR>(kb, ks, d, qg, &mut s[..nk * QB]);
            let (mg, lg) = (&mut m[g * QB..][..QB], &mut l[g * QB..][..QB]);
            let og = &mut o[g * QB * dv..][..QB * dv];
            softmax_block::<V, QV>(&mut s[..nk * QB], &seen[..nk], mg, lg, og, dv);
            values::<V, IR, CV>(&s[..nk * QB], vb, vs, dv, og);
        }
        j0 += nk;
    }
    for g in 0..group {
        let h = kh * group + g;
        for ii in 0..qn {
            let li = l[g * QB + ii];
            let inv = if li > 0.0 { 1.0 / li } else { 0.0 };
            let src = &o[(g * QB + ii) * dv..][..dv];
            // SAFETY: row (i0 + ii, h) belongs to this task alone (tasks
            // split key heads and query blocks) and lies inside `out`.
            let dst =
                std::slice::from_raw_parts_mut(ctx.out.get().add(((i0 + ii) * sh.hq + h) * dv), dv);
            for (d, &x) in dst.iter_mut().zip(src) {
                *d = x * inv;
            }
        }
    }
}

/// `s[j][i] = k[j] . qt[.][i]` for the block's keys (key `j` at `j * ks`
/// in `kf`), `JR` keys at a time, each score the canonical order's eight
/// chains and pairwise sum (`chains`).
#[inline(always)]
unsafe fn scores<V: Vf, const QV: usize, const JR: usize>(
    kf: &[f32],
    ks: usize,
    d: usize,
    qt: &[f32],
    s: &mut [f32],
) {
    let nk = s.len() / QB;
    assert!(nk > 0 && ks >= d && kf.len() >= (nk - 1) * ks + d && qt.len() >= d * QB);
    let (kp, qp, sp) = (kf.as_ptr(), qt.as_ptr(), s.as_mut_ptr());
    let mut j = 0;
    while j + JR <= nk {
        let acc = chains::<V, QV, JR>(kp.add(j * ks), ks, d, qp);
        for r in 0..JR {
            for v in 0..QV {
                acc[r][v].store(sp.add((j + r) * QB + v * V::N));
            }
        }
        j += JR;
    }
    while j < nk {
        let acc = chains::<V, QV, 1>(kp.add(j * ks), ks, d, qp);
        for v in 0..QV {
            acc[0][v].store(sp.add(j * QB + v * V::N));
        }
        j += 1;
    }
}

/// `R` keys' scores against the `QB` queries: chain `l` multiplies and
/// adds dimensions `l, l + 8, ...` (a broadcast key value times a row of
/// `qt`; +0 added past `d`), and the chains are summed
/// `((P0 + P1) + (P2 + P3)) + ((P4 + P5) + (P6 + P7))` (`attn_order`).
/// Functions, not closures: a closure would not inherit the caller's
/// target features, and every vector operation would become a call.
#[inline(always)]
unsafe fn chains<V: Vf, const QV: usize, const R: usize>(
    kp: *const f32,
    ks: usize,
    d: usize,
    qp: *const f32,
) -> [[V; QV]; R] {
    let t01 = add(chain(kp, ks, d, qp, 0), chain(kp, ks, d, qp, 1));
    let t23 = add(chain(kp, ks, d, qp, 2), chain(kp, ks, d, qp, 3));
    let u0: [[V; QV]; R] = add(t01, t23);
    let t45 = add(chain(kp, ks, d, qp, 4), chain(kp, ks, d, qp, 5));
    let t67 = add(chain(kp, ks, d, qp, 6), chain(kp, ks, d, qp, 7));
    add(u0, add(t45, t67))
}

/// Chain `l` of `chains`.
#[inline(always)]
unsafe fn chain<V: Vf, const QV: usize, const R: usize>(
    kp: *const f32,
    ks: usize,
    d: usize,
    qp: *const f32,
    l: usize,
) -> [[V; QV]; R] {
    let mut acc = [[V::zero(); QV]; R];
    let mut dd = l;
    while dd < d {
        let mut q = [V::zero(); QV];
        for v in 0..QV {
            q[v] = V::load(qp.add(dd * QB + v * V::N));
        }
        for r in 0..R {
            let kv = V::splat(*kp.add(r * ks + dd));
            for v in 0..QV {
                acc[r][v] = V::fma(kv, q[v], acc[r][v]);
            }
        }
        dd += PARTS;
    }
    // Past `d`, up to the next multiple of PARTS: +0 (the per-query
    // kernel's zero padding gives `0 * 0 + acc`).
    if dd < d.div_ceil(PARTS) * PARTS {
        for r in 0..R {
            for v in 0..QV {
                acc[r][v] = V::add(acc[r][v], V::zero());
            }
        }
    }
    acc
}

/// `a + b`, tile by tile.
#[inline(always)]
unsafe fn add<V: Vf, const QV: usize, const R: usize>(
    mut a: [[V; QV]; R],
    b: [[V; QV]; R],
) -> [[V; QV]; R] {
    for r in 0..R {
        for v in 0..QV {
            a[r][v] = V::add(a[r][v], b[r][v]);
        }
    }
    a
}

/// The online softmax step of one key block for one head: masks what each
/// query may not see (key `jj` is seen by queries `seen[jj].0 ..
/// seen[jj].1`), raises the running maxima `m`, rescales the running sums
/// `l` and outputs `o` by `e^(m_old - m_new)`, and turns `s` into the
/// block's probabilities `e^(s - m_new)` (exactly 0 where masked).
#[inline(always)]
unsafe fn softmax_block<V: Vf, const QV: usize>(
    s: &mut [f32],
    seen: &[(usize, usize)],
    m: &mut [f32],
    l: &mut [f32],
    o: &mut [f32],
    dv: usize,
) {
    let nk = s.len() / QB;
    assert!(seen.len() == nk && m.len() == QB && l.len() == QB);
    let masked = |row: &mut [f32], (a, b): (usize, usize), x: f32| {
        row[..a].fill(x);
        row[b..].fill(x);
    };
    let mut mx = [V::splat(f32::NEG_INFINITY); QV];
    for jj in 0..nk {
        let (a, b) = seen[jj];
        if a > 0 || b < QB {
            masked(&mut s[jj * QB..(jj + 1) * QB], (a, b), f32::NEG_INFINITY);
        }
        let sp = s.as_ptr().add(jj * QB);
        for v in 0..QV {
            mx[v] = V::max(mx[v], V::load(sp.add(v * V::N)));
        }
    }
    // New maxima, and what to subtract: 0 while a query has seen nothing
    // (its scores are all -inf; -inf - -inf would be NaN).
    let mut new = [0.0f32; QB];
    let mut sub = [0.0f32; QB];
    let mut alpha = [1.0f32; QB];
    for v in 0..QV {
        let mo = V::load(m.as_ptr().add(v * V::N));
        V::max(mo, mx[v]).store(new.as_mut_ptr().add(v * V::N));
    }
    for i in 0..QB {
        sub[i] = if new[i] == f32::NEG_INFINITY {
            0.0
        } else {
            new[i]
        };
    }
    let mut sv = [V::zero(); QV];
    for v in 0..QV {
        sv[v] = V::load(sub.as_ptr().add(v * V::N));
        let mo = V::load(m.as_ptr().add(v * V::N));
        exp_neg(V::sub(mo, sv[v])).store(alpha.as_mut_ptr().add(v * V::N));
    }
    let mut sum = [V::zero(); QV];
    for jj in 0..nk {
        let sp = s.as_mut_ptr().add(jj * QB);
        for v in 0..QV {
            exp_neg(V::sub(V::load(sp.add(v * V::N)), sv[v])).store(sp.add(v * V::N));
        }
        let (a, b) = seen[jj];
        if a > 0 || b < QB {
            masked(&mut s[jj * QB..(jj + 1) * QB], (a, b), 0.0);
        }
        let sp = s.as_ptr().add(jj * QB);
        for v in 0..QV {
            sum[v] = V::add(sum[v], V::load(sp.add(v * V::N)));
        }
    }
    let mut sums = [0.0f32; QB];
    for v in 0..QV {
        sum[v].store(sums.as_mut_ptr().add(v * V::N));
    }
    for i in 0..QB {
        // A query that had seen nothing has l = 0 and o = 0: keep them.
        let a = if m[i] == f32::NEG_INFINITY {
            1.0
        } else {
            alpha[i]
        };
        l[i] = l[i] * a + sums[i];
        if a != 1.0 {
            o[i * dv..(i + 1) * dv].iter_mut().for_each(|x| *x *= a);
        }
        m[i] = new[i];
    }
}

/// `o[i][c] += sum_j p[j][i] * v[j][c]`, in tiles of `IR` queries by `CV`
/// vectors of columns (accumulators in registers across the block's
/// keys), then the columns left over.
#[inline(always)]
unsafe fn values<V: Vf, const IR: usize, const CV: usize>(
    p: &[f32],
    vf: &[f32],
    vs: usize,
    dv: usize,
    o: &mut [f32],
) {
    let nk = p.len() / QB;
    assert!(nk > 0 && vs >= dv && vf.len() >= (nk - 1) * vs + dv);
    assert!(o.len() == QB * dv && QB.is_multiple_of(IR));
    let (pp, vp, op) = (p.as_ptr(), vf.as_ptr(), o.as_mut_ptr());
    let cw = CV * V::N;
    let cw_end = dv / cw * cw;
    for i0 in (0..QB).step_by(IR) {
        let mut c0 = 0;
        while c0 < cw_end {
            let mut acc = [[V::zero(); CV]; IR];
            for r in 0..IR {
                for c in 0..CV {
                    acc[r][c] = V::load(op.add((i0 + r) * dv + c0 + c * V::N));
                }
            }
            for j in 0..nk {
                let mut vr = [V::zero(); CV];
                for c in 0..CV {
                    vr[c] = V::load(vp.add(j * vs + c0 + c * V::N));
                }
                for r in 0..IR {
                    let pv = V::splat(*pp.add(j * QB + i0 + r));
                    for c in 0..CV {
                        acc[r][c] = V::fma(pv, vr[c], acc[r][c]);
                    }
                }
            }
            for r in 0..IR {
                for c in 0..CV {
                    acc[r][c].store(op.add((i0 + r) * dv + c0 + c * V::N));
                }
            }
            c0 += cw;
        }
        if cw_end < dv {
            for r in 0..IR {
                let orow = &mut o[(i0 + r) * dv..(i0 + r + 1) * dv];
                for j in 0..nk {
                    let pv = p[j * QB + i0 + r];
                    let vr = &vf[j * vs..j * vs + dv];
                    for c in cw_end..dv {
                        orow[c] = pv.mul_add(vr[c], orow[c]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::attention::sdpa_ref;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use crate::quant::{self, QuantType};
    use half::f16;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every size (odd heads and dims, more queries than a block, key
        /// blocks cut by the causal edge and the window) and every row
        /// storage, against the reference on the stored values.
        #[test]
        fn tiled_matches_reference(sq in 1usize..100, extra in 0usize..150, hk in 1usize..3, group in 1usize..4,
                                   d in 1usize..70, dv in 1usize..70, causal in any::<bool>(), window in 0usize..90,
                                   store in 0u8..3, seed in any::<u64>()) {
            // None where the CPU (or a forced `MLLM_QLINEAR_ISA=scalar`) has
            // no tiled path: nothing to check, and rejecting every case
            // would fail the test.
            if paths().is_empty() {
                return Ok(());
            }
            let (d, dv) = if store == 2 { (d.div_ceil(32) * 32, dv.div_ceil(32) * 32) } else { (d, dv) };
            let sh = SdpaShape { sq, sk: sq + extra, hq: hk * group, hk, d, dv };
            let q = vec_f32(seed, sh.sq * sh.hq * d);
            let k = vec_f32(seed ^ 1, sh.sk * hk * d);
            let v = vec_f32(seed ^ 2, sh.sk * hk * dv);
            let scale = 1.0 / (d as f32).sqrt();
            let (kh, vh): (Vec<f16>, Vec<f16>) = (k.iter().map(|&x| f16::from_f32(x)).collect(), v.iter().map(|&x| f16::from_f32(x)).collect());
            let (kb, vb) = match store {
                2 => (quant::quantize(QuantType::Q8_0, &k).expect("q"), quant::quantize(QuantType::Q8_0, &v).expect("q")),
                _ => (vec![], vec![]),
            };
            // The rows as stored, and the values the reference sees.
            let (kr, vr, kw, vw) = match store {
                0 => (Rows::F32(&k), Rows::F32(&v), k.clone(), v.clone()),
                1 => (Rows::F16(&kh), Rows::F16(&vh), kh.iter().map(|x| x.to_f32()).collect(), vh.iter().map(|x| x.to_f32()).collect()),
                _ => (Rows::Q8_0(&kb), Rows::Q8_0(&vb), quant::dequantize(QuantType::Q8_0, &kb, k.len()).expect("d"), quant::dequantize(QuantType::Q8_0, &vb, v.len()).expect("d")),
            };
            let want = sdpa_ref(&q, &kw, &vw, &sh, causal, window, scale);
            for p in paths() {
                let mut got = vec![f32::NAN; sh.sq * sh.hq * dv];
                run_path(p, &q, kr, vr, &sh, causal, window, scale, &mut got);
                assert_close(&got, &want, 1e-5)?;
            }
            let mut got = vec![f32::NAN; sh.sq * sh.hq * dv];
            prop_assert!(sdpa_tiled_into(&q, kr, vr, &sh, causal, window, scale, &mut got));
            assert_close(&got, &want, 1e-5)?;
        }
    }
}
