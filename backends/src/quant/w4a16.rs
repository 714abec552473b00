//! W4A16: 4-bit weights in groups of 32, 64 or 128 with one f16 scale per
//! group, `w = d * (q - 8)`, run against unquantized (f32) activations, so
//! the only rounding is the weights'. mllm's own type (not in ggml).
//! Byte layout of one group of `G` weights: `d: f16`, then `qs[G / 2]`
//! where byte `j` holds weight `j` in its low nibble and weight `j + G / 2`
//! in its high nibble. With `G = 32` this is exactly ggml's Q4_0 block, and
//! the quantizer is the same rule (the largest magnitude maps to code 0, so
//! all 16 codes are used); larger groups trade accuracy for 4.25 / 4.125
//! bits per weight.

use half::f16;

use super::{block_count, f16_at};

/// Bytes of one group of `g` weights.
pub const fn group_bytes(g: usize) -> usize {
    2 + g / 2
}

/// Dequantizes whole groups of `g` weights into `out`.
pub fn dequantize_row_w4a16(g: usize, blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    let gb = group_bytes(g);
    block_count("W4A16", g, gb, blocks.len(), out.len())?;
    for (b, o) in blocks.chunks_exact(gb).zip(out.chunks_exact_mut(g)) {
        let d = f16_at(b, 0).to_f32();
        let (lo, hi) = o.split_at_mut(g / 2);
        for ((&q, l), h) in b[2..].iter().zip(lo).zip(hi) {
            *l = ((q & 0x0F) as i32 - 8) as f32 * d;
            *h = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
    Ok(())
}

/// Quantizes `x` (whole groups of `g`) into `out`.
pub fn quantize_row_w4a16(g: usize, x: &[f32], out: &mut [u8]) -> Result<(), String> {
    let gb = group_bytes(g);
    block_count("W4A16", g, gb, out.len(), x.len())?;
    for (x, o) in x.chunks_exact(g).zip(out.chunks_exact_mut(gb)) {
        quantize_group(x, o);
    }
    Ok(())
}

/// One group of `x.len()` (even) values into `2 + len / 2` bytes: ggml's
/// q4_0 rule for any group size. The value of largest magnitude (the first,
/// on ties) maps to code 0, so `d = max / -8` keeps its sign and the
/// opposite extreme clips at code 15.
pub(crate) fn quantize_group(x: &[f32], out: &mut [u8]) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // Truncation after +8.5 rounds half up; `as` saturates, so NaN or
    // infinite inputs give codes 0/15 instead of undefined behaviour.
    let code = |v: f32| ((v * id + 8.5) as u8).min(15);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    let (lo, hi) = x.split_at(x.len() / 2);
    for ((q, &l), &h) in out[2..].iter_mut().zip(lo).zip(hi) {
        *q = code(l) | (code(h) << 4);
    }
}
