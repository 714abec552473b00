//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and MXFP4 weights with 16 rows
//! interleaved (`Q4_0x16`, `Q4_1x16`, `Q5_0x16`, `Q5_1x16`, `Q8_0x16`,
//! `IQ4_NLx16`, `MXFP4x16`):
//! the layout the CPU backend repacks linear weights into at load
//! (`Backend::prepare_weight`) so that one 512-bit VNNI instruction works
//! on 16 rows at once and the scales of 16 rows are one vector (the AVX2
//! kernel, `qlinear/x16_avx2.rs`, reads a group as two 8-row halves). Never
//! stored in a file; the bytes are exactly as many as the plain type's.
//!
//! Rows go in groups of 16 (row counts must be a multiple of 16). A group
//! holds its blocks in order; block `b` of a group is the 16 rows' f16
//! scales (32 bytes; Q4_1, Q5_1: then their f16 minimums, 32 more; MXFP4: their
//! e8m0 bytes, 16), then the
//! codes in chunks of 64 bytes: chunk `t` is
//! bytes `4t..4t+4` of each row's codes, row after row (Q4_0: 4 chunks of
//! its 16 nibble bytes; Q8_0: 8 chunks of its 32 code bytes; Q5_0, Q5_1: the 4
//! bytes of fifth bits as chunk 0, then its nibbles as Q4_0's). So lane `l`
//! (4 bytes) of a chunk is row `l`: a `dpbusd` against 4 activation bytes
//! broadcast to every lane adds 4 products to each of the 16 rows.

use super::QuantType;

/// Rows per interleaved group.
pub const ROWS: usize = 16;

/// The plain type a packed one interleaves, and the other way round.
pub fn plain_of(ty: QuantType) -> Option<QuantType> {
    match ty {
        QuantType::Q4_0x16 => Some(QuantType::Q4_0),
        QuantType::Q4_1x16 => Some(QuantType::Q4_1),
        QuantType::Q8_0x16 => Some(QuantType::Q8_0),
        QuantType::IQ4_NLx16 => Some(QuantType::IQ4_NL),
        QuantType::Q5_0x16 => Some(QuantType::Q5_0),
        QuantType::Q5_1x16 => Some(QuantType::Q5_1),
        QuantType::MXFP4x16 => Some(QuantType::MXFP4),
        _ => None,
    }
}

pub fn packed_of(ty: QuantType) -> Option<QuantType> {
    match ty {
        QuantType::Q4_0 => Some(QuantType::Q4_0x16),
        QuantType::Q4_1 => Some(QuantType::Q4_1x16),
        QuantType::Q8_0 => Some(QuantType::Q8_0x16),
        QuantType::IQ4_NL => Some(QuantType::IQ4_NLx16),
        QuantType::Q5_0 => Some(QuantType::Q5_0x16),
        QuantType::Q5_1 => Some(QuantType::Q5_1x16),
        QuantType::MXFP4 => Some(QuantType::MXFP4x16),
        _ => None,
    }
}

/// Bytes of codes per block.
fn code_bytes(plain: QuantType) -> usize {
    plain.type_size() - head_bytes(plain)
}

/// Bytes of fields before a block's codes: the f16 scale (Q4_1: and the
/// minimum; MXFP4: its e8m0 byte).
pub fn head_bytes(plain: QuantType) -> usize {
    match plain {
        QuantType::Q4_1 | QuantType::Q5_1 => 4,
        QuantType::MXFP4 => 1,
        _ => 2,
    }
}

/// Bytes of one head field: an f16, or MXFP4's byte.
fn field_bytes(plain: QuantType) -> usize {
    head_bytes(plain).min(2)
}

/// Checks the sizes of an `[n, k]` tensor of `plain` blocks.
fn check(plain: QuantType, bytes: usize, n: usize, k: usize) -> Result<usize, String> {
    if !n.is_multiple_of(ROWS) || !k.is_multiple_of(32) || k == 0 {
        return Err(format!(
            "{plain} [{n}, {k}]: packing needs rows in groups of {ROWS} and whole blocks"
        ));
    }
    let nb = k / 32;
    if n.checked_mul(nb * plain.type_size()) != Some(bytes) {
        return Err(format!("{bytes} bytes do not hold {plain} [{n}, {k}]"));
    }
    Ok(nb)
}

/// Byte offset of (row `r`'s) block `b` inside a packed tensor, its lane,
/// and the size of one group block.
fn place(plain: QuantType, nb: usize, r: usize, b: usize) -> (usize, usize) {
    let gb = ROWS * plain.type_size();
    ((r / ROWS * nb + b) * gb, r % ROWS)
}

