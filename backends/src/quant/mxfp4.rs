//! MXFP4 (OCP microscaling FP4, gpt-oss's expert weights), read from GGUF
//! files and computed in its own blocks (`cpu::qlinear::mxfp4`).
//!
//! 32 fp4 (e2m1) codes share one e8m0 exponent byte `e`. As ggml and
//! gguf-py compute it, `w = d * k[q]` where `k` is the e2m1 table doubled
//! (integers 0, ±1, ±2, ±3, ±4, ±6, ±8, ±12) and `d` the f32 `2^(e - 128)`
//! (ggml's `ggml_e8m0_to_fp32_half`: the scale `2^(e - 127)` times the 0.5
//! that undoes the doubling), built from its bits: `0x00200000 << e` for
//! `e < 2` (f32 subnormals), `(e - 1) << 23` otherwise.
//!
//! Why its own kernel and not a Q8_0 repack: the codes fit an i8, but `d`
//! spans 2^-128 to 2^127 while a Q8_0 scale is an f16 (2^-24 to 2^15).
//! The kernel reads `d` from the byte (`e8m0_to_fp32_half`), exact for
//! every `e`, at 4.25 bits a weight.

use super::{block_count, QK};

/// e2m1 values, doubled (gguf-py's `MXFP4.kvalues`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4: 17 bytes per 32 weights = 4.25 bits per weight. Byte layout
/// (ggml `block_mxfp4`): `e: u8`, then `qs[16]` (byte `j` holds code `j`
/// in its low nibble and code `j + 16` in its high nibble, as Q4_0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockMXFP4 {
    pub e: u8,
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMXFP4>() == 17);

/// `2^(e - 128)` as an f32, bit for bit as ggml's `ggml_e8m0_to_fp32_half`.
pub fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

impl BlockMXFP4 {
    pub const SIZE: usize = 17;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockMXFP4 {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[1..]);
        BlockMXFP4 { e: b[0], qs }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0] = self.e;
        b[1..].copy_from_slice(&self.qs);
        b
    }

    /// `d * k[q]` in f32, as gguf-py computes it.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = e8m0_to_fp32_half(self.e);
        for (j, &b) in self.qs.iter().enumerate() {
            out[j] = d * KVALUES_MXFP4[(b & 0x0F) as usize] as f32;
            out[j + QK / 2] = d * KVALUES_MXFP4[(b >> 4) as usize] as f32;
        }
    }
}

/// Dequantizes whole MXFP4 blocks into `out` (32 values per 17 bytes).
pub fn dequantize_row_mxfp4(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("MXFP4", QK, BlockMXFP4::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockMXFP4::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockMXFP4::from_bytes(b).dequantize(o);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every exponent, the fixtures' (0..=160) and beyond: `2^(e - 128)`.
    #[test]
    fn e8m0_scale_is_the_power_of_two() {
        for e in 0..=255u8 {
            let want = 2f64.powi(e as i32 - 128) as f32;
            assert_eq!(e8m0_to_fp32_half(e).to_bits(), want.to_bits(), "e = {e}");
        }
    }
}
