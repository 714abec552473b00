//! Attention for a few queries (decode, the verification of proposed
//! tokens, short steps): one task per (query, key head) covering the key
//! head's group of query heads, in exactly the order of `attn_order`, the
//! order the tiled kernel (`attn_tiled`) sums many queries in. So a
//! query's output does not depend on how many queries its step had.
//!
//! A score is one 8-lane multiply-add chain over the query's dimensions
//! (lane `l` is the order's chain `l`) reduced pairwise (`Part8::tree`),
//! up to four heads by up to four keys at a time, so each key row is
//! loaded once for the heads and several chains are in flight. f32 and
//! (on x86) f16 caches are read where they lie, prefetched ahead (a decode
//! step finds them cold); q8_0 rows, and rows of dimensions that are not
//! whole 8-value vectors, are widened block by block (zero-padded). The
//! value sum keeps up to eight vectors of output columns in registers
//! across a block's keys, so each value row is read once.

// The kernels index small register arrays on purpose.
#![allow(clippy::needless_range_loop)]

use std::cell::RefCell;

use super::attention::{visible, Rows, SdpaShape};
use super::attn_order::{block_end, KB, PARTS};
use super::attn_simd::{exp_neg, Vf};
use super::attn_tiled::{path, Path};
use super::qlinear::SendPtr;
use super::refill;

/// Eight f32 lanes: the eight chains of one score.
pub(super) trait Part8: Copy {
    unsafe fn zero() -> Self;
    /// Eight values from `p`.
    unsafe fn load(p: *const f32) -> Self;
    /// `a * b + c`, rounded once.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// `((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))`.
    unsafe fn tree(self) -> f32;
}

#[derive(Default)]
struct Scratch {
    /// The group's queries, scaled, each zero-padded to `dp` values.
    qs: Vec<f32>,
    /// A key block `[KB][dp]` (zero-padded) and its values `[KB][dv]`.
    kf: Vec<f32>,
    vf: Vec<f32>,
    /// Per head: a block's scores `[KB]`, then its probabilities.
    s: Vec<f32>,
    /// Per head: running maximum and sum.
    m: Vec<f32>,
    l: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What every task reads.
struct Ctx<'a> {
    q: &'a [f32],
    k: Rows<'a>,
    v: Rows<'a>,
    sh: &'a SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
}

/// `attention::sdpa_into` one query at a time in the tiled kernel's order;
/// `false` (and `out` untouched) when this CPU has no such path.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_one_into(
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

