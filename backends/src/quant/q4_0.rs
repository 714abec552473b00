//! Q4_0: 32 weights as 4-bit codes around 8 with one f16 scale,
//! `w = d * (q - 8)`. 18 bytes per 32 weights = 4.5 bits per weight.
//! Byte layout (ggml `block_q4_0`): `d: f16`, then `qs[16]` where byte `j`
//! holds weight `j` in its low nibble and weight `j + 16` in its high nibble.

use half::f16;

use super::{block_count, f16_at, QK};

/// One Q4_0 block, field for field ggml's `block_q4_0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

impl BlockQ4_0 {
    pub const SIZE: usize = 18;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ4_0 {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[2..]);
        BlockQ4_0 {
            d: f16_at(b, 0),
            qs,
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..].copy_from_slice(&self.qs);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            out[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }

    /// ggml's `quantize_row_q4_0_ref` for one block (the rule W4A16 uses
    /// for every group size).
    pub fn quantize(x: &[f32; QK]) -> BlockQ4_0 {
        let mut b = [0u8; Self::SIZE];
        super::w4a16::quantize_group(x, &mut b);
        BlockQ4_0::from_bytes(&b)
    }
}

/// Dequantizes whole Q4_0 blocks into `out` (32 values per 18 bytes).
pub fn dequantize_row_q4_0(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q4_0", QK, BlockQ4_0::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ4_0::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ4_0::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Quantizes `x` (a multiple of 32 values) into Q4_0 blocks in `out`.
pub fn quantize_row_q4_0_ref(x: &[f32], out: &mut [u8]) -> Result<(), String> {
    block_count("Q4_0", QK, BlockQ4_0::SIZE, out.len(), x.len())?;
    let (xs, _) = x.as_chunks::<QK>();
    let (outs, _) = out.as_chunks_mut::<{ BlockQ4_0::SIZE }>();
    for (x, o) in xs.iter().zip(outs) {
        *o = BlockQ4_0::quantize(x).to_bytes();
    }
    Ok(())
}
