//! `Op::CausalConv1d`: the depthwise causal convolution over time of Gated
//! DeltaNet (Qwen3.5), with its carried state (the last `kernel - 1` inputs
//! of the previous call), so a prompt fed in pieces or token by token gives
//! the numbers of one call over the whole of it.
//!
//! `causal_conv1d_ref` is the definition over the concatenation `[state;
//! x]`; the kernel computes the same sums channel-contiguously (rows of
//! `x` are `[c]`, so each output row is `kernel` fused multiply-adds over
//! whole rows, which vectorizes).

/// `x [t, c]`, `w [c, kernel]`, `state [kernel - 1, c]` -> the packed
/// `[t + kernel - 1, c]`: rows `0..t` the convolution, `y[i, ch] =
/// sum_j w[ch, j] * xx[i + j, ch]` over `xx = [state; x]`, then the new
/// state (the last `kernel - 1` rows of `xx`). No activation.
pub fn causal_conv1d(x: &[f32], w: &[f32], state: &[f32], c: usize, kernel: usize) -> Vec<f32> {
    let t = x.len() / c.max(1);
    let keep = kernel - 1;
    // Row r of xx, without building it.
    let row = |r: usize| {
        if r < keep {
            &state[r * c..(r + 1) * c]
        } else {
            &x[(r - keep) * c..(r - keep + 1) * c]
        }
    };
    // Taps transposed to [kernel, c] so each tap is a contiguous row.
    let mut taps = vec![0.0f32; kernel * c];
    for ch in 0..c {
        for j in 0..kernel {
            taps[j * c + ch] = w[ch * kernel + j];
        }
    }
    let mut out = vec![0.0f32; (t + keep) * c];
    let (ys, st) = out.split_at_mut(t * c);
    for (i, y) in ys.chunks_mut(c.max(1)).enumerate() {
        for j in 0..kernel {
            let (xr, tr) = (row(i + j), &taps[j * c..(j + 1) * c]);
            y.iter_mut()
                .zip(xr.iter().zip(tr))
                .for_each(|(o, (a, b))| *o += a * b);
        }
    }
    for (r, s) in st.chunks_mut(c.max(1)).enumerate() {
        s.copy_from_slice(row(t + r));
    }
    out
}

/// Reference twin: the concatenation, then the sum per output element.
pub fn causal_conv1d_ref(x: &[f32], w: &[f32], state: &[f32], c: usize, kernel: usize) -> Vec<f32> {
    let t = x.len() / c.max(1);
    let xx: Vec<f32> = state.iter().chain(x).copied().collect();
    let mut out = Vec::with_capacity((t + kernel - 1) * c);
    for i in 0..t {
        for ch in 0..c {
            let mut acc = 0.0f32;
            for j in 0..kernel {
                acc += w[ch * kernel + j] * xx[(i + j) * c + ch];
            }
            out.push(acc);
        }
    }
    out.extend_from_slice(&xx[t * c..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use proptest::prelude::*;

    #[test]
    fn one_channel_by_hand() {
        // state [1, 2], x [3, 4], w [1, 10, 100]: y0 = 1 + 20 + 300.
        let y = causal_conv1d(&[3.0, 4.0], &[1.0, 10.0, 100.0], &[1.0, 2.0], 1, 3);
        assert_eq!(y, [321.0, 432.0, 3.0, 4.0]);
        assert_eq!(
            causal_conv1d_ref(&[3.0, 4.0], &[1.0, 10.0, 100.0], &[1.0, 2.0], 1, 3),
            y
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Odd channel counts, t from 1, kernels 1 to 5; and feeding `x` in
        /// two calls (the state of the first carried into the second)
        /// equals one call over the whole.
        #[test]
        fn conv_matches_reference_and_carries_state(
            t in 1usize..20,
            split in 0usize..20,
            c in 1usize..37,
            kernel in 1usize..6,
            seed in any::<u64>(),
        ) {
            let x = vec_f32(seed, t * c);
            let w = vec_f32(seed ^ 1, c * kernel);
            let st = vec_f32(seed ^ 2, (kernel - 1) * c);
            let whole = causal_conv1d(&x, &w, &st, c, kernel);
            assert_close(&whole, &causal_conv1d_ref(&x, &w, &st, c, kernel), 1e-5)?;
            let s = split.min(t);
            let a = causal_conv1d(&x[..s * c], &w, &st, c, kernel);
            let b = causal_conv1d(&x[s * c..], &w, &a[s * c..], c, kernel);
            let mut joined = a[..s * c].to_vec();
            joined.extend_from_slice(&b);
            assert_close(&joined, &whole, 1e-5)?;
        }
    }
}