/// `sdpa_one_into` on path `p` (which the CPU must have).
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
    let span = sh.hq / sh.hk * sh.dv;
    let ctx = Ctx {
        q,
        k,
        v,
        sh,
        causal,
        window,
        scale,
    };
    let dst = SendPtr(out.as_mut_ptr());
    let run = |idx: usize| {
        // SAFETY: task `idx` = (query i, key head kh) owns the outputs of
        // query i's heads kh * group .. (kh + 1) * group, which are
        // adjacent: `idx * span ..` of `out`.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(idx * span), span) };
        let (i, kh) = (idx / sh.hk, idx % sh.hk);
        SCRATCH.with_borrow_mut(|sc| match p {
            // SAFETY: the path's features were detected.
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => unsafe { task_avx512(&ctx, sc, i, kh, o) },
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => unsafe { task_avx2(&ctx, sc, i, kh, o) },
            #[cfg(target_arch = "aarch64")]
            Path::Neon => task_neon(&ctx, sc, i, kh, o),
        });
    };
    let tasks = sh.sq * sh.hk;
    if sh.sq * sh.hq * sh.sk * sh.d >= 1 << 14 {
        super::pool::for_each(tasks, run);
    } else {
        (0..tasks).for_each(run);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn task_avx512(ctx: &Ctx, sc: &mut Scratch, i: usize, kh: usize, o: &mut [f32]) {
    use std::arch::x86_64::{__m256, __m512};
    match (ctx.k, ctx.v) {
        (Rows::F16(k), Rows::F16(v)) if in_place(ctx.sh) => {
            task::<__m512, __m256, half::f16>(ctx, sc, i, kh, o, Some((k, v)))
        }
        (Rows::F32(k), Rows::F32(v)) if in_place(ctx.sh) => {
            task::<__m512, __m256, f32>(ctx, sc, i, kh, o, Some((k, v)))
        }
        _ => task::<__m512, __m256, f32>(ctx, sc, i, kh, o, None),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn task_avx2(ctx: &Ctx, sc: &mut Scratch, i: usize, kh: usize, o: &mut [f32]) {
    use std::arch::x86_64::__m256;
    match (ctx.k, ctx.v) {
        (Rows::F16(k), Rows::F16(v)) if in_place(ctx.sh) => {
            task::<__m256, __m256, half::f16>(ctx, sc, i, kh, o, Some((k, v)))
        }
        (Rows::F32(k), Rows::F32(v)) if in_place(ctx.sh) => {
            task::<__m256, __m256, f32>(ctx, sc, i, kh, o, Some((k, v)))
        }
        _ => task::<__m256, __m256, f32>(ctx, sc, i, kh, o, None),
    }
}

#[cfg(target_arch = "aarch64")]
fn task_neon(ctx: &Ctx, sc: &mut Scratch, i: usize, kh: usize, o: &mut [f32]) {
    use std::arch::aarch64::float32x4_t;
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        match (ctx.k, ctx.v) {
            (Rows::F32(k), Rows::F32(v)) if in_place(ctx.sh) => {
                task::<float32x4_t, neon::Pair, f32>(ctx, sc, i, kh, o, Some((k, v)))
            }
            _ => task::<float32x4_t, neon::Pair, f32>(ctx, sc, i, kh, o, None),
        }
    }
}

/// Whether keys and values can be read where they lie: whole 8-value
/// vectors per key row (else rows are widened and zero-padded).
fn in_place(sh: &SdpaShape) -> bool {
    sh.d.is_multiple_of(PARTS)
}

/// A stored value the scores read, eight at a time into `P`.
pub(super) trait Elem<P>: Copy {
    unsafe fn load8(p: *const Self) -> P;
}

/// A stored value the value sum reads: a vector's worth into `V`, or one.
pub(super) trait ElemV<V>: Copy {
    unsafe fn load_v(p: *const Self) -> V;
    fn wide(self) -> f32;
}

impl<P: Part8> Elem<P> for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> P {
        P::load(p)
    }
}

impl<V: Vf> ElemV<V> for f32 {
    #[inline(always)]
    unsafe fn load_v(p: *const f32) -> V {
        V::load(p)
    }
    #[inline(always)]
    fn wide(self) -> f32 {
        self
    }
}

/// Prefetches the `bytes` at `p` into L1 (`L1`) or L2 (a no-op off x86).
#[inline(always)]
unsafe fn prefetch<const L1: bool>(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let mut b = 0;
        while b < bytes {
            if L1 {
                _mm_prefetch::<_MM_HINT_T0>(p.add(b) as *const i8);
            } else {
                _mm_prefetch::<_MM_HINT_T1>(p.add(b) as *const i8);
            }
            b += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// Query `i`'s heads of key head `kh` into `o` (`group * dv` values),
/// reading the key and value rows in place (`rows`: all of them as `T`)
/// or, with `None`, widened block by block into the scratch buffers.
///
/// # Safety
/// The CPU must have `V`'s and `P`'s features; with `rows`, `d` is a
/// multiple of 8.
#[inline(always)]
unsafe fn task<V: Vf, P: Part8, T: Elem<P> + ElemV<V>>(
    ctx: &Ctx,
    sc: &mut Scratch,
    i: usize,
    kh: usize,
    o: &mut [f32],
    rows: Option<(&[T], &[T])>,
) {
    let sh = ctx.sh;
    let (d, dv, group, hk) = (sh.d, sh.dv, sh.hq / sh.hk, sh.hk);
    let dp = d.div_ceil(PARTS) * PARTS;
    o.fill(0.0);
    let (lo, hi) = visible(sh, ctx.causal, ctx.window, i);
    if hi == lo {
        return;
    }
    let Scratch {
        qs,
        kf,
        vf,
        s,
        m,
        l,
    } = sc;
    let qs = refill(qs, group * dp, 0.0);
    for g in 0..group {
        let row = &ctx.q[(i * sh.hq + kh * group + g) * d..][..d];
        for (x, &y) in qs[g * dp..][..d].iter_mut().zip(row) {
            *x = y * ctx.scale;
        }
    }
    // Padding columns stay zero: rows are written up to `d` only.
    let (kf, vf) = match rows {
        Some(_) => (refill(kf, 0, 0.0), refill(vf, 0, 0.0)),
        None => (refill(kf, KB * dp, 0.0), refill(vf, KB * dv, 0.0)),
    };
    let s = refill(s, group * KB, 0.0);
    let m = refill(m, group, f32::NEG_INFINITY);
    let l = refill(l, group, 0.0);
    let mut j0 = lo;
    while j0 < hi {
        let nk = block_end(j0, hi) - j0;
        if let Some((k, v)) = rows {
            let r0 = j0 * hk + kh;
            let (kb, vb) = (k.as_ptr().add(r0 * d), v.as_ptr().add(r0 * dv));
            let ahead = Ahead {
                rows: hi - j0,
                kbytes: d * std::mem::size_of::<T>(),
                vbytes: dv * std::mem::size_of::<T>(),
            };
            block::<V, P, T>(
                &qs[..],
                dp,
                group,
                kb,
                hk * d,
                vb,
                hk * dv,
                dv,
                nk,
                s,
                m,
                l,
                o,
                Some(ahead),
            );
        } else {
            for jj in 0..nk {
                let r = (j0 + jj) * hk + kh;
                ctx.k.row_into(r, d, &mut kf[jj * dp..jj * dp + d]);
                ctx.v.row_into(r, dv, &mut vf[jj * dv..(jj + 1) * dv]);
            }
            let (kb, vb) = (kf.as_ptr(), vf.as_ptr());
            block::<V, P, f32>(&qs[..], dp, group, kb, dp, vb, dv, dv, nk, s, m, l, o, None);
        }
        j0 += nk;
    }
    for g in 0..group {
        let inv = if l[g] > 0.0 { 1.0 / l[g] } else { 0.0 };
        o[g * dv..(g + 1) * dv].iter_mut().for_each(|x| *x *= inv);
    }
}

/// One key block for every head of the group: `nk` key rows from `kb`
/// (`ks` apart, `dp` values each) and value rows from `vb` (`vs` apart).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn block<V: Vf, P: Part8, T: Elem<P> + ElemV<V>>(
    qs: &[f32],
    dp: usize,
    group: usize,
    kb: *const T,
    ks: usize,
    vb: *const T,
    vs: usize,
    dv: usize,
    nk: usize,
    s: &mut [f32],
    m: &mut [f32],
    l: &mut [f32],
    o: &mut [f32],
    ahead: Option<Ahead>,
) {
    assert!(qs.len() >= group * dp && s.len() >= group * KB && nk <= KB);
    // Up to four heads per pass over the keys, so each key row is loaded
    // once for them (rows `hk` apart alias in L1: a second pass would
    // find them in L2).
    let mut g0 = 0;
    while g0 < group {
        let h = (group - g0).min(4);
        // The first pass over the keys prefetches.
        let pf = if g0 == 0 { ahead } else { None };
        let pf = pf.map(|a| (a, vb, vs));
        let (q, sp) = (qs.as_ptr().add(g0 * dp), s.as_mut_ptr().add(g0 * KB));
        match h {
            1 => scores::<P, T, 1, 4>(kb, ks, dp, q, sp, nk, pf),
            2 => scores::<P, T, 2, 4>(kb, ks, dp, q, sp, nk, pf),
            3 => scores::<P, T, 3, 2>(kb, ks, dp, q, sp, nk, pf),
            _ => scores::<P, T, 4, 2>(kb, ks, dp, q, sp, nk, pf),
        }
        g0 += h;
    }
    for g in 0..group {
        let sg = &mut s[g * KB..(g + 1) * KB];
        let og = &mut o[g * dv..(g + 1) * dv];
        softmax_block::<V>(sg, nk, &mut m[g], &mut l[g], og);
        values::<V, T>(&sg[..nk], vb, vs, og);
    }
}

/// Rows to prefetch while reading a cache in place: a decode step finds
/// the cache cold (the weights streamed through the caches since the last
/// step), and a head's rows lie `hk` rows apart, a stride the hardware
/// prefetchers pick up late.
#[derive(Clone, Copy)]
struct Ahead {
    /// Rows from the block's first that exist.
    rows: usize,
    kbytes: usize,
    vbytes: usize,
}

/// Key rows ahead of the one being read that `scores` prefetches.
const AHEAD: usize = 8;

/// `s[h * KB + j] = k_j . qs_h` for `H` heads (queries `dp` apart from
/// `qp`) and keys `j < nk` (key `j` at `kb + j * ks`, `dp` values), `R`
/// keys at a time; with `pf`, prefetching key rows `AHEAD` rows on and the
/// value rows (at `vb`, `vs` apart) of the keys being read.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scores<P: Part8, T: Elem<P>, const H: usize, const R: usize>(
    kb: *const T,
    ks: usize,
    dp: usize,
    qp: *const f32,
    sp: *mut f32,
    nk: usize,
    pf: Option<(Ahead, *const T, usize)>,
) {
    debug_assert!(dp.is_multiple_of(PARTS));
    let mut j = 0;
    while j < nk {
        let r_n = R.min(nk - j);
        if let Some((a, vb, vs)) = pf {
            for r in j..j + r_n {
                if r + AHEAD < a.rows {
                    prefetch::<true>(kb.add((r + AHEAD) * ks) as *const u8, a.kbytes);
                }
                // Read after the block's scores: to L2, leaving L1 to the
                // keys (a block of f32 values alone would fill most of it).
                prefetch::<false>(vb.add(r * vs) as *const u8, a.vbytes);
            }
        }
        if r_n == R {
            let mut acc = [[P::zero(); R]; H];
            for c in (0..dp).step_by(PARTS) {
                let mut k = [P::zero(); R];
                for r in 0..R {
                    k[r] = T::load8(kb.add((j + r) * ks + c));
                }
                for h in 0..H {
                    let q = P::load(qp.add(h * dp + c));
                    for r in 0..R {
                        acc[h][r] = P::fma(k[r], q, acc[h][r]);
                    }
                }
            }
            for h in 0..H {
                for r in 0..R {
                    *sp.add(h * KB + j + r) = acc[h][r].tree();
                }
            }
        } else {
            for r in j..j + r_n {
                let mut acc = [P::zero(); H];
                for c in (0..dp).step_by(PARTS) {
                    let k = T::load8(kb.add(r * ks + c));
                    for h in 0..H {
                        acc[h] = P::fma(k, P::load(qp.add(h * dp + c)), acc[h]);
                    }
                }
                for h in 0..H {
                    *sp.add(h * KB + r) = acc[h].tree();
                }
            }
        }
        j += r_n;
    }
}

/// One block's online softmax step for one head: `s[..nk]` becomes the
/// probabilities, `m`, `l` and `o` move on (`attn_order`).
#[inline(always)]
unsafe fn softmax_block<V: Vf>(s: &mut [f32], nk: usize, m: &mut f32, l: &mut f32, o: &mut [f32]) {
    assert!(s.len() >= nk.div_ceil(V::N) * V::N);
    let mx = s[..nk].iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    let new = m.max(mx);
    let sub = V::splat(if new == f32::NEG_INFINITY { 0.0 } else { new });
    // Whole vectors: the lanes past `nk` are computed and never read.
    let sp = s.as_mut_ptr();
    for c in (0..nk).step_by(V::N) {
        exp_neg(V::sub(V::load(sp.add(c)), sub)).store(sp.add(c));
    }
    let a = if *m == f32::NEG_INFINITY {
        1.0
    } else {
        let mut lane = [0.0f32; 16];
        exp_neg(V::sub(V::splat(*m), sub)).store(lane.as_mut_ptr());
        lane[0]
    };
    let sum = s[..nk].iter().fold(0.0f32, |acc, &x| acc + x);
    *l = *l * a + sum;
    if a != 1.0 {
        o.iter_mut().for_each(|x| *x *= a);
    }
    *m = new;
}

/// Columns of the output one pass over a block's value rows keeps in
/// registers: all of a 128-value head with AVX-512, so each (strided)
/// value row is read once.
const VREGS: usize = 8;

/// `o[c] = p_j * v_j[c] + o[c]`, key after key (value row `j` at `vb + j *
/// vs`), up to `VREGS` vectors of columns held in registers across the
/// keys.
#[inline(always)]
unsafe fn values<V: Vf, T: ElemV<V>>(p: &[f32], vb: *const T, vs: usize, o: &mut [f32]) {
    let (nk, dv) = (p.len(), o.len());
    let op = o.as_mut_ptr();
    let mut c0 = 0;
    while c0 + V::N <= dv {
        // Each arm's count of column vectors is a constant, so its
        // accumulators stay in registers: with a count known only at run
        // time (a 64-value head is 4 AVX-512 vectors, not VREGS) they
        // lived on the stack, and each key's multiply-add waited on a
        // store and a reload. A column's sum is the same chain in any arm.
        let n = match (dv - c0) / V::N {
            n if n >= VREGS => columns::<V, T, VREGS>(p, vb, vs, op, c0),
            n if n >= 4 => columns::<V, T, 4>(p, vb, vs, op, c0),
            n if n >= 2 => columns::<V, T, 2>(p, vb, vs, op, c0),
            _ => columns::<V, T, 1>(p, vb, vs, op, c0),
        };
        c0 += n * V::N;
    }
    for c in c0..dv {
        let mut x = o[c];
        for j in 0..nk {
            x = p[j].mul_add(ElemV::<V>::wide(*vb.add(j * vs + c)), x);
        }
        o[c] = x;
    }
}

/// `N` vectors of output columns from `c0` through every key of the block
/// (`o[c] = p_j * v_j[c] + o[c]`, key after key); returns `N`.
#[inline(always)]
unsafe fn columns<V: Vf, T: ElemV<V>, const N: usize>(
    p: &[f32],
    vb: *const T,
    vs: usize,
    op: *mut f32,
    c0: usize,
) -> usize {
    let mut acc = [V::zero(); N];
    for c in 0..N {
        acc[c] = V::load(op.add(c0 + c * V::N));
    }
    for (j, &pj) in p.iter().enumerate() {
        let pv = V::splat(pj);
        let row = vb.add(j * vs + c0);
        for c in 0..N {
            acc[c] = V::fma(pv, T::load_v(row.add(c * V::N)), acc[c]);
        }
    }
    for c in 0..N {
        acc[c].store(op.add(c0 + c * V::N));
    }
    N
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Part8;
    use std::arch::x86_64::*;

    impl super::Elem<__m256> for half::f16 {
        #[inline(always)]
        unsafe fn load8(p: *const half::f16) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        }
    }

    impl super::ElemV<__m256> for half::f16 {
        #[inline(always)]
        unsafe fn load_v(p: *const half::f16) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        }
        #[inline(always)]
        fn wide(self) -> f32 {
            self.to_f32()
        }
    }

    impl super::ElemV<__m512> for half::f16 {
        #[inline(always)]
        unsafe fn load_v(p: *const half::f16) -> __m512 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        }
        #[inline(always)]
        fn wide(self) -> f32 {
            self.to_f32()
        }
    }

    impl Part8 for __m256 {
        #[inline(always)]
        unsafe fn zero() -> Self {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn tree(self) -> f32 {
            // [x0+x1, x2+x3, x4+x5, x6+x7], then its pairs, then their sum.
            let h = _mm_hadd_ps(
                _mm256_castps256_ps128(self),
                _mm256_extractf128_ps::<1>(self),
            );
            let h = _mm_hadd_ps(h, h);
            _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::Part8;
    use std::arch::aarch64::*;

    /// Lanes 0-3 and 4-7.
    #[derive(Clone, Copy)]
    pub(super) struct Pair(float32x4_t, float32x4_t);

    impl Part8 for Pair {
        #[inline(always)]
        unsafe fn zero() -> Self {
            Pair(vdupq_n_f32(0.0), vdupq_n_f32(0.0))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            Pair(vld1q_f32(p), vld1q_f32(p.add(4)))
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            Pair(vfmaq_f32(c.0, a.0, b.0), vfmaq_f32(c.1, a.1, b.1))
        }
        #[inline(always)]
        unsafe fn tree(self) -> f32 {
            // [x0+x1, x2+x3, x4+x5, x6+x7], then its pairs, then their sum.
            let h = vpaddq_f32(self.0, self.1);
            let h = vpaddq_f32(h, h);
            vgetq_lane_f32::<0>(h) + vgetq_lane_f32::<1>(h)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::attn_order::sdpa_ordered_ref;
    use crate::cpu::attn_tiled::paths;
    use crate::cpu::testutil::vec_f32;
    use crate::quant::{self, QuantType};
    use half::f16;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Both kernels, on every path this CPU has, give the canonical
        /// order's bits for every query count (odd heads and dims, key
        /// blocks cut by the causal edge and the window, every storage).
        #[test]
        fn both_kernels_sum_in_the_canonical_order(sq in 1usize..80, extra in 0usize..150, hk in 1usize..3,
                                                   group in 1usize..4, d in 1usize..70, dv in 1usize..70,
                                                   causal in any::<bool>(), window in 0usize..90,
                                                   store in 0u8..3, seed in any::<u64>()) {
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
            let (kr, vr, kw, vw) = match store {
                0 => (Rows::F32(&k), Rows::F32(&v), k.clone(), v.clone()),
                1 => (Rows::F16(&kh), Rows::F16(&vh), kh.iter().map(|x| x.to_f32()).collect(), vh.iter().map(|x| x.to_f32()).collect()),
                _ => (Rows::Q8_0(&kb), Rows::Q8_0(&vb), quant::dequantize(QuantType::Q8_0, &kb, k.len()).expect("d"), quant::dequantize(QuantType::Q8_0, &vb, v.len()).expect("d")),
            };
            let want = sdpa_ordered_ref(&q, &kw, &vw, &sh, causal, window, scale);
            for p in paths() {
                for (name, tiled) in [("per query", false), ("tiled", true)] {
                    let mut got = vec![f32::NAN; sh.sq * sh.hq * dv];
                    if tiled {
                        crate::cpu::attn_tiled::run_path(p, &q, kr, vr, &sh, causal, window, scale, &mut got);
                    } else {
                        run_path(p, &q, kr, vr, &sh, causal, window, scale, &mut got);
                    }
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        prop_assert!(a.to_bits() == b.to_bits(), "{name}: value {j}: {a} vs the canonical order's {b}");
                    }
                }
            }
        }
    }
}
