//! Q4_1: 32 weights as 4-bit codes with an f16 scale and an f16 minimum,
//! `w = d * q + m`. 20 bytes per 32 weights = 5 bits per weight.
//! Byte layout (ggml `block_q4_1`): `d: f16`, `m: f16`, then `qs[16]` where
//! byte `j` holds weight `j` (low nibble) and weight `j + 16` (high nibble).

use half::f16;

use super::{block_count, f16_at, QK};

/// One Q4_1 block, field for field ggml's `block_q4_1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

impl BlockQ4_1 {
    pub const SIZE: usize = 20;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ4_1 {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[4..]);
        BlockQ4_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qs,
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..4].copy_from_slice(&self.m.to_le_bytes());
        b[4..].copy_from_slice(&self.qs);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = (q & 0x0F) as f32 * d + m;
            out[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }

    /// ggml's `quantize_row_q4_1_ref` for one block: codes 0..=15 span
    /// `min..=max`, rounded half up. The unrounded f32 `d` picks the codes,
    /// as in ggml, though the block stores `d` and `min` as f16.
    pub fn quantize(x: &[f32; QK]) -> BlockQ4_1 {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let code = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            *q = code(x[j]) | (code(x[j + QK / 2]) << 4);
        }
        BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs,
        }
    }
}

/// Dequantizes whole Q4_1 blocks into `out` (32 values per 20 bytes).
pub fn dequantize_row_q4_1(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q4_1", QK, BlockQ4_1::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ4_1::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ4_1::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Quantizes `x` (a multiple of 32 values) into Q4_1 blocks in `out`.
pub fn quantize_row_q4_1_ref(x: &[f32], out: &mut [u8]) -> Result<(), String> {
    block_count("Q4_1", QK, BlockQ4_1::SIZE, out.len(), x.len())?;
    let (xs, _) = x.as_chunks::<QK>();
    let (outs, _) = out.as_chunks_mut::<{ BlockQ4_1::SIZE }>();
    for (x, o) in xs.iter().zip(outs) {
        *o = BlockQ4_1::quantize(x).to_bytes();
    }
    Ok(())
}
