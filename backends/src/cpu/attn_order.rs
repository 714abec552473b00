//! The one order in which attention over a cache sums, whatever the number
//! of queries in the step: the tiled kernel (`attn_tiled`, many queries)
//! and the per-query kernel (`attn_one`, decode and short steps) both
//! compute exactly this, so a query's output has the same bits whether its
//! prompt ran as one chunk, as chunks of any size or token by token, and
//! whatever else shared the step (issue #31's chunk and batch invariance).
//! `sdpa_ordered_ref` writes it out in scalar code: it is the twin both
//! kernels are tested against bit for bit.
//!
//! For query `i` and head `h` (keys `lo..hi` visible, `visible`):
//! - the query is scaled once, `qs = q * scale`;
//! - a score is `PARTS` = 8 multiply-add chains, chain `l` over the
//!   dimensions `l, l + 8, ...` (fused, from +0, in that order; dimensions
//!   past `d` up to the next multiple of 8 add +0), summed as
//!   `((P0 + P1) + (P2 + P3)) + ((P4 + P5) + (P6 + P7))`: one query's
//!   dot product is then one 8-lane vector chain plus a pairwise reduction,
//!   and many queries' are 8 column chains of the score tile;
//! - keys are taken in blocks that end at multiples of `KB` (absolute key
//!   indices, so a block does not depend on where a step starts); per
//!   block, the online softmax: `m' = max(m, max s)`, `a = e^(m - m')` (1
//!   while nothing was seen), `p = e^(s - m')` (`exp_neg`), `l = l * a +
//!   (p_0 + p_1 + ...)` in key order, `o = o * a` (skipped when `a` is 1),
//!   then `o = p_j * v_j + o` fused, key by key;
//! - the output is `o * (1 / l)` (0 where nothing is visible).

use super::attention::{visible, SdpaShape};
use super::attn_simd::exp_neg_scalar;

/// Keys per block of the online softmax (block ends are multiples of it).
pub(super) const KB: usize = 64;
/// Multiply-add chains per score.
pub(super) const PARTS: usize = 8;

/// The end of the key block that starts at `j0`, for keys below `hi`.
#[inline(always)]
pub(super) fn block_end(j0: usize, hi: usize) -> usize {
    ((j0 / KB + 1) * KB).min(hi)
}

/// One score in the canonical order: `k` and `qs` hold `d` values.
pub(super) fn score(k: &[f32], qs: &[f32]) -> f32 {
    let d = qs.len();
    let mut p = [0.0f32; PARTS];
    for (l, p) in p.iter_mut().enumerate() {
        for t in 0..d.div_ceil(PARTS) {
            let dd = l + PARTS * t;
            *p = if dd < d {
                k[dd].mul_add(qs[dd], *p)
            } else {
                *p + 0.0
            };
        }
    }
    ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
}

/// The reference: attention in the canonical order, one query and head at
/// a time, over keys and values as f32 (`[sk, hk, d]`, `[sk, hk, dv]`).
pub fn sdpa_ordered_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &SdpaShape,
    causal: bool,
    window: usize,
    scale: f32,
) -> Vec<f32> {
    let (d, dv, group) = (sh.d, sh.dv, sh.hq / sh.hk);
    let mut out = vec![0.0; sh.sq * sh.hq * dv];
    for i in 0..sh.sq {
        for h in 0..sh.hq {
            let kh = h / group;
            let qs: Vec<f32> = q[(i * sh.hq + h) * d..][..d]
                .iter()
                .map(|x| x * scale)
                .collect();
            let (lo, hi) = visible(sh, causal, window, i);
            let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
            let mut o = vec![0.0f32; dv];
            let mut j0 = lo;
            while j0 < hi {
                let j1 = block_end(j0, hi);
                let s: Vec<f32> = (j0..j1)
                    .map(|j| score(&k[(j * sh.hk + kh) * d..][..d], &qs))
                    .collect();
                let mx = s.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let new = m.max(mx);
                let sub = if new == f32::NEG_INFINITY { 0.0 } else { new };
                let a = if m == f32::NEG_INFINITY {
                    1.0
                } else {
                    exp_neg_scalar(m - sub)
                };
                let p: Vec<f32> = s.iter().map(|&x| exp_neg_scalar(x - sub)).collect();
                let sum = p.iter().fold(0.0f32, |acc, &x| acc + x);
                l = l * a + sum;
                if a != 1.0 {
                    o.iter_mut().for_each(|x| *x *= a);
                }
                m = new;
                for (j, &pj) in (j0..j1).zip(&p) {
                    let vj = &v[(j * sh.hk + kh) * dv..][..dv];
                    for (x, &y) in o.iter_mut().zip(vj) {
                        *x = pj.mul_add(y, *x);
                    }
                }
                j0 = j1;
            }
            let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
            for (dst, x) in out[(i * sh.hq + h) * dv..][..dv].iter_mut().zip(&o) {
                *dst = x * inv;
            }
        }
    }
    out
}
