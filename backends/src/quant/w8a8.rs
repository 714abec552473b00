//! W8A8: int8 weights with one scale per output channel (weight row),
//! `w = d * q`, run against activations quantized to int8 per token at run
//! time, so a dot product is one integer sum over the whole row scaled once.
//! mllm's own type (not in ggml). A "block" is a whole row of `k` weights:
//! `d: f32` (little-endian), then `k` signed codes in -127..=127.

use super::block_count;

/// Bytes of one row of `k` weights.
pub const fn row_bytes(k: usize) -> usize {
    4 + k
}

/// The scale of a row.
#[inline]
pub fn row_scale(row: &[u8]) -> f32 {
    f32::from_le_bytes([row[0], row[1], row[2], row[3]])
}

/// Dequantizes whole rows of `k` weights into `out`.
pub fn dequantize_row_w8a8(k: usize, rows: &[u8], out: &mut [f32]) -> Result<(), String> {
    let rb = row_bytes(k);
    block_count("W8A8", k, rb, rows.len(), out.len())?;
    for (r, o) in rows.chunks_exact(rb).zip(out.chunks_exact_mut(k.max(1))) {
        let d = row_scale(r);
        for (o, &q) in o.iter_mut().zip(&r[4..]) {
            *o = q as i8 as f32 * d;
        }
    }
    Ok(())
}

/// Quantizes `x` (whole rows of `k`) into `out`: `d = max|w| / 127`, codes
/// rounded to nearest.
pub fn quantize_row_w8a8(k: usize, x: &[f32], out: &mut [u8]) -> Result<(), String> {
    let rb = row_bytes(k);
    block_count("W8A8", k, rb, out.len(), x.len())?;
    for (x, o) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(rb)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        o[..4].copy_from_slice(&d.to_le_bytes());
        for (q, &v) in o[4..].iter_mut().zip(x) {
            *q = (v * id).round().clamp(-127.0, 127.0) as i8 as u8;
        }
    }
    Ok(())
}
