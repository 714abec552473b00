//! `Op::Gather` (torch.gather / take_along_dim): values of `x` picked along
//! one dimension by an index tensor of `x`'s rank. Both tensors are seen as
//! `[outer, n, inner]` around that dimension (`idx` with its own `n`);
//! every index is checked against `x` before any is read.

use crate::error::{invalid, Result};

/// The shapes of one gather: `[outer, n_x, inner]` of `x`, `n_idx` of the
/// indexes along the same dimension.
#[derive(Clone, Copy, Debug)]
pub struct GatherDims {
    pub outer: usize,
    pub n_x: usize,
    pub n_idx: usize,
    pub inner: usize,
}

impl GatherDims {
    pub fn of(x_shape: &[usize], idx_shape: &[usize], dim: usize) -> GatherDims {
        GatherDims {
            outer: x_shape[..dim].iter().product(),
            n_x: x_shape[dim],
            n_idx: idx_shape[dim],
            inner: x_shape[dim + 1..].iter().product(),
        }
    }
}

/// An error naming the first index outside `0..n`.
pub fn check_indexes(idx: &[i32], n: usize) -> Result<()> {
    match idx.iter().position(|&i| i < 0 || i as usize >= n) {
        Some(at) => invalid(
            "gather",
            format!(
                "index {} (at flat position {at}) is outside a dimension of size {n}",
                idx[at]
            ),
        ),
        None => Ok(()),
    }
}

/// `out[o, j, i] = x[o, idx[o, j, i], i]`, any element type. The indexes
/// must have passed `check_indexes`.
pub fn gather<T: Copy + Default>(x: &[T], idx: &[i32], d: GatherDims) -> Vec<T> {
    let mut out = vec![T::default(); idx.len()];
    let plane = d.n_idx * d.inner;
    for o in 0..d.outer {
        let xo = &x[o * d.n_x * d.inner..(o + 1) * d.n_x * d.inner];
        let (io, oo) = (
            &idx[o * plane..(o + 1) * plane],
            &mut out[o * plane..(o + 1) * plane],
        );
        // Rows of `inner` values: one index row picks across a row of x's.
        for (irow, orow) in io
            .chunks_exact(d.inner.max(1))
            .zip(oo.chunks_exact_mut(d.inner.max(1)))
        {
            for (i, (&j, o)) in irow.iter().zip(orow.iter_mut()).enumerate() {
                *o = xo[j as usize * d.inner + i];
            }
        }
    }
    out
}

/// Reference: the definition, one output element at a time.
pub fn gather_ref<T: Copy>(x: &[T], idx: &[i32], d: GatherDims) -> Vec<T> {
    let mut out = Vec::with_capacity(idx.len());
    for o in 0..d.outer {
        for j in 0..d.n_idx {
            for i in 0..d.inner {
                let src = idx[(o * d.n_idx + j) * d.inner + i] as usize;
                out.push(x[(o * d.n_x + src) * d.inner + i]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::vec_f32;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn gather_matches_reference(
            shape in prop::collection::vec(1usize..6, 1..5),
            dim_f in 0.0f64..1.0,
            n_idx in 0usize..9,
            seed in any::<u64>(),
        ) {
            let dim = ((shape.len() as f64) * dim_f) as usize;
            let x = vec_f32(seed, shape.iter().product());
            let mut is = shape.clone();
            is[dim] = n_idx;
            let count: usize = is.iter().product();
            let n = shape[dim];
            let idx: Vec<i32> = vec_f32(seed ^ 5, count)
                .iter()
                .map(|v| (((v + 2.0) / 4.0) * n as f32) as i32 % n as i32)
                .collect();
            prop_assert!(check_indexes(&idx, n).is_ok());
            let d = GatherDims::of(&shape, &is, dim);
            prop_assert_eq!(gather(&x, &idx, d), gather_ref(&x, &idx, d));
        }
    }

    #[test]
    fn out_of_range_indexes_are_errors() {
        assert!(check_indexes(&[0, 2, 3], 3).is_err());
        assert!(check_indexes(&[0, -1], 3).is_err());
        assert!(check_indexes(&[0, 1, 2], 3).is_ok());
    }
}