/// Interleaves an `[n, k]` tensor of Q4_0 or Q8_0 rows.
pub fn pack(plain: QuantType, src: &[u8], n: usize, k: usize) -> Result<Vec<u8>, String> {
    packed_of(plain).ok_or_else(|| format!("{plain} has no packed layout"))?;
    let nb = check(plain, src.len(), n, k)?;
    let (ts, cb, hb) = (plain.type_size(), code_bytes(plain), head_bytes(plain));
    let fb = field_bytes(plain);
    let mut out = vec![0u8; src.len()];
    for r in 0..n {
        for b in 0..nb {
            let blk = &src[(r * nb + b) * ts..][..ts];
            let (at, l) = place(plain, nb, r, b);
            for h in 0..hb / fb {
                let dst = at + h * fb * ROWS + fb * l;
                out[dst..dst + fb].copy_from_slice(&blk[fb * h..fb * (h + 1)]);
            }
            for t in 0..cb / 4 {
                let dst = at + hb * ROWS + t * 4 * ROWS + 4 * l;
                out[dst..dst + 4].copy_from_slice(&blk[hb + 4 * t..hb + 4 * t + 4]);
            }
        }
    }
    Ok(out)
}

/// Row `r` of a packed `[n, k]` tensor as plain blocks (`k / 32` blocks of
/// the plain type) into `out`.
pub fn row_blocks(
    packed: QuantType,
    src: &[u8],
    n: usize,
    k: usize,
    r: usize,
    out: &mut [u8],
) -> Result<(), String> {
    let plain = plain_of(packed).ok_or_else(|| format!("{packed} is not a packed type"))?;
    let nb = check(plain, src.len(), n, k)?;
    let (ts, cb, hb) = (plain.type_size(), code_bytes(plain), head_bytes(plain));
    let fb = field_bytes(plain);
    if r >= n || out.len() != nb * ts {
        return Err(format!(
            "row {r} of {n}, or an output of {} bytes",
            out.len()
        ));
    }
    for b in 0..nb {
        let blk = &mut out[b * ts..][..ts];
        let (at, l) = place(plain, nb, r, b);
        for h in 0..hb / fb {
            let s = at + h * fb * ROWS + fb * l;
            blk[fb * h..fb * (h + 1)].copy_from_slice(&src[s..s + fb]);
        }
        for t in 0..cb / 4 {
            let s = at + hb * ROWS + t * 4 * ROWS + 4 * l;
            blk[hb + 4 * t..hb + 4 * t + 4].copy_from_slice(&src[s..s + 4]);
        }
    }
    Ok(())
}

/// The plain blocks of a whole packed `[n, k]` tensor (the inverse of `pack`).
pub fn unpack(packed: QuantType, src: &[u8], n: usize, k: usize) -> Result<Vec<u8>, String> {
    let plain = plain_of(packed).ok_or_else(|| format!("{packed} is not a packed type"))?;
    let row = k / 32 * plain.type_size();
    let mut out = vec![0u8; src.len()];
    for (r, o) in out.chunks_exact_mut(row.max(1)).enumerate() {
        row_blocks(packed, src, n, k, r, o)?;
    }
    Ok(out)
}

/// Dequantizes a whole packed `[n, k]` tensor.
pub fn dequantize(packed: QuantType, src: &[u8], n: usize, k: usize) -> Result<Vec<f32>, String> {
    let plain = plain_of(packed).ok_or_else(|| format!("{packed} is not a packed type"))?;
    super::dequantize(plain, &unpack(packed, src, n, k)?, n * k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_then_unpack_is_the_identity() {
        for plain in [
            QuantType::Q4_0,
            QuantType::Q4_1,
            QuantType::Q5_0,
            QuantType::Q5_1,
            QuantType::Q8_0,
            QuantType::IQ4_NL,
            QuantType::MXFP4,
        ] {
            let (n, k) = (32, 96);
            let src: Vec<u8> = (0..n * k / 32 * plain.type_size())
                .map(|i| (i * 7 + i / 13) as u8)
                .collect();
            let p = pack(plain, &src, n, k).expect("pack");
            assert_ne!(p, src);
            let packed = packed_of(plain).expect("packed");
            assert_eq!(unpack(packed, &p, n, k).expect("unpack"), src);
            assert!(pack(plain, &src[..src.len() / 2], 16, k).is_ok());
            assert!(pack(plain, &src, 8, 2 * k).is_err(), "8 rows");
            assert!(pack(QuantType::Q4_K, &src, n, k).is_err());
        }
    }
}
