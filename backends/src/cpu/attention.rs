//! Scaled dot-product attention over `[seq, heads, dim]` tensors with
//! grouped-query heads, an optional causal mask aligned to the end (the
//! queries are the last `sq` of `sk` positions, as in cached decoding) and
//! an optional sliding window (`window` > 0: a query sees only the last
//! `window` keys up to its own position, as Gemma's and Mistral's sliding
//! layers do).

use super::refill;
use super::simd::{axpy, dot};
use crate::dtype::DType;
use crate::error::{dtype_err, Result};
use crate::quant::{self, QuantType};
use crate::tensor::Tensor;
use half::f16;

/// Keys or values as stored: f32, or an f16 / q8_0 KV cache, read one row
/// (one head of one position) at a time.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// q8_0 blocks; a row is `width / 32` blocks.
    Q8_0(&'a [u8]),
}

impl<'a> Rows<'a> {
    pub fn of(t: &'a Tensor) -> Result<Rows<'a>> {
        Ok(match t.dtype() {
            DType::F32 => Rows::F32(t.f32s()?),
            DType::F16 => match t.floats()? {
                crate::tensor::FloatSlice::F16(s) => Rows::F16(s),
                _ => return dtype_err("sdpa", "f16 keys expected"),
            },
            DType::Quant(QuantType::Q8_0) => Rows::Q8_0(t.quant_bytes()?.0),
            other => return dtype_err("sdpa", format!("keys and values cannot be {other}")),
        })
    }

    /// The rows from row `r` on (rows of `width` values).
    pub fn from_row(&self, r: usize, width: usize) -> Rows<'a> {
        match self {
            Rows::F32(s) => Rows::F32(&s[r * width..]),
            Rows::F16(s) => Rows::F16(&s[r * width..]),
            Rows::Q8_0(b) => Rows::Q8_0(&b[r * (width / 32 * 34)..]),
        }
    }

    /// Row `r` of `width` values, widened into `scratch` unless stored as f32.
    #[inline]
    pub fn row<'s>(&'s self, r: usize, width: usize, scratch: &'s mut [f32]) -> &'s [f32] {
        match self {
            Rows::F32(s) => &s[r * width..][..width],
            Rows::F16(s) => {
                super::attn_simd::widen_f16(&s[r * width..][..width], &mut scratch[..width]);
                &scratch[..width]
            }
            Rows::Q8_0(b) => {
                let rb = width / 32 * 34;
                // Rows are whole blocks (checked by the cache and Op::infer).
                let _ = quant::dequantize_into(
                    QuantType::Q8_0,
                    &b[r * rb..][..rb],
                    &mut scratch[..width],
                );
                &scratch[..width]
            }
        }
    }
    /// Row `r` of `width` values written into `dst` (`width` long),
    /// widened unless stored as f32.
    #[inline]
    pub fn row_into(&self, r: usize, width: usize, dst: &mut [f32]) {
        match self {
            Rows::F32(s) => dst.copy_from_slice(&s[r * width..][..width]),
            Rows::F16(s) => super::attn_simd::widen_f16(&s[r * width..][..width], dst),
            Rows::Q8_0(b) => {
                let rb = width / 32 * 34;
                let _ = quant::dequantize_into(QuantType::Q8_0, &b[r * rb..][..rb], dst);
            }
        }
    }
}

pub struct SdpaShape {
    pub sq: usize,
    pub sk: usize,
    pub hq: usize,
    pub hk: usize,
    pub d: usize,
    pub dv: usize,
}

impl SdpaShape {
    /// The sizes of `q [sq, hq, d]`, `k [sk, hk, d]`, `v [sk, hk, dv]`
    /// (checked by `Op::infer`).
    pub fn of(q: &Tensor, k: &Tensor, v: &Tensor) -> SdpaShape {
        SdpaShape {
            sq: q.shape()[0],
            hq: q.shape()[1],
            d: q.shape()[2],
            sk: k.shape()[0],
            hk: k.shape()[1],
            dv: v.shape()[2],
        }
    }
}

