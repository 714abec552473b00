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
//! every `e`, at 4.25 bits a weight. The OpenCL backend, which has Q8_0
//! kernels only, repacks a tensor whose every scale is an f16 (blocks of
//! zeros aside, whatever their scale) into Q8_0 blocks of the same values
//! (`repack_mxfp4_to_q8_0`, 8.5 bits a weight), and widens others to f32.

use half::f16;

use super::import::map_blocks;
use super::{block_count, BlockQ8_0, QK};

/// The exponent bytes whose scale `2^(e - 128)` an f16 holds exactly:
/// 2^-24 (its smallest subnormal) to 2^15.
const F16_EXPONENTS: std::ops::RangeInclusive<u8> = 104..=143;

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

    /// The same values as a Q8_0 block (codes `k[q]`, |k| <= 12, under the
    /// scale as an f16), when an f16 holds the scale exactly, or when every
    /// value is 0 (a block of zeros may carry any scale, e.g. `e = 0`).
    pub fn to_q8_0(&self) -> Option<BlockQ8_0> {
        let mut qs = [0i8; QK];
        for (j, &b) in self.qs.iter().enumerate() {
            qs[j] = KVALUES_MXFP4[(b & 0x0F) as usize];
            qs[j + QK / 2] = KVALUES_MXFP4[(b >> 4) as usize];
        }
        let d = if F16_EXPONENTS.contains(&self.e) {
            f16::from_f32(e8m0_to_fp32_half(self.e))
        } else if qs.iter().all(|&q| q == 0) {
            f16::ZERO
        } else {
            return None;
        };
        Some(BlockQ8_0 { d, qs })
    }
}

/// Rewrites whole MXFP4 blocks as Q8_0 blocks (34 bytes per 17), value for
/// value, when every block has a Q8_0 twin (`BlockMXFP4::to_q8_0`);
/// otherwise an error naming the first block whose scale is not an f16
/// (and nothing written).
pub fn repack_mxfp4_to_q8_0(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    let (whole, _) = blocks.as_chunks::<{ BlockMXFP4::SIZE }>();
    if let Some((i, b)) = whole
        .iter()
        .enumerate()
        .find(|(_, b)| BlockMXFP4::from_bytes(b).to_q8_0().is_none())
    {
        return Err(format!(
            "MXFP4: block {i}'s scale 2^{} is outside an f16's 2^-24..2^15",
            b[0] as i32 - 128
        ));
    }
    map_blocks("MXFP4", blocks, out, |b: &[u8; BlockMXFP4::SIZE]| {
        // Every block was checked above: `to_q8_0` is `Some`.
        BlockMXFP4::from_bytes(b)
            .to_q8_0()
            .map_or([0; BlockQ8_0::SIZE], |q| q.to_bytes())
    })
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
