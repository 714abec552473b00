//! Data movement: permute, concat, strided slice, index select, where.
//! Generic over the element type so f32 and i32 share one implementation.

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Reference permute: computes every source index from scratch.
pub fn permute_ref<T: Copy + Default>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let ost = strides(&out_shape);
    let n = x.len();
    let mut out = vec![T::default(); n];
    for (o, slot) in out.iter_mut().enumerate() {
        let mut src = 0;
        for (d, &p) in perm.iter().enumerate() {
            src += (o / ost[d]) % out_shape[d] * st[p];
        }
        *slot = x[src];
    }
    out
}

/// Permute with an incremental index walk.
pub fn permute<T: Copy + Default>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_st: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let mut out = Vec::with_capacity(x.len());
    super::elementwise::for_each_broadcast(&out_shape, &src_st, &src_st, |_, i, _| out.push(x[i]));
    out
}

/// Concatenation of parts `(data, shape)` along `dim`; shapes agree elsewhere.
pub fn concat<T: Copy>(parts: &[(&[T], &[usize])], dim: usize) -> Vec<T> {
    let outer: usize = parts[0].1[..dim].iter().product();
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
    for o in 0..outer {
        for (data, shape) in parts {
            let chunk: usize = shape[dim..].iter().product();
            out.extend_from_slice(&data[o * chunk..(o + 1) * chunk]);
        }
    }
    out
}

/// `start..end` by `step` along the middle axis of `[outer, n, inner]`.
pub fn slice<T: Copy>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    start: usize,
    end: usize,
    step: usize,
) -> Vec<T> {
    let mut out = Vec::new();
    for o in 0..outer {
        let mut j = start;
        while j < end {
            out.extend_from_slice(&x[(o * n + j) * inner..(o * n + j + 1) * inner]);
            j += step;
        }
    }
    out
}

/// Picks `idx` entries along the middle axis of `[outer, n, inner]`; indexes
/// are checked by the caller.
pub fn index_select<T: Copy>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    idx: &[usize],
) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &j in idx {
            out.extend_from_slice(&x[(o * n + j) * inner..(o * n + j + 1) * inner]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::vec_f32;
    use proptest::prelude::*;

    fn shape_and_perm() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
        proptest::collection::vec(1usize..6, 1..5).prop_flat_map(|shape| {
            let r = shape.len();
            (Just(shape), Just((0..r).collect::<Vec<_>>()).prop_shuffle())
        })
    }

    proptest! {
        #[test]
        fn permute_matches_reference((shape, perm) in shape_and_perm(), seed in any::<u64>()) {
            let x = vec_f32(seed, shape.iter().product());
            prop_assert_eq!(permute(&x, &shape, &perm), permute_ref(&x, &shape, &perm));
        }

        #[test]
        fn slice_then_concat_roundtrips(outer in 1usize..4, n in 2usize..9, inner in 1usize..4, cut in 1usize..8, seed in any::<u64>()) {
            let cut = cut.min(n - 1);
            let x = vec_f32(seed, outer * n * inner);
            let a = slice(&x, (outer, n, inner), 0, cut, 1);
            let b = slice(&x, (outer, n, inner), cut, n, 1);
            let sa = [outer, cut, inner];
            let sb = [outer, n - cut, inner];
            prop_assert_eq!(concat(&[(&a[..], &sa[..]), (&b[..], &sb[..])], 1), x);
        }
    }
}