/// Keys `lo..hi` query `i` may see: causally those up to its position,
/// of which the last `window` when `window` > 0.
pub(super) fn visible(sh: &SdpaShape, causal: bool, window: usize, i: usize) -> (usize, usize) {
    let hi = if causal {
        (sh.sk + i + 1).saturating_sub(sh.sq).min(sh.sk)
    } else {
        sh.sk
    };
    let lo = if window > 0 {
        hi.saturating_sub(window)
    } else {
        0
    };
    (lo, hi)
}

/// Reference: materialises every score row, then softmax, then the sum.
pub fn sdpa_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
) -> Vec<f32> {
    let group = sh.hq / sh.hk;
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    for h in 0..sh.hq {
        let kh = h / group;
        for i in 0..sh.sq {
            let (lo, n) = visible(sh, causal, window, i);
            let qi = &q[(i * sh.hq + h) * sh.d..][..sh.d];
            let mut scores: Vec<f32> = (lo..n)
                .map(|j| {
                    let kj = &k[(j * sh.hk + kh) * sh.d..][..sh.d];
                    qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale
                })
                .collect();
            let mx = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - mx).exp();
                sum += *s;
            }
            let o = &mut out[(i * sh.hq + h) * sh.dv..][..sh.dv];
            for (j, s) in (lo..n).zip(scores.iter()) {
                for c in 0..sh.dv {
                    o[c] += s / sum * v[(j * sh.hk + kh) * sh.dv + c];
                }
            }
        }
    }
    out
}

/// Queries from which attention runs tiled (`attn_tiled`, or matrix
/// products per head where the CPU has no tiled path); below it (decode,
/// verification of proposed tokens, short chunks) one task per query
/// (`attn_one`), which reads each cached key once per query anyway. Both
/// kernels sum in `attn_order`'s order, so the choice is speed only.
const GEMM_MIN_QUERIES: usize = super::ROW_INVARIANT_STEP + 1;
/// Queries per block of `sdpa_gemm`: bounds the score matrix to
/// `QUERY_BLOCK x sk` floats.
const QUERY_BLOCK: usize = 256;

/// Fast path: for many queries (prefill, vision towers) the tiled online
/// softmax of `attn_tiled` (or matrix products per head where the CPU has
/// no tiled path), else one task per (query, key head) in the same order
/// (`attn_one`; the generic `sdpa_rows` where the CPU has neither).
pub fn sdpa(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    sdpa_into(q, k, v, sh, causal, window, scale, &mut out);
    out
}

/// `sdpa` writing into `out` (`sq * hq * dv` values).
#[allow(clippy::too_many_arguments)]
pub fn sdpa_into(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) {
    if sh.sq >= GEMM_MIN_QUERIES {
        if !super::attn_tiled::sdpa_tiled_into(q, k, v, sh, causal, window, scale, out) {
            sdpa_gemm_into(q, k, v, sh, causal, window, scale, out);
        }
    } else if !super::attn_one::sdpa_one_into(q, k, v, sh, causal, window, scale, out) {
        sdpa_rows_into(q, k, v, sh, causal, window, scale, out);
    }
}

/// Per head and block of queries: `S = Q K^T` and `O = softmax(S) V` with
/// the f32 GEMM of `linear` (register-tiled, parallel), instead of one dot
/// of `d` values per (query, key). Heads are gathered into contiguous
/// copies first (`O(s d)` work against `O(sq sk d)`).
pub fn sdpa_gemm(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    sdpa_gemm_into(q, k, v, sh, causal, window, scale, &mut out);
    out
}

