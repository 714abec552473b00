//! Rotary position embedding in the "rotate half" layout used by Llama, Qwen
//! and transformers: for `i < d/2`, `(x[i], x[i + d/2])` is rotated by the
//! angle whose cosine and sine are `cos[s, i]`, `sin[s, i]`.

/// Reference: `x [s, h, d]`, `cos`/`sin` `[s, d/2]`.
pub fn apply_rope_ref(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    s: usize,
    h: usize,
    d: usize,
) -> Vec<f32> {
    let half = d / 2;
    let mut out = x.to_vec();
    for t in 0..s {
        for hh in 0..h {
            let base = (t * h + hh) * d;
            for i in 0..half {
                let (c, sn) = (cos[t * half + i], sin[t * half + i]);
                let (a, b) = (x[base + i], x[base + half + i]);
                out[base + i] = a * c - b * sn;
                out[base + half + i] = b * c + a * sn;
            }
        }
    }
    out
}

pub fn apply_rope(x: &[f32], cos: &[f32], sin: &[f32], s: usize, h: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    apply_rope_into(x, cos, sin, s, h, d, &mut out);
    out
}

/// `apply_rope` writing into `out` (`x`'s length).
pub fn apply_rope_into(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    s: usize,
    h: usize,
    d: usize,
    out: &mut [f32],
) {
    debug_assert_eq!(x.len(), s * h * d);
    let half = d / 2;
    let per_token = |(t, (xo, oo)): (usize, (&[f32], &mut [f32]))| {
        let (c, sn) = (
            &cos[t * half..(t + 1) * half],
            &sin[t * half..(t + 1) * half],
        );
        for (xr, or) in xo.chunks(d).zip(oo.chunks_mut(d)) {
            let (a, b) = xr.split_at(half);
            let (oa, ob) = or.split_at_mut(half);
            for i in 0..half {
                oa[i] = a[i] * c[i] - b[i] * sn[i];
                ob[i] = b[i] * c[i] + a[i] * sn[i];
            }
        }
    };
    if x.len() >= 1 << 15 {
        let w = h * d;
        super::pool::for_chunks(out, w, |t, o| per_token((t, (&x[t * w..][..w], o))));
    } else {
        x.chunks(h * d)
            .zip(out.chunks_mut(h * d))
            .enumerate()
            .for_each(per_token);
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
        fn rope_matches_reference(s in 1usize..9, h in 1usize..5, half in 1usize..40, seed in any::<u64>()) {
            let d = 2 * half;
            let x = vec_f32(seed, s * h * d);
            let ang = vec_f32(seed ^ 7, s * half);
            let cos: Vec<f32> = ang.iter().map(|a| a.cos()).collect();
            let sin: Vec<f32> = ang.iter().map(|a| a.sin()).collect();
            assert_close(&apply_rope(&x, &cos, &sin, s, h, d), &apply_rope_ref(&x, &cos, &sin, s, h, d), 1e-6)?;
        }
    }
}
