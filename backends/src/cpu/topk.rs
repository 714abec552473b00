//! `Op::TopK`: the indexes of the `k` largest values of each row (a MoE
//! router picking its experts). The order is total: larger value first,
//! NaN above every number (as torch.topk), the lower index first among
//! equal values, so the fast path and its twin agree exactly.
//!
//! The fast path selects (`select_nth_unstable_by`, linear on average)
//! then sorts only the `k` picked, with one index buffer per thread reused
//! across rows; rows are split over the pool when there are many. The twin
//! sorts each whole row stably.

use std::cell::Cell;
use std::cmp::Ordering;

/// Below this many values one thread does every row.
const PAR_VALUES: usize = 1 << 15;

/// Whether index `a` comes before index `b` of `row` in the output order.
fn order(row: &[f32], a: u32, b: u32) -> Ordering {
    let (va, vb) = (row[a as usize], row[b as usize]);
    let by_value = match (va.is_nan(), vb.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Descending; -0.0 and 0.0 are equal (then by index).
        _ => vb.partial_cmp(&va).unwrap_or(Ordering::Equal),
    };
    by_value.then(a.cmp(&b))
}

thread_local! {
    static IDX: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// The top `k` of one row into `out` (`k` values), `1 <= k <= row.len()`.
fn row_topk(row: &[f32], out: &mut [i32], idx: &mut Vec<u32>) {
    let k = out.len();
    idx.clear();
    idx.extend(0..row.len() as u32);
    if k < row.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| order(row, a, b));
    }
    let top = &mut idx[..k];
    // The order is total, so an unstable sort is deterministic.
    top.sort_unstable_by(|&a, &b| order(row, a, b));
    for (o, &i) in out.iter_mut().zip(top.iter()) {
        *o = i as i32;
    }
}

/// Fast `topk` over `rows` rows of `n` values (`1 <= k <= n`, checked by
/// `Op::infer`): `[rows, k]` indexes.
pub fn topk(x: &[f32], rows: usize, n: usize, k: usize) -> Vec<i32> {
    let mut out = vec![0i32; rows * k];
    if rows == 0 || k == 0 {
        return out;
    }
    let run = |r0: usize, chunk: &mut [i32]| {
        let mut idx = IDX.take();
        for (i, o) in chunk.chunks_exact_mut(k).enumerate() {
            let r = r0 + i;
            row_topk(&x[r * n..(r + 1) * n], o, &mut idx);
        }
        IDX.set(idx);
    };
    if rows * n < PAR_VALUES || rows == 1 {
        run(0, &mut out);
    } else {
        let threads = rayon::current_num_threads().max(1);
        let per = rows.div_ceil(threads * 4).max(1);
        super::pool::for_chunks(&mut out, per * k, |t, chunk| run(t * per, chunk));
    }
    out
}

/// Reference: each row's indexes stably sorted by value, the first `k`.
pub fn topk_ref(x: &[f32], rows: usize, n: usize, k: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let mut idx: Vec<u32> = (0..n as u32).collect();
        // Stable: equal values keep their index order.
        idx.sort_by(|&a, &b| order(row, a, b).then(Ordering::Equal));
        out.extend(idx[..k].iter().map(|&i| i as i32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::vec_f32;
    use proptest::prelude::*;

    #[test]
    fn ties_take_the_lower_index_and_nan_is_largest() {
        let x = [1.0, 3.0, 3.0, f32::NAN, -0.0, 0.0, 3.0];
        assert_eq!(topk(&x, 1, 7, 4), [3, 1, 2, 6]);
        assert_eq!(topk(&x, 1, 7, 7), [3, 1, 2, 6, 0, 4, 5]);
        assert_eq!(topk_ref(&x, 1, 7, 7), [3, 1, 2, 6, 0, 4, 5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Odd row lengths, k from 1 to n, values with many ties (rounded)
        /// and NaNs, enough rows to take the parallel path.
        #[test]
        fn topk_matches_reference(
            rows in 1usize..300,
            n in 1usize..200,
            kf in 0.0f64..1.0,
            ties in any::<bool>(),
            nans in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let k = 1 + ((n - 1) as f64 * kf) as usize;
            let mut x = vec_f32(seed, rows * n);
            if ties {
                x.iter_mut().for_each(|v| *v = (*v * 2.0).round());
            }
            if nans {
                x.iter_mut().step_by(7).for_each(|v| *v = f32::NAN);
            }
            prop_assert_eq!(topk(&x, rows, n, k), topk_ref(&x, rows, n, k));
        }
    }
}
