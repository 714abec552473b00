//! SIMD paths of `delta_rule` (AVX-512, AVX2 + FMA, NEON), generic over
//! `attn_simd::Vf` and compiled once per ISA by `#[target_feature]` entry
//! points. `delta_rule::recurrent_ref` is their reference twin.
//!
//! Decode (a few tokens) is the recurrence, fused into two passes over
//! the `[dk, dv]` state per token: `k^T S` first, then the decayed rank-1
//! update written straight into the output state while `q^T S` of the new
//! state accumulates in registers. The scalar form made four passes and
//! two copies of the state; at 16 heads of 128 x 128 per layer the state
//! (1 MiB a layer) is what a decode step of these layers streams.
//!
//! Prefill is the chunked form with its products as register-tiled GEMMs
//! (`gemm`): `K S`, `Q S`, `K K^T`, `Q K^T`, the blocked forward
//! substitution and the state update `K_w^T vn`; the scalar twin spent
//! ~70% of a Qwen3.5-0.8B prefill in them.

use super::attn_simd::{exp_neg, Vf};
use super::delta_rule::{Dims, Inputs};

/// An instruction set with a fast path here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// Every path this CPU can run (the tests compare each with the twin).
pub fn paths() -> Vec<Path> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use super::qlinear::Isa;
        if Isa::allows_avx512() {
            v.push(Path::Avx512);
        }
        if Isa::allows_avx2() {
            v.push(Path::Avx2);
        }
    }
    #[cfg(target_arch = "aarch64")]
    v.push(Path::Neon);
    v
}

/// The widest path this CPU runs (the forced ISA of `qlinear::Isa` caps
/// it, as it caps the attention kernels); `MLLM_DELTA=scalar` runs the
/// scalar twins instead, to time one against the other in one binary.
pub fn best() -> Option<Path> {
    use std::sync::OnceLock;
    static P: OnceLock<Option<Path>> = OnceLock::new();
    *P.get_or_init(|| {
        let scalar = std::env::var("MLLM_DELTA").is_ok_and(|v| v.trim() == "scalar");
        paths().first().copied().filter(|_| !scalar)
    })
}

/// Per-thread scratch of the chunked form, grown once and reused.
#[derive(Default)]
pub(super) struct Scratch {
    cum: Vec<f32>,
    ecum: Vec<f32>,
    e: Vec<f32>,
    /// `K^T [dk, l]`, for the `K K^T` and `Q K^T` products.
    kt: Vec<f32>,
    /// `-exp(cum_j) k_j` rows `[l, dk]`.
    kn: Vec<f32>,
    /// `exp(cum_j) q_j` rows `[l, dk]`.
    qs: Vec<f32>,
    /// `exp(last - cum_j) k_j`, transposed `[dk, l]`.
    kw: Vec<f32>,
    kk: Vec<f32>,
    qk: Vec<f32>,
    vn: Vec<f32>,
    ks: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) -> *mut f32 {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    v.as_mut_ptr()
}

