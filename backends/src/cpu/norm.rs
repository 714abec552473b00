//! Row normalisations over the last dimension: RMSNorm and LayerNorm.

use super::simd::dot;

/// Reference RMSNorm: `x / sqrt(mean(x^2) + eps) * w` per row of length `d`.
pub fn rms_norm_ref(x: &[f32], w: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (xr, or) in x.chunks(d).zip(out.chunks_mut(d)) {
        let ms: f32 = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for i in 0..d {
            or[i] = xr[i] * inv * w[i];
        }
    }
    out
}

pub fn rms_norm(x: &[f32], w: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    rms_norm_into(x, w, d, eps, &mut out);
    out
}

/// `rms_norm` writing into `out` (`x`'s length).
pub fn rms_norm_into(x: &[f32], w: &[f32], d: usize, eps: f32, out: &mut [f32]) {
    let row = |(xr, or): (&[f32], &mut [f32])| {
        let inv = 1.0 / (dot(xr, xr) / d as f32 + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * inv * g;
        }
    };
    if x.len() >= 1 << 14 {
        super::pool::for_chunks(out, d, |i, o| row((&x[i * d..][..d], o)));
    } else {
        x.chunks(d).zip(out.chunks_mut(d)).for_each(row);
    }
}

/// Reference LayerNorm with weight and bias (biased variance, as PyTorch).
pub fn layer_norm_ref(x: &[f32], w: &[f32], b: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (xr, or) in x.chunks(d).zip(out.chunks_mut(d)) {
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            or[i] = (xr[i] - mean) * inv * w[i] + b[i];
        }
    }
    out
}

pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    let row = |(xr, or): (&[f32], &mut [f32])| {
        let mean = xr.iter().sum::<f32>() / d as f32;
        // Two passes: a one-pass E[x^2]-E[x]^2 loses precision on offset data.
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            or[i] = (xr[i] - mean) * inv * w[i] + b[i];
        }
    };
    if x.len() >= 1 << 14 {
        super::pool::for_chunks(&mut out, d, |i, o| row((&x[i * d..][..d], o)));
    } else {
        x.chunks(d).zip(out.chunks_mut(d)).for_each(row);
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
        fn rms_norm_matches_reference(rows in 1usize..9, d in 1usize..300, seed in any::<u64>()) {
            let x = vec_f32(seed, rows * d);
            let w = vec_f32(seed ^ 5, d);
            assert_close(&rms_norm(&x, &w, d, 1e-6), &rms_norm_ref(&x, &w, d, 1e-6), 1e-5)?;
        }

        #[test]
        fn layer_norm_matches_reference(rows in 1usize..9, d in 1usize..300, seed in any::<u64>()) {
            let x = vec_f32(seed, rows * d);
            let w = vec_f32(seed ^ 5, d);
            let b = vec_f32(seed ^ 6, d);
            assert_close(&layer_norm(&x, &w, &b, d, 1e-5), &layer_norm_ref(&x, &w, &b, d, 1e-5), 1e-5)?;
        }
    }
}
