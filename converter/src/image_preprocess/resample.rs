//! Antialiased bicubic resizing of 8-bit images, with the integer arithmetic
//! of PyTorch's CPU kernel for `interpolate(uint8, mode="bicubic",
//! antialias=True)`, which is what torchvision's `resize` runs for the
//! Qwen-VL image processor (torchvision backend, the transformers 5 default).
//!
//! That kernel (ATen `UpSampleKernel.cpp`, a port of Pillow-SIMD's resampler)
//! is separable: a horizontal pass, stored as uint8, then a vertical pass;
//! a pass is skipped when its side keeps its size. Per output position it
//! takes PIL's support window, evaluates Keys' cubic with a = -0.5 in f64,
//! normalizes the taps to sum 1, and turns them into i16 fixed point with a
//! precision chosen from the largest tap of the whole axis; pixels are summed
//! in i32 with a rounding half, shifted back and clamped to 0..=255. Doing
//! the same steps gives the same bytes, so the only differences left to the
//! reference come from image decoding.

/// One axis' taps: output `i` reads `len[i]` inputs from `start[i]` with the
/// fixed-point weights `weights[i * taps ..][.. len[i]]`.
struct AxisTaps {
    start: Vec<usize>,
    len: Vec<usize>,
    taps: usize,
    weights: Vec<i32>,
    precision: u32,
}

/// Keys' cubic convolution kernel with a = -0.5 (PIL's and PyTorch's choice
/// for antialiased bicubic); the operation order follows PyTorch's
/// `cubic_convolution1/2` so f64 rounding matches.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

impl AxisTaps {
    fn new(in_size: usize, out_size: usize) -> AxisTaps {
        // Bicubic reaches 2 input pixels each side; when shrinking the kernel
        // is stretched by the scale so every input pixel contributes.
        const HALF_WIDTH: f64 = 2.0;
        let scale = in_size as f64 / out_size as f64;
        let support = if scale >= 1.0 {
            HALF_WIDTH * scale
        } else {
            HALF_WIDTH
        };
        let taps = support.ceil() as usize * 2 + 1;
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let mut start = Vec::with_capacity(out_size);
        let mut len = Vec::with_capacity(out_size);
        let mut wf = vec![0f64; out_size * taps];
        let mut wt_max = 0f64;
        for i in 0..out_size {
            let center = scale * (i as f64 + 0.5);
            // `as i64` truncates toward zero like the C++ casts it mirrors.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64);
            let xsize = (xmax - xmin).clamp(0, taps as i64) as usize;
            let w = &mut wf[i * taps..(i + 1) * taps];
            let mut total = 0f64;
            for (j, wj) in w.iter_mut().enumerate().take(xsize) {
                *wj = cubic(((j as i64 + xmin) as f64 - center + 0.5) * invscale);
                total += *wj;
            }
            if total != 0.0 {
                for wj in w.iter_mut().take(xsize) {
                    *wj /= total;
                    wt_max = wt_max.max(*wj);
                }
            }
            start.push(xmin as usize);
            len.push(xsize);
        }
        // The largest precision (< 22) whose largest tap still fits i16.
        let mut precision = 0u32;
        while precision < 22 {
            let next = (0.5 + wt_max * f64::from(1u32 << (precision + 1))) as i32;
            if next >= 1 << 15 {
                break;
            }
            precision += 1;
        }
        let one = f64::from(1u32 << precision);
        let weights = wf
            .iter()
            .map(|&w| {
                let v = w * one;
                // C's (int)(v +- 0.5), stored as int16 by the reference.
                let r = if v < 0.0 {
                    (-0.5 + v) as i32
                } else {
                    (0.5 + v) as i32
                };
                i32::from(r as i16)
            })
            .collect();
        AxisTaps {
            start,
            len,
            taps,
            weights,
            precision,
        }
    }

    /// Output `i` from inputs `at(start[i] + j)`.
    #[inline]
    fn apply(&self, i: usize, at: impl Fn(usize) -> u8) -> u8 {
        let w = &self.weights[i * self.taps..];
        let s = self.start[i];
        // The rounding half; needs precision >= 1, which any kernel has.
        let mut acc: i32 = 1 << self.precision.saturating_sub(1);
        for (j, &wj) in w.iter().enumerate().take(self.len[i]) {
            acc += i32::from(at(s + j)) * wj;
        }
        (acc >> self.precision).clamp(0, 255) as u8
    }
}

/// Resizes an interleaved 8-bit image (`channels` per pixel, rows of
/// `width`) to `out_h x out_w`.
pub fn resize_bicubic_aa(
    src: &[u8],
    height: usize,
    width: usize,
    channels: usize,
    out_h: usize,
    out_w: usize,
) -> Vec<u8> {
    debug_assert_eq!(src.len(), height * width * channels);
    let horizontal = if out_w != width {
        let taps = AxisTaps::new(width, out_w);
        let mut out = vec![0u8; height * out_w * channels];
        for y in 0..height {
            let row = &src[y * width * channels..(y + 1) * width * channels];
            let orow = &mut out[y * out_w * channels..(y + 1) * out_w * channels];
            for x in 0..out_w {
                for c in 0..channels {
                    orow[x * channels + c] = taps.apply(x, |k| row[k * channels + c]);
                }
            }
        }
        out
    } else {
        src.to_vec()
    };
    if out_h == height {
        return horizontal;
    }
    let taps = AxisTaps::new(height, out_h);
    let stride = out_w * channels;
    let mut out = vec![0u8; out_h * stride];
    for y in 0..out_h {
        for k in 0..stride {
            out[y * stride + k] = taps.apply(y, |r| horizontal[r * stride + k]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_identity_and_constant_stays_constant() {
        let img: Vec<u8> = (0..5 * 7 * 3).map(|i| (i * 37 % 256) as u8).collect();
        assert_eq!(resize_bicubic_aa(&img, 5, 7, 3, 5, 7), img);
        let flat = vec![200u8; 9 * 4 * 3];
        for (h, w) in [(3, 2), (20, 11), (9, 1), (1, 4)] {
            let out = resize_bicubic_aa(&flat, 9, 4, 3, h, w);
            assert!(out.iter().all(|&v| v == 200), "{h}x{w}");
        }
    }

    #[test]
    fn taps_sum_to_one_in_fixed_point() {
        for (i, o) in [(7, 3), (3, 7), (1000, 32), (5, 64), (64, 63)] {
            let t = AxisTaps::new(i, o);
            for k in 0..o {
                let s: i32 = t.weights[k * t.taps..][..t.len[k]].iter().sum();
                let one = 1i32 << t.precision;
                assert!(
                    (s - one).abs() <= t.len[k] as i32,
                    "{i}->{o} at {k}: {s} vs {one}"
                );
            }
        }
    }
}