/// Value head `h` of the call, written into the packed result at `out`
/// (outputs rows `hv * dv` apart, then the head's final state).
///
/// # Safety
/// The CPU must have `p`'s features; `out` holds `d.packed_len()` values,
/// and no other thread writes head `h`'s ranges.
pub(super) unsafe fn head(
    p: Path,
    d: Dims,
    x: &Inputs,
    h: usize,
    chunk: usize,
    out: *mut f32,
    sc: &mut Scratch,
) {
    // Strong decays make subnormal products here (see `denormals`).
    let _ftz = super::denormals::FlushToZero::new();
    match p {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => head_avx512(d, x, h, chunk, out, sc),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => head_avx2(d, x, h, chunk, out, sc),
        #[cfg(target_arch = "aarch64")]
        Path::Neon => head_v::<std::arch::aarch64::float32x4_t, 4, 4, 8>(d, x, h, chunk, out, sc),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn head_avx512(
    d: Dims,
    x: &Inputs,
    h: usize,
    chunk: usize,
    out: *mut f32,
    sc: &mut Scratch,
) {
    // 4 rows by 4 vectors: 16 of the 32 registers accumulate; decode
    // blocks of 8 vectors (8 accumulators, 8 delta values).
    head_v::<std::arch::x86_64::__m512, 4, 4, 8>(d, x, h, chunk, out, sc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn head_avx2(d: Dims, x: &Inputs, h: usize, chunk: usize, out: *mut f32, sc: &mut Scratch) {
    // 4 rows by 2 vectors: 8 of the 16 registers accumulate; decode
    // blocks of 4 vectors.
    head_v::<std::arch::x86_64::__m256, 4, 2, 4>(d, x, h, chunk, out, sc)
}

#[inline(always)]
unsafe fn head_v<V: Vf, const MR: usize, const NV: usize, const CW: usize>(
    d: Dims,
    x: &Inputs,
    h: usize,
    chunk: usize,
    out: *mut f32,
    sc: &mut Scratch,
) {
    let st = out.add(d.t * d.hv * d.dv + h * d.dk * d.dv);
    let s0 = x.state.as_ptr().add(h * d.dk * d.dv);
    if d.t == 0 {
        std::ptr::copy_nonoverlapping(s0, st, d.dk * d.dv);
    } else if d.t < super::delta_rule::CHUNKED_FROM {
        recurrent::<V, CW>(d, x, h, s0, st, out, sc);
    } else {
        std::ptr::copy_nonoverlapping(s0, st, d.dk * d.dv);
        chunked::<V, MR, NV>(d, x, h, chunk.max(1), st, out, sc);
    }
}

/// Token by token; the first step reads the input state `s0`, every step
/// writes `st`. Column blocks of `CW` vectors: a whole 128-wide row at 16
/// lanes, so each pass streams the state row by row with `CW` independent
/// accumulators (4 left the FMA latency exposed and read each row in two
/// halves).
#[inline(always)]
unsafe fn recurrent<V: Vf, const CW: usize>(
    d: Dims,
    x: &Inputs,
    h: usize,
    s0: *const f32,
    st: *mut f32,
    out: *mut f32,
    sc: &mut Scratch,
) {
    let (dk, dv) = (d.dk, d.dv);
    let ks = grow(&mut sc.ks, dv);
    let mut src = s0;
    for i in 0..d.t {
        let k = x.k[d.qk(i, h)].as_ptr();
        let q = x.q[d.qk(i, h)].as_ptr();
        let v = &x.v[d.vrow(i, h)];
        let decay = x.g[i * d.hv + h].exp();
        let beta = x.beta[i * d.hv + h];
        let o = out.add(i * d.hv * dv + h * dv);
        // ks = k^T S (undecayed), then delta = beta (v - decay k^T S).
        let mut c = 0;
        while c + CW * V::N <= dv {
            kts::<V, CW>(dk, dv, k, src, c, ks);
            c += CW * V::N;
        }
        while c + V::N <= dv {
            kts::<V, 1>(dk, dv, k, src, c, ks);
            c += V::N;
        }
        for c in c..dv {
            *ks.add(c) = (0..dk).map(|i| *k.add(i) * *src.add(i * dv + c)).sum();
        }
        for (c, &vc) in v.iter().enumerate() {
            *ks.add(c) = beta * (vc - decay * *ks.add(c));
        }
        let mut c = 0;
        while c + CW * V::N <= dv {
            update::<V, CW>(dk, dv, [k, q], decay, ks, src, st, c, o);
            c += CW * V::N;
        }
        while c + V::N <= dv {
            update::<V, 1>(dk, dv, [k, q], decay, ks, src, st, c, o);
            c += V::N;
        }
        for c in c..dv {
            let mut acc = 0.0;
            for i in 0..dk {
                let s = decay * *src.add(i * dv + c) + *k.add(i) * *ks.add(c);
                *st.add(i * dv + c) = s;
                acc += *q.add(i) * s;
            }
            *o.add(c) = acc;
        }
        src = st;
    }
}

/// `ks[c..c + W N] = sum_i k_i S[i, c..]`.
#[inline(always)]
unsafe fn kts<V: Vf, const W: usize>(
    dk: usize,
    dv: usize,
    k: *const f32,
    s: *const f32,
    c: usize,
    ks: *mut f32,
) {
    let mut acc = [V::zero(); W];
    for i in 0..dk {
        let a = V::splat(*k.add(i));
        let row = s.add(i * dv + c);
        for (w, e) in acc.iter_mut().enumerate() {
            *e = V::fma(a, V::load(row.add(w * V::N)), *e);
        }
    }
    for (w, e) in acc.iter().enumerate() {
        e.store(ks.add(c + w * V::N));
    }
}

/// Columns `c..c + W N` of `st = decay src + k ⊗ delta` and of `o = q^T
/// st` (`src` may be `st`: each element is read before it is written).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn update<V: Vf, const W: usize>(
    dk: usize,
    dv: usize,
    [k, q]: [*const f32; 2],
    decay: f32,
    delta: *const f32,
    src: *const f32,
    st: *mut f32,
    c: usize,
    o: *mut f32,
) {
    let dec = V::splat(decay);
    let mut dl = [V::zero(); W];
    for (w, e) in dl.iter_mut().enumerate() {
        *e = V::load(delta.add(c + w * V::N));
    }
    let mut acc = [V::zero(); W];
    for i in 0..dk {
        let (a, b) = (V::splat(*k.add(i)), V::splat(*q.add(i)));
        let at = i * dv + c;
        for w in 0..W {
            let p = at + w * V::N;
            let s = V::fma(a, dl[w], V::mul(dec, V::load(src.add(p))));
            s.store(st.add(p));
            acc[w] = V::fma(b, s, acc[w]);
        }
    }
    for (w, e) in acc.iter().enumerate() {
        e.store(o.add(c + w * V::N));
    }
}

/// `C[m, n] (+)= A[m, k] B[k, n]`, all row-major with leading dimensions
/// `lda`, `ldb`, `ldc`; `acc` false overwrites `C`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gemm<V: Vf, const MR: usize, const NV: usize>(
    [m, n, k]: [usize; 3],
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut j = 0;
    while j + NV * V::N <= n {
        rows::<V, MR, NV>([m, k], a, lda, b.add(j), ldb, c.add(j), ldc, acc);
        j += NV * V::N;
    }
    while j + V::N <= n {
        rows::<V, MR, 1>([m, k], a, lda, b.add(j), ldb, c.add(j), ldc, acc);
        j += V::N;
    }
    for i in 0..m {
        for jj in j..n {
            let mut s = if acc { *c.add(i * ldc + jj) } else { 0.0 };
            for p in 0..k {
                s += *a.add(i * lda + p) * *b.add(p * ldb + jj);
            }
            *c.add(i * ldc + jj) = s;
        }
    }
}

/// `W` vectors of columns of `C`, all `m` rows: `MR` at a time, then one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn rows<V: Vf, const MR: usize, const W: usize>(
    [m, k]: [usize; 2],
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut i = 0;
    while i + MR <= m {
        tile::<V, MR, W>(k, a.add(i * lda), lda, b, ldb, c.add(i * ldc), ldc, acc);
        i += MR;
    }
    for i in i..m {
        tile::<V, 1, W>(k, a.add(i * lda), lda, b, ldb, c.add(i * ldc), ldc, acc);
    }
}

/// `R` rows by `W` vectors of `C`, accumulated in registers over `k`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tile<V: Vf, const R: usize, const W: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let mut s = [[V::zero(); W]; R];
    if acc {
        for (r, row) in s.iter_mut().enumerate() {
            for (w, e) in row.iter_mut().enumerate() {
                *e = V::load(c.add(r * ldc + w * V::N));
            }
        }
    }
    for p in 0..k {
        let mut bv = [V::zero(); W];
        for (w, e) in bv.iter_mut().enumerate() {
            *e = V::load(b.add(p * ldb + w * V::N));
        }
        for (r, row) in s.iter_mut().enumerate() {
            let av = V::splat(*a.add(r * lda + p));
            for (e, bw) in row.iter_mut().zip(bv) {
                *e = V::fma(av, bw, *e);
            }
        }
    }
    for (r, row) in s.iter().enumerate() {
        for (w, e) in row.iter().enumerate() {
            e.store(c.add(r * ldc + w * V::N));
        }
    }
}

