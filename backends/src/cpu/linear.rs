//! `linear` (x @ w^T + b) and batched `matmul`. Weights may be f32, f16 or
//! bf16; half-precision rows are widened once per block of output features
//! and reused for every row of `x`, so prefill pays the widening once.
//! Every output is computed by `linear_tile`'s one arithmetic, so each row
//! of `x` gets the same bits whatever else is in `x`.

use super::linear_tile::{tile, Path, Weight};
use super::simd::dot_ref;
use crate::tensor::FloatSlice;

/// Output features handled by one parallel task.
const BLOCK_N: usize = 16;
/// Activation floats a task of `linear_into` reads (64K floats, 256 KiB:
/// a quarter of a typical L2, leaving room for the weight rows).
const ROW_BLOCK_FLOATS: usize = 1 << 16;

/// Reference: `out[i, j] = sum_k x[i, k] * w[j, k] + b[j]`.
pub fn linear_ref(
    x: &[f32],
    m: usize,
    k: usize,
    w: FloatSlice,
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let w = w.to_vec();
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s = dot_ref(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
            out[i * n + j] = s + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

/// Fast `linear`: parallel over blocks of output features.
pub fn linear(
    x: &[f32],
    m: usize,
    k: usize,
    w: FloatSlice,
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    linear_into(x, m, k, w, n, bias, &mut out);
    out
}

/// `linear` writing into `out` (`m * n` values).
pub fn linear_into(
    x: &[f32],
    m: usize,
    k: usize,
    w: FloatSlice,
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    linear_into_with(Path::best(), x, m, k, w, n, bias, out)
}

/// `linear_into` with the tiles of `path` (one of `Path::available()`).
#[allow(clippy::too_many_arguments)]
pub fn linear_into_with(
    path: Path,
    x: &[f32],
    m: usize,
    k: usize,
    w: FloatSlice,
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let n_blocks = n.div_ceil(BLOCK_N);
    // Many rows (a prompt, a batch of texts): tasks are also cut by rows,
    // `rows_per` at a time, so the rows a task reads stay in the core's L2
    // while it sweeps its weight rows; a block of all rows would stream
    // every row from memory once per 16 weight rows. Few rows: one block
    // of rows. Every tile computes an output the same way
    // (`linear_tile`), so neither the cut nor the tiles change a bit.
    let rows_per = (ROW_BLOCK_FLOATS / k.max(1)).max(4);
    let m_blocks = m.div_ceil(rows_per).max(1);
    let blocks = n_blocks * m_blocks;
    debug_assert_eq!(out.len(), m * n);
    // Each task writes its rows `i0..i1` of its block of columns (`bn` at
    // `j0`) straight into `out`; tasks own disjoint blocks.
    let dst = super::qlinear::SendPtr(out.as_mut_ptr());
    let run_block = |t: usize| {
        // Row-block major: consecutive tasks share their rows.
        let (mb, b) = (t / n_blocks, t % n_blocks);
        let i0 = mb * rows_per;
        let i1 = (i0 + rows_per).min(m);
        let j0 = b * BLOCK_N;
        let bn = BLOCK_N.min(n - j0);
        // SAFETY: (i, j) with i < m, j < bn lies in this block's columns.
        let put = |i: usize, j: usize, v: f32| unsafe {
            *dst.get().add(i * n + j0 + j) = v + bias.map_or(0.0, |b| b[j0 + j]);
        };
        let span = j0 * k..(j0 + bn) * k;
        match w {
            FloatSlice::F32(s) => rows(path, x, k, i0..i1, &s[span], bn, put),
            // The SIMD tiles widen half-precision weights as they load them
            // (one instruction per 16 values, shared by the tile's rows),
            // which costs less than a widened copy made per block for any
            // number of rows (the copy through `half`'s slice conversion
            // was 45% of an 8-row F16 step). Same values either way: a
            // widened f16/bf16 is exact.
            FloatSlice::F16(s) if m <= 2 || path != Path::Portable => {
                rows(path, x, k, i0..i1, &s[span], bn, put)
            }
            FloatSlice::BF16(s) if m <= 2 || path != Path::Portable => {
                rows(path, x, k, i0..i1, &s[span], bn, put)
            }
            // The portable path widens per tile: with more rows, each
            // weight row is widened once for all of them instead.
            other => {
                let mut wide = vec![0.0f32; bn * k];
                other.sub(j0 * k, bn * k).widen_into(&mut wide);
                rows(path, x, k, i0..i1, &wide, bn, put)
            }
        }
    };
    if m * n * k >= 1 << 15 {
        crate::cpu::pool::for_each(blocks, run_block);
    } else {
        (0..blocks).for_each(run_block);
    }
}

/// Rows `rs` of `x` against the `bn` weight rows `wb`: tiles of
/// `path.rows()` rows (then 2, then 1; five or six left on AVX-512: one
/// tile of six) by 4 weight rows, and one weight row at a time for the
/// last `bn % 4`.
fn rows<W: Weight>(
    path: Path,
    x: &[f32],
    k: usize,
    rs: std::ops::Range<usize>,
    wb: &[W],
    bn: usize,
    put: impl Fn(usize, usize, f32),
) {
    let row = |i: usize| &x[i * k..(i + 1) * k];
    let mut i = rs.start;
    while i < rs.end {
        let left = rs.end - i;
        if (5..=6).contains(&left) && path == Path::Avx512 {
            // Five or six rows (a verification step of four or five
            // proposals) as one six-row tile, the sixth repeating the
            // fifth where there are five: 24 accumulators, 6 activations
            // and a weight vector fill 31 of the 32 registers, and a
            // widened weight chunk feeds 6 FMAs, not 4 then 1-2 in a second
            // sweep (qbench F16 cold, 2 threads, 49152x576: 5 rows 3.66 ->
            // 2.90 ms, 4 rows 2.5-2.75).
            let a = [
                row(i),
                row(i + 1),
                row(i + 2),
                row(i + 3),
                row(i + 4),
                row(i + left - 1),
            ];
            sweep::<W, 6>(path, a, i, left, wb, k, bn, &put);
            i += left;
        } else if left >= 4 && path.rows() >= 4 {
            let a = [row(i), row(i + 1), row(i + 2), row(i + 3)];
            sweep::<W, 4>(path, a, i, 4, wb, k, bn, &put);
            i += 4;
        } else if left == 3 && path.rows() >= 4 {
            // Three rows as a four-row tile whose last row repeats the
            // third (its products are dropped): one sweep over the
            // weights instead of a two-row and a one-row sweep, which
            // streamed them at two thirds of the rate (a speculative
            // verification step of 3 rows cost 1.9 one-row steps).
            let a = [row(i), row(i + 1), row(i + 2), row(i + 2)];
            sweep::<W, 4>(path, a, i, 3, wb, k, bn, &put);
            i += 3;
        } else if left >= 2 {
            sweep::<W, 2>(path, [row(i), row(i + 1)], i, 2, wb, k, bn, &put);
            i += 2;
        } else {
            sweep::<W, 1>(path, [row(i)], i, 1, wb, k, bn, &put);
            i += 1;
        }
    }
}

/// `R` activation rows (from row `i`) against every weight row of `wb`,
/// four weight rows a tile; the first `live` rows' products are kept.
#[allow(clippy::too_many_arguments)]
fn sweep<W: Weight, const R: usize>(
    path: Path,
    a: [&[f32]; R],
    i: usize,
    live: usize,
    wb: &[W],
    k: usize,
    bn: usize,
    put: &impl Fn(usize, usize, f32),
) {
    const C: usize = 4;
    let wrow = |j: usize| &wb[j * k..(j + 1) * k];
    let whole = bn - bn % C;
    for j in (0..whole).step_by(C) {
        let t = tile::<W, R, C>(path, a, std::array::from_fn(|c| wrow(j + c)));
        for (r, tr) in t.iter().enumerate().take(live) {
            for (c, &v) in tr.iter().enumerate() {
                put(i + r, j + c, v);
            }
        }
    }
    for j in whole..bn {
        let t = tile::<W, R, 1>(path, a, [wrow(j)]);
        for (r, tr) in t.iter().enumerate().take(live) {
            put(i + r, j, tr[0]);
        }
    }
}

/// Transposes a row-major `[rows, cols]` matrix.
pub fn transpose2d(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}

/// Batched `a [batch, m, k] @ b [batch or 1, k, n]`.
pub fn matmul(
    a: &[f32],
    b: &[f32],
    batch: usize,
    b_batched: bool,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * m * n);
    let shared = (!b_batched).then(|| transpose2d(b, k, n));
    for bi in 0..batch {
        let a_i = &a[bi * m * k..(bi + 1) * m * k];
        let bt_owned;
        let bt = match &shared {
            Some(t) => t,
            None => {
                bt_owned = transpose2d(&b[bi * k * n..(bi + 1) * k * n], k, n);
                &bt_owned
            }
        };
        out.extend(linear(a_i, m, k, FloatSlice::F32(bt), n, None));
    }
    out
}

/// Reference for `matmul`.
pub fn matmul_ref(
    a: &[f32],
    b: &[f32],
    batch: usize,
    b_batched: bool,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut out = vec![0.0; batch * m * n];
    for bi in 0..batch {
        let bo = if b_batched { bi * k * n } else { 0 };
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    s += a[bi * m * k + i * k + p] * b[bo + p * n + j];
                }
                out[bi * m * n + i * n + j] = s;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use half::{bf16, f16};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn linear_matches_reference(m in 1usize..6, k in 1usize..70, n in 1usize..40, seed in any::<u64>(), bias in any::<bool>()) {
            let x = vec_f32(seed, m * k);
            let w = vec_f32(seed ^ 1, n * k);
            let b = vec_f32(seed ^ 2, n);
            let bias = bias.then_some(&b[..]);
            let r = linear_ref(&x, m, k, FloatSlice::F32(&w), n, bias);
            assert_close(&linear(&x, m, k, FloatSlice::F32(&w), n, bias), &r, 1e-4)?;
            let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            let rh = linear_ref(&x, m, k, FloatSlice::F16(&wh), n, bias);
            assert_close(&linear(&x, m, k, FloatSlice::F16(&wh), n, bias), &rh, 1e-4)?;
            let rb = linear_ref(&x, m, k, FloatSlice::BF16(&wb), n, bias);
            assert_close(&linear(&x, m, k, FloatSlice::BF16(&wb), n, bias), &rb, 1e-4)?;
        }

        // Many rows, cut into row blocks (`ROW_BLOCK_FLOATS / k` rows) and
        // 4x4 / 2x4 tiles with odd edges: every row still equals the
        // reference, and equals what the same row gets in a 3-row call
        // bit for bit when it sits at the same place in a pair (a block
        // boundary or tile change moves no row into another pairing).
        #[test]
        fn many_rows_match_reference_and_small_calls(m in 130usize..260, k in 500usize..1100, n in 5usize..40, seed in any::<u64>(), half in any::<bool>()) {
            let x = vec_f32(seed, m * k);
            let w = vec_f32(seed ^ 1, n * k);
            let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let ws = if half { FloatSlice::F16(&wh) } else { FloatSlice::F32(&w) };
            let got = linear(&x, m, k, ws, n, None);
            // Sums of ~1000 products that cancel to near 0 differ between
            // summation orders by up to ~1e-6 of the terms' magnitude (a
            // NEON run was 1.2e-4 off an output of 0.017 whose terms summed
            // to ~250 in magnitude): the bound grows with that magnitude.
            let want = linear_ref(&x, m, k, ws, n, None);
            let wf: Vec<f32> = if half { wh.iter().map(|v| v.to_f32()).collect() } else { w.clone() };
            for (idx, (g, r)) in got.iter().zip(&want).enumerate() {
                let (i, j) = (idx / n, idx % n);
                let mag: f32 = (0..k).map(|p| (x[i * k + p] * wf[j * k + p]).abs()).sum();
                prop_assert!((g - r).abs() <= 1e-4 * (1.0 + r.abs()) + 2e-6 * mag, "element {}: got {}, want {}, terms {}", idx, g, r, mag);
            }
            // Rows 2i and 2i + 1 as the first pair of a 3-row call.
            // (Three rows: one or two take the direct half-precision path.)
            for i in [0, m / 4 * 2, (m - 3) / 2 * 2] {
                let small = linear(&x[i * k..(i + 3) * k], 3, k, ws, n, None);
                for j in 0..2 * n {
                    prop_assert_eq!(got[i * n + j].to_bits(), small[j].to_bits(), "row {} col {}", i + j / n, j % n);
                }
            }
        }

        #[test]
        fn large_linear_matches_reference(k in 60usize..140, n in 30usize..300, seed in any::<u64>()) {
            // Big enough to take the parallel path.
            let m = 3;
            let x = vec_f32(seed, m * k);
            let w = vec_f32(seed ^ 1, n * k);
            assert_close(&linear(&x, m, k, FloatSlice::F32(&w), n, None), &linear_ref(&x, m, k, FloatSlice::F32(&w), n, None), 1e-4)?;
        }

        #[test]
        fn matmul_matches_reference(batch in 1usize..4, m in 1usize..7, k in 1usize..33, n in 1usize..19, shared in any::<bool>(), seed in any::<u64>()) {
            let a = vec_f32(seed, batch * m * k);
            let bb = if shared { 1 } else { batch };
            let b = vec_f32(seed ^ 3, bb * k * n);
            assert_close(&matmul(&a, &b, batch, !shared, m, k, n), &matmul_ref(&a, &b, batch, !shared, m, k, n), 1e-4)?;
        }
    }
}
