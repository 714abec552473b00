//! `Op::CausalConv1d`: the depthwise causal convolution over time of Gated
//! DeltaNet (Qwen3.5), with its carried state (the last `kernel - 1` inputs
//! of the previous call), so a prompt fed in pieces or token by token gives
//! the numbers of one call over the whole of it.
//!
//! `causal_conv1d_ref` is the definition over the concatenation `[state;
//! x]`. The kernel computes the same sums channel-contiguously: with the
//! taps transposed to `[kernel, c]`, each output row is `kernel` fused
//! multiply-adds over whole rows, in `attn_simd::Vf` vectors where the CPU
//! has them (the scalar form ran at SSE width, 2% of a prefill), rows
//! split across the pool. A call of fewer tokens than taps (decode) sums
//! per channel from `w` as it lies: transposing the taps cost as much as
//! the convolution of one token.

use super::attn_simd::Vf;
use super::delta_simd::Path;

/// `x [t, c]`, `w [c, kernel]`, `state [kernel - 1, c]` -> the packed
/// `[t + kernel - 1, c]`: rows `0..t` the convolution, `y[i, ch] =
/// sum_j w[ch, j] * xx[i + j, ch]` over `xx = [state; x]`, then the new
/// state (the last `kernel - 1` rows of `xx`). No activation.
pub fn causal_conv1d(x: &[f32], w: &[f32], state: &[f32], c: usize, kernel: usize) -> Vec<f32> {
    causal_conv1d_on(super::delta_simd::best(), x, w, state, c, kernel)
}

/// Taps beyond this take the scalar rows (Qwen3.5 has 4).
const MAX_TAPS: usize = 8;