/// `e[j] = exp(cum[i] - cum[j])` for `j <= i`.
#[inline(always)]
unsafe fn decay_row<V: Vf>(cum: &[f32], i: usize, e: *mut f32) {
    let ci = V::splat(cum[i]);
    let mut j = 0;
    while j + V::N <= i + 1 {
        exp_neg(V::sub(ci, V::load(cum.as_ptr().add(j)))).store(e.add(j));
        j += V::N;
    }
    for j in j..=i {
        *e.add(j) = (cum[i] - cum[j]).exp();
    }
}

/// The chunked form (see `delta_rule::head_chunked`, its scalar twin, for
/// the algebra) on the state `st`, which holds the initial state.
#[inline(always)]
unsafe fn chunked<V: Vf, const MR: usize, const NV: usize>(
    d: Dims,
    x: &Inputs,
    h: usize,
    chunk: usize,
    st: *mut f32,
    out: *mut f32,
    sc: &mut Scratch,
) {
    let (dk, dv) = (d.dk, d.dv);
    let (ldqk, ldv) = (d.hk * dk, d.hv * dv);
    let c = chunk;
    let kt = grow(&mut sc.kt, dk * c);
    let kn = grow(&mut sc.kn, c * dk);
    let qs = grow(&mut sc.qs, c * dk);
    let kw = grow(&mut sc.kw, dk * c);
    let kk = grow(&mut sc.kk, c * c);
    let qk = grow(&mut sc.qk, c * c);
    let vn = grow(&mut sc.vn, c * dv);
    let e = grow(&mut sc.e, c);
    let mut start = 0;
    while start < d.t {
        let l = c.min(d.t - start);
        let k0 = x.k[d.qk(start, h)].as_ptr();
        let q0 = x.q[d.qk(start, h)].as_ptr();
        sc.cum.clear();
        let mut run = 0.0f32;
        for j in 0..l {
            run += x.g[(start + j) * d.hv + h];
            sc.cum.push(run);
        }
        sc.ecum.clear();
        sc.ecum.extend(sc.cum.iter().map(|a| a.exp()));
        let last = sc.cum[l - 1];
        for j in 0..l {
            let (kj, qj) = (k0.add(j * ldqk), q0.add(j * ldqk));
            let (ec, w) = (sc.ecum[j], (last - sc.cum[j]).exp());
            for i in 0..dk {
                let a = *kj.add(i);
                *kt.add(i * l + j) = a;
                *kw.add(i * l + j) = a * w;
                *kn.add(j * dk + i) = -ec * a;
                *qs.add(j * dk + i) = ec * *qj.add(i);
            }
        }
        gemm::<V, MR, NV>([l, l, dk], k0, ldqk, kt, l, kk, l, false);
        gemm::<V, MR, NV>([l, l, dk], q0, ldqk, kt, l, qk, l, false);
        // kk: -(k_i.k_j) exp(cum_i - cum_j) below the diagonal; qk:
        // (q_i.k_j) exp(cum_i - cum_j) on and below it; zeros elsewhere.
        for i in 0..l {
            decay_row::<V>(&sc.cum, i, e);
            let (rk, rq) = (kk.add(i * l), qk.add(i * l));
            for j in 0..l {
                let ej = if j <= i { *e.add(j) } else { 0.0 };
                *rq.add(j) *= ej;
                *rk.add(j) *= if j < i { -ej } else { 0.0 };
            }
        }
        // vn = v - exp(cum) K S, then the forward substitution by blocks
        // of MR rows: the rows before a block in one product, the block's
        // own lower triangle row by row.
        for j in 0..l {
            let v = &x.v[d.vrow(start + j, h)];
            std::ptr::copy_nonoverlapping(v.as_ptr(), vn.add(j * dv), dv);
        }
        gemm::<V, MR, NV>([l, dv, dk], kn, dk, st, dv, vn, dv, true);
        let mut i0 = 0;
        while i0 < l {
            let r = MR.min(l - i0);
            let blk = vn.add(i0 * dv);
            gemm::<V, MR, NV>([r, dv, i0], kk.add(i0 * l), l, vn, dv, blk, dv, true);
            for i in i0..i0 + r {
                let row = vn.add(i * dv);
                for j in i0..i {
                    axpy::<V>(dv, *kk.add(i * l + j), vn.add(j * dv), row);
                }
                scale::<V>(dv, x.beta[(start + i) * d.hv + h], row);
            }
            i0 += r;
        }
        // o = exp(cum) Q S + (masked Q K^T) vn, into the output rows.
        let o = out.add(start * ldv + h * dv);
        gemm::<V, MR, NV>([l, dv, dk], qs, dk, st, dv, o, ldv, false);
        gemm::<V, MR, NV>([l, dv, l], qk, l, vn, dv, o, ldv, true);
        // S = exp(last) S + K_w^T vn.
        scale::<V>(dk * dv, sc.ecum[l - 1], st);
        gemm::<V, MR, NV>([dk, dv, l], kw, l, vn, dv, st, dv, true);
        start += l;
    }
}

/// `y += a x` over `n` values.
#[inline(always)]
unsafe fn axpy<V: Vf>(n: usize, a: f32, x: *const f32, y: *mut f32) {
    let av = V::splat(a);
    let mut i = 0;
    while i + V::N <= n {
        V::fma(av, V::load(x.add(i)), V::load(y.add(i))).store(y.add(i));
        i += V::N;
    }
    for i in i..n {
        *y.add(i) += a * *x.add(i);
    }
}

/// `y *= a` over `n` values.
#[inline(always)]
unsafe fn scale<V: Vf>(n: usize, a: f32, y: *mut f32) {
    let av = V::splat(a);
    let mut i = 0;
    while i + V::N <= n {
        V::mul(av, V::load(y.add(i))).store(y.add(i));
        i += V::N;
    }
    for i in i..n {
        *y.add(i) *= a;
    }
}