/// Buffers of one attention call, kept per thread from call to call (a
/// step allocates none once they have grown).
#[derive(Default)]
struct Scratch {
    /// `sdpa_gemm`: one key head's keys, its values transposed, one query
    /// head's queries, a block's scores and outputs.
    kk: Vec<f32>,
    vt: Vec<f32>,
    qh: Vec<f32>,
    s: Vec<f32>,
    o: Vec<f32>,
    /// `sdpa_rows`: a group's scores, maxima, exponentials, inverse sums.
    scores: Vec<f32>,
    mx: Vec<f32>,
    exps: Vec<f32>,
    inv: Vec<f32>,
    /// One widened row of an f16 / q8_0 cache.
    wide: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

#[allow(clippy::too_many_arguments)]
fn sdpa_gemm_into(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) {
    SCRATCH.with_borrow_mut(|sc| sdpa_gemm_with(sc, q, k, v, sh, causal, window, scale, out));
}

#[allow(clippy::too_many_arguments)]
fn sdpa_gemm_with(
    sc: &mut Scratch,
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) {
    use super::linear::linear_into;
    use crate::tensor::FloatSlice;
    let group = sh.hq / sh.hk;
    let Scratch {
        kk,
        vt,
        qh,
        s,
        o,
        wide,
        ..
    } = sc;
    let gather = |o: &mut Vec<f32>, wide: &mut Vec<f32>, src: Rows, rows, heads, h, w| {
        let o = refill(o, rows * w, 0.0);
        let wide = refill(wide, w, 0.0);
        for r in 0..rows {
            o[r * w..][..w].copy_from_slice(src.row(r * heads + h, w, wide));
        }
    };
    for kh in 0..sh.hk {
        gather(kk, wide, k, sh.sk, sh.hk, kh, sh.d);
        // V^T [dv, sk]: `linear` multiplies by the transpose of its weight.
        let vt = refill(vt, sh.dv * sh.sk, 0.0);
        let w = refill(wide, sh.dv, 0.0);
        for j in 0..sh.sk {
            let row = v.row(j * sh.hk + kh, sh.dv, w);
            for (c, &x) in row.iter().enumerate() {
                vt[c * sh.sk + j] = x;
            }
        }
        for h in kh * group..(kh + 1) * group {
            gather(qh, wide, Rows::F32(q), sh.sq, sh.hq, h, sh.d);
            for i0 in (0..sh.sq).step_by(QUERY_BLOCK) {
                let m = QUERY_BLOCK.min(sh.sq - i0);
                let s = refill(s, m * sh.sk, 0.0);
                linear_into(
                    &qh[i0 * sh.d..(i0 + m) * sh.d],
                    m,
                    sh.d,
                    FloatSlice::F32(kk),
                    sh.sk,
                    None,
                    s,
                );
                crate::cpu::pool::for_chunks(s, sh.sk, |r, row| {
                    let (lo, n) = visible(sh, causal, window, i0 + r);
                    let (before, row) = row.split_at_mut(lo);
                    before.fill(0.0);
                    let (seen, masked) = row.split_at_mut(n - lo);
                    masked.fill(0.0);
                    if n == lo {
                        return;
                    }
                    let mx = seen
                        .iter()
                        .fold(f32::NEG_INFINITY, |a, &x| a.max(x * scale));
                    // e^(x * scale - max), vectorised through a stack block
                    // where the CPU allows (as the decode path does).
                    let mut sum = 0.0;
                    let mut block = [0.0f32; 64];
                    for xs in seen.chunks_mut(64) {
                        let t = &mut block[..xs.len()];
                        for (t, x) in t.iter_mut().zip(xs.iter()) {
                            *t = *x * scale - mx;
                        }
                        if !super::vmath::unary_fast(crate::op::UnaryOp::Exp, t, xs) {
                            xs.iter_mut().zip(t.iter()).for_each(|(x, t)| *x = t.exp());
                        }
                        sum += xs.iter().sum::<f32>();
                    }
                    let inv = 1.0 / sum;
                    seen.iter_mut().for_each(|x| *x *= inv);
                });
                let o = refill(o, m * sh.dv, 0.0);
                linear_into(s, m, sh.sk, FloatSlice::F32(vt), sh.dv, None, o);
                for r in 0..m {
                    out[((i0 + r) * sh.hq + h) * sh.dv..][..sh.dv]
                        .copy_from_slice(&o[r * sh.dv..(r + 1) * sh.dv]);
                }
            }
        }
    }
}

/// One task per (query, key head) covering the key head's whole group of
/// query heads, so each cached key and value row is read (and, for an f16 /
/// q8_0 cache, widened) once per group rather than once per query head.
/// Per head the arithmetic is the per-head loop's, in the same order.
pub fn sdpa_rows(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    sdpa_rows_into(q, k, v, sh, causal, window, scale, &mut out);
    out
}

#[allow(clippy::too_many_arguments)]
fn sdpa_rows_into(
    q: &[f32],
    k: Rows,
    v: Rows,
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
    out: &mut [f32],
) {
    // Rows of fully masked queries stay zero.
    out.fill(0.0);
    let group = sh.hq / sh.hk;
    // `o`: the group's outputs, `group * dv` values (its heads are adjacent).
    let task = |(idx, o): (usize, &mut [f32])| {
        let (i, kh) = (idx / sh.hk, idx % sh.hk);
        let (lo, hi) = visible(sh, causal, window, i);
        if hi == lo {
            return;
        }
        // The window's keys and values, as if they were all there were.
        let (k, v, n) = (
            k.from_row(lo * sh.hk, sh.d),
            v.from_row(lo * sh.hk, sh.dv),
            hi - lo,
        );
        SCRATCH.with_borrow_mut(|sc| {
            let qrow = |g: usize| &q[(i * sh.hq + kh * group + g) * sh.d..][..sh.d];
            // scores[g * n + j] for head g of the group.
            let scores = refill(&mut sc.scores, group * n, 0.0);
            let mx = refill(&mut sc.mx, group, f32::NEG_INFINITY);
            // Widened rows of an f16 / q8_0 cache (unused for f32).
            let wide = match k {
                Rows::F32(_) => refill(&mut sc.wide, 0, 0.0),
                _ => refill(&mut sc.wide, sh.d.max(sh.dv), 0.0),
            };
            for j in 0..n {
                let kj = k.row(j * sh.hk + kh, sh.d, wide);
                for g in 0..group {
                    let s = dot(qrow(g), kj) * scale;
                    mx[g] = mx[g].max(s);
                    scores[g * n + j] = s;
                }
            }
            // e^(s - max) per head, vectorised where the CPU allows.
            let exps = refill(&mut sc.exps, group * n, 0.0);
            let inv = refill(&mut sc.inv, group, 0.0);
            for g in 0..group {
                let (sg, eg) = (
                    &mut scores[g * n..(g + 1) * n],
                    &mut exps[g * n..(g + 1) * n],
                );
                sg.iter_mut().for_each(|s| *s -= mx[g]);
                if !super::vmath::unary_fast(crate::op::UnaryOp::Exp, sg, eg) {
                    eg.iter_mut().zip(sg.iter()).for_each(|(e, s)| *e = s.exp());
                }
                inv[g] = 1.0 / eg.iter().sum::<f32>();
            }
            for j in 0..n {
                let vj = v.row(j * sh.hk + kh, sh.dv, wide);
                for (g, og) in o.chunks_mut(sh.dv).enumerate() {
                    axpy(og, exps[g * n + j] * inv[g], vj);
                }
            }
        });
    };
    let span = group * sh.dv;
    if sh.sq * sh.hq * sh.sk * sh.d >= 1 << 14 {
        let dst = crate::cpu::qlinear::SendPtr(out.as_mut_ptr());
        crate::cpu::pool::for_each(sh.sq * sh.hk, |idx| {
            // Each (query, key head) task owns its group's `group * dv` values.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(idx * span), span) };
            task((idx, o));
        });
    } else {
        out.chunks_mut(span).enumerate().for_each(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn sdpa_matches_reference(sq in 1usize..7, extra in 0usize..9, hk in 1usize..4, group in 1usize..4,
                                  d in 1usize..40, dv in 1usize..20, causal in any::<bool>(), window in 0usize..8, seed in any::<u64>()) {
            let sh = SdpaShape { sq, sk: sq + extra, hq: hk * group, hk, d, dv };
            let q = vec_f32(seed, sh.sq * sh.hq * d);
            let k = vec_f32(seed ^ 1, sh.sk * hk * d);
            let v = vec_f32(seed ^ 2, sh.sk * hk * dv);
            let scale = 1.0 / (d as f32).sqrt();
            assert_close(&sdpa(&q, Rows::F32(&k), Rows::F32(&v), &sh, causal, window, scale), &sdpa_ref(&q, &k, &v, &sh, causal, window, scale), 1e-5)?;
        }

        /// The GEMM path on its own, at every size (odd ones, more queries
        /// than a block, fully masked rows when causal with sq > sk cannot
        /// happen: sk >= sq).
        #[test]
        fn sdpa_gemm_matches_reference(sq in 1usize..300, extra in 0usize..40, hk in 1usize..3, group in 1usize..3,
                                       d in 1usize..40, dv in 1usize..20, causal in any::<bool>(), window in 0usize..8, seed in any::<u64>()) {
            let sh = SdpaShape { sq, sk: sq + extra, hq: hk * group, hk, d, dv };
            let q = vec_f32(seed, sh.sq * sh.hq * d);
            let k = vec_f32(seed ^ 1, sh.sk * hk * d);
            let v = vec_f32(seed ^ 2, sh.sk * hk * dv);
            let scale = 1.0 / (d as f32).sqrt();
            assert_close(&sdpa_gemm(&q, Rows::F32(&k), Rows::F32(&v), &sh, causal, window, scale), &sdpa_ref(&q, &k, &v, &sh, causal, window, scale), 1e-5)?;
        }

        /// Keys and values stored as f16 or q8_0 (a KV cache): both paths
        /// equal the reference on the widened values.
        #[test]
        fn sdpa_reads_f16_and_q8_0_rows(sq in 1usize..40, extra in 0usize..20, hk in 1usize..3, group in 1usize..3,
                                        blocks in 1usize..3, causal in any::<bool>(), window in 0usize..8, q8 in any::<bool>(), seed in any::<u64>()) {
            let (d, dv) = (32 * blocks, 32);
            let sh = SdpaShape { sq, sk: sq + extra, hq: hk * group, hk, d, dv };
            let q = vec_f32(seed, sh.sq * sh.hq * d);
            let k = vec_f32(seed ^ 1, sh.sk * hk * d);
            let v = vec_f32(seed ^ 2, sh.sk * hk * dv);
            let scale = 1.0 / (d as f32).sqrt();
            let got = if q8 {
                let (kb, vb) = (quant::quantize(QuantType::Q8_0, &k).expect("q"), quant::quantize(QuantType::Q8_0, &v).expect("q"));
                let (kw, vw) = (quant::dequantize(QuantType::Q8_0, &kb, k.len()).expect("d"), quant::dequantize(QuantType::Q8_0, &vb, v.len()).expect("d"));
                let want = sdpa_ref(&q, &kw, &vw, &sh, causal, window, scale);
                (sdpa(&q, Rows::Q8_0(&kb), Rows::Q8_0(&vb), &sh, causal, window, scale), want)
            } else {
                let (kh, vh): (Vec<f16>, Vec<f16>) = (k.iter().map(|&x| f16::from_f32(x)).collect(), v.iter().map(|&x| f16::from_f32(x)).collect());
                let (kw, vw): (Vec<f32>, Vec<f32>) = (kh.iter().map(|x| x.to_f32()).collect(), vh.iter().map(|x| x.to_f32()).collect());
                let want = sdpa_ref(&q, &kw, &vw, &sh, causal, window, scale);
                (sdpa(&q, Rows::F16(&kh), Rows::F16(&vh), &sh, causal, window, scale), want)
            };
            assert_close(&got.0, &got.1, 1e-5)?;
        }
    }
}
