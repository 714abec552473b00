//! Softmax, reductions and argmax along one dimension. A tensor is viewed as
//! `[outer, n, inner]` around the reduced dimension.

use crate::op::ReduceOp;

pub fn split_dims(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = shape[..dim].iter().product();
    let inner = shape[dim + 1..].iter().product();
    (outer, shape[dim], inner)
}

/// Reference softmax along the middle axis.
pub fn softmax_ref(x: &[f32], outer: usize, n: usize, inner: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let mx = (0..n).map(|j| x[at(j)]).fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = (0..n).map(|j| (x[at(j)] - mx).exp()).sum();
            for j in 0..n {
                out[at(j)] = (x[at(j)] - mx).exp() / sum;
            }
        }
    }
    out
}

/// Softmax with a contiguous fast path when the axis is the last one.
pub fn softmax(x: &[f32], outer: usize, n: usize, inner: usize) -> Vec<f32> {
    if inner != 1 || n == 0 {
        return softmax_ref(x, outer, n, inner);
    }
    let mut out = vec![0.0; x.len()];
    for (xr, or) in x.chunks(n).zip(out.chunks_mut(n)) {
        let mx = xr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for (o, &v) in or.iter_mut().zip(xr) {
            *o = (v - mx).exp();
            sum += *o;
        }
        let inv = 1.0 / sum;
        or.iter_mut().for_each(|o| *o *= inv);
    }
    out
}

pub fn reduce(op: ReduceOp, x: &[f32], outer: usize, n: usize, inner: usize) -> Vec<f32> {
    let mut out = vec![0.0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let vals = (0..n).map(|j| x[o * n * inner + j * inner + i]);
            out[o * inner + i] = match op {
                ReduceOp::Sum => vals.sum(),
                ReduceOp::Mean => vals.sum::<f32>() / n as f32,
                ReduceOp::Max => vals.fold(f32::NEG_INFINITY, f32::max),
                ReduceOp::Min => vals.fold(f32::INFINITY, f32::min),
            };
        }
    }
    out
}

/// First index of the maximum; NaN never wins.
pub fn argmax(x: &[f32], outer: usize, n: usize, inner: usize) -> Vec<i32> {
    let mut out = vec![0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0;
            let mut bv = f32::NEG_INFINITY;
            for j in 0..n {
                let v = x[o * n * inner + j * inner + i];
                if v > bv {
                    bv = v;
                    best = j;
                }
            }
            out[o * inner + i] = best as i32;
        }
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
        fn softmax_matches_reference(outer in 1usize..5, n in 1usize..70, inner in 1usize..3, seed in any::<u64>()) {
            let x: Vec<f32> = vec_f32(seed, outer * n * inner).iter().map(|v| v * 10.0).collect();
            let r = softmax_ref(&x, outer, n, inner);
            assert_close(&softmax(&x, outer, n, inner), &r, 1e-6)?;
            // Rows sum to one.
            let sums = reduce(ReduceOp::Sum, &r, outer, n, inner);
            prop_assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5));
        }

        #[test]
        fn argmax_picks_a_maximum(n in 1usize..50, seed in any::<u64>()) {
            let x = vec_f32(seed, n);
            let i = argmax(&x, 1, n, 1)[0] as usize;
            prop_assert!(x.iter().all(|&v| v <= x[i]));
            prop_assert!(x[..i].iter().all(|&v| v < x[i]));
        }
    }
}