/// `causal_conv1d` on vector path `p` (`None`: scalar rows; a path must
/// be one of `delta_simd::paths()`).
pub fn causal_conv1d_on(
    p: Option<Path>,
    x: &[f32],
    w: &[f32],
    state: &[f32],
    c: usize,
    kernel: usize,
) -> Vec<f32> {
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
    let mut out = vec![0.0f32; (t + keep) * c];
    let (ys, st) = out.split_at_mut(t * c);
    for (r, s) in st.chunks_mut(c.max(1)).enumerate() {
        s.copy_from_slice(row(t + r));
    }
    if t < kernel {
        for (i, y) in ys.chunks_mut(c.max(1)).enumerate() {
            if kernel == 4 {
                // Qwen3.5's 4 taps as arrays: the loop runs without
                // bounds checks and vectorizes.
                let (r0, r1, r2, r3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
                let xs = r0.iter().zip(r1).zip(r2.iter().zip(r3));
                for ((o, wt), ((a, b), (cc, d))) in y.iter_mut().zip(w.as_chunks::<4>().0).zip(xs) {
                    *o = wt[0] * a + wt[1] * b + wt[2] * cc + wt[3] * d;
                }
                continue;
            }
            for (ch, o) in y.iter_mut().enumerate() {
                let taps = &w[ch * kernel..(ch + 1) * kernel];
                let tap = |j: usize| taps[j] * row(i + j)[ch];
                *o = (1..kernel).fold(tap(0), |acc, j| acc + tap(j));
            }
        }
        return out;
    }
    // Taps transposed to [kernel, c] so each tap is a contiguous row.
    let mut taps = vec![0.0f32; kernel * c];
    for ch in 0..c {
        for j in 0..kernel {
            taps[j * c + ch] = w[ch * kernel + j];
        }
    }
    let p = p.filter(|_| kernel <= MAX_TAPS);
    let rows_at = |i0: usize, y: &mut [f32]| {
        for (i, y) in y.chunks_mut(c.max(1)).enumerate() {
            let i = i0 + i;
            let mut src = [std::ptr::null::<f32>(); MAX_TAPS];
            match p {
                Some(p) if c > 0 => {
                    for (j, s) in src.iter_mut().take(kernel).enumerate() {
                        *s = row(i + j).as_ptr();
                    }
                    // SAFETY: `p` is one of `delta_simd::paths()`; every
                    // pointer covers `c` values.
                    unsafe { conv_row(p, &src[..kernel], &taps, y.as_mut_ptr(), c) };
                }
                _ => {
                    // The same order: the first tap's products, then the
                    // others added.
                    for j in 0..kernel {
                        let (xr, tr) = (row(i + j), &taps[j * c..(j + 1) * c]);
                        let rows = y.iter_mut().zip(xr.iter().zip(tr));
                        if j == 0 {
                            rows.for_each(|(o, (a, b))| *o = b * a);
                        } else {
                            rows.for_each(|(o, (a, b))| *o += b * a);
                        }
                    }
                }
            }
        }
    };
    // Whole rows per task, a few tasks per thread.
    let per = t.div_ceil(4 * super::pool::Pool::global().threads()).max(1);
    if t * c * kernel >= 1 << 16 {
        super::pool::for_chunks(ys, per * c, |k, y| rows_at(k * per, y));
    } else {
        rows_at(0, ys);
    }
    out
}

/// One output row: `y = sum_j taps[j] * src[j]` over `c` channels.
///
/// # Safety
/// The CPU must run `p`; `src` pointers and `y` cover `c` values, `taps`
/// `src.len() * c`.
unsafe fn conv_row(p: Path, src: &[*const f32], taps: &[f32], y: *mut f32, c: usize) {
    match p {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => row_avx512(src, taps, y, c),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => row_avx2(src, taps, y, c),
        #[cfg(target_arch = "aarch64")]
        Path::Neon => row_v::<std::arch::aarch64::float32x4_t>(src, taps, y, c),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn row_avx512(src: &[*const f32], taps: &[f32], y: *mut f32, c: usize) {
    row_v::<std::arch::x86_64::__m512>(src, taps, y, c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(src: &[*const f32], taps: &[f32], y: *mut f32, c: usize) {
    row_v::<std::arch::x86_64::__m256>(src, taps, y, c)
}

#[inline(always)]
unsafe fn row_v<V: Vf>(src: &[*const f32], taps: &[f32], y: *mut f32, c: usize) {
    let tp = taps.as_ptr();
    let mut ch = 0;
    while ch + V::N <= c {
        // Products rounded, then added from the first tap on (no fused
        // multiply-add): the order and roundings of the few-token path, so
        // a token's row has the same bits in a step of any length.
        let mut acc = V::mul(V::load(tp.add(ch)), V::load(src[0].add(ch)));
        for (j, &s) in src.iter().enumerate().skip(1) {
            acc = V::add(acc, V::mul(V::load(tp.add(j * c + ch)), V::load(s.add(ch))));
        }
        acc.store(y.add(ch));
        ch += V::N;
    }
    for ch in ch..c {
        let tap = |j: usize| *tp.add(j * c + ch) * *src[j].add(ch);
        *y.add(ch) = (1..src.len()).fold(tap(0), |acc, j| acc + tap(j));
    }
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

    /// Qwen3.5's shape class, large enough that rows split across the
    /// pool (odd channel count: a scalar tail in every row).
    #[test]
    fn pool_rows_match_reference() {
        let (t, c, kernel) = (90, 203, 4);
        let x = vec_f32(7, t * c);
        let w = vec_f32(8, c * kernel);
        let st = vec_f32(9, (kernel - 1) * c);
        let want = causal_conv1d_ref(&x, &w, &st, c, kernel);
        for p in super::super::delta_simd::paths()
            .into_iter()
            .map(Some)
            .chain([None])
        {
            assert_close(&causal_conv1d_on(p, &x, &w, &st, c, kernel), &want, 1e-5).unwrap();
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
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
            c in 1usize..70,
            kernel in 1usize..10,
            seed in any::<u64>(),
        ) {
            let x = vec_f32(seed, t * c);
            let w = vec_f32(seed ^ 1, c * kernel);
            let st = vec_f32(seed ^ 2, (kernel - 1) * c);
            let whole = causal_conv1d(&x, &w, &st, c, kernel);
            let want = causal_conv1d_ref(&x, &w, &st, c, kernel);
            assert_close(&whole, &want, 1e-5)?;
            // Each vector path and the scalar rows, against the twin.
            // One summation order everywhere: every path gives the same
            // bits.
            for p in super::super::delta_simd::paths().into_iter().map(Some).chain([None]) {
                let got = causal_conv1d_on(p, &x, &w, &st, c, kernel);
                assert_close(&got, &want, 1e-5)?;
                prop_assert!(bits(&got) == bits(&whole), "path {:?} differs from the best path", p);
            }
            // Row-invariant: fed in two calls (the few-token path for a
            // short one), the same bits as one call over the whole.
            let s = split.min(t);
            let a = causal_conv1d(&x[..s * c], &w, &st, c, kernel);
            let b = causal_conv1d(&x[s * c..], &w, &a[s * c..], c, kernel);
            let mut joined = a[..s * c].to_vec();
            joined.extend_from_slice(&b);
            prop_assert!(bits(&joined) == bits(&whole), "split at {} differs", s);
        }
    }
}
