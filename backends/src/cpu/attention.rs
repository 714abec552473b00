//! Scaled dot-product attention over `[seq, heads, dim]` tensors with
//! grouped-query heads and an optional causal mask aligned to the end (the
//! queries are the last `sq` of `sk` positions, as in cached decoding).

use rayon::prelude::*;

use super::simd::{axpy, dot};

pub struct SdpaShape {
    pub sq: usize,
    pub sk: usize,
    pub hq: usize,
    pub hk: usize,
    pub d: usize,
    pub dv: usize,
}

/// Number of keys query `i` may see.
fn visible(sh: &SdpaShape, causal: bool, i: usize) -> usize {
    if causal {
        (sh.sk + i + 1).saturating_sub(sh.sq).min(sh.sk)
    } else {
        sh.sk
    }
}

/// Reference: materialises every score row, then softmax, then the sum.
pub fn sdpa_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    sh: &SdpaShape,
    causal: bool,
    scale: f32,
) -> Vec<f32> {
    let group = sh.hq / sh.hk;
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    for h in 0..sh.hq {
        let kh = h / group;
        for i in 0..sh.sq {
            let n = visible(sh, causal, i);
            let qi = &q[(i * sh.hq + h) * sh.d..][..sh.d];
            let mut scores: Vec<f32> = (0..n)
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
            for (j, s) in scores.iter().enumerate() {
                for c in 0..sh.dv {
                    o[c] += s / sum * v[(j * sh.hk + kh) * sh.dv + c];
                }
            }
        }
    }
    out
}

/// Fast path: one task per (query, head), SIMD dots, scores kept in a
/// per-task buffer.
pub fn sdpa(q: &[f32], k: &[f32], v: &[f32], sh: &SdpaShape, causal: bool, scale: f32) -> Vec<f32> {
    let group = sh.hq / sh.hk;
    let mut out = vec![0.0; sh.sq * sh.hq * sh.dv];
    let task = |(idx, o): (usize, &mut [f32])| {
        let (i, h) = (idx / sh.hq, idx % sh.hq);
        let kh = h / group;
        let n = visible(sh, causal, i);
        if n == 0 {
            return;
        }
        let qi = &q[(i * sh.hq + h) * sh.d..][..sh.d];
        let mut scores = Vec::with_capacity(n);
        let mut mx = f32::NEG_INFINITY;
        for j in 0..n {
            let s = dot(qi, &k[(j * sh.hk + kh) * sh.d..][..sh.d]) * scale;
            mx = mx.max(s);
            scores.push(s);
        }
        let mut sum = 0.0;
        for s in scores.iter_mut() {
            *s = (*s - mx).exp();
            sum += *s;
        }
        let inv = 1.0 / sum;
        for (j, s) in scores.iter().enumerate() {
            axpy(o, s * inv, &v[(j * sh.hk + kh) * sh.dv..][..sh.dv]);
        }
    };
    if sh.sq * sh.hq * sh.sk * sh.d >= 1 << 14 {
        out.par_chunks_mut(sh.dv).enumerate().for_each(task);
    } else {
        out.chunks_mut(sh.dv).enumerate().for_each(task);
    }
    out
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
                                  d in 1usize..40, dv in 1usize..20, causal in any::<bool>(), seed in any::<u64>()) {
            let sh = SdpaShape { sq, sk: sq + extra, hq: hk * group, hk, d, dv };
            let q = vec_f32(seed, sh.sq * sh.hq * d);
            let k = vec_f32(seed ^ 1, sh.sk * hk * d);
            let v = vec_f32(seed ^ 2, sh.sk * hk * dv);
            let scale = 1.0 / (d as f32).sqrt();
            assert_close(&sdpa(&q, &k, &v, &sh, causal, scale), &sdpa_ref(&q, &k, &v, &sh, causal, scale), 1e-5)?;
        }
    }
}
