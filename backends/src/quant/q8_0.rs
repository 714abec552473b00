//! Q8_0: 32 weights as signed 8-bit codes with one f16 scale, `w = d * q`.
//! 34 bytes per 32 weights = 8.5 bits per weight.
//! Byte layout (ggml `block_q8_0`): `d: f16`, then `qs[32]` as i8.

use half::f16;

use super::{block_count, f16_at, QK};

/// One Q8_0 block, field for field ggml's `block_q8_0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

impl BlockQ8_0 {
    pub const SIZE: usize = 34;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ8_0 {
        let mut qs = [0i8; QK];
        for (q, &byte) in qs.iter_mut().zip(&b[2..]) {
            *q = byte as i8;
        }
        BlockQ8_0 {
            d: f16_at(b, 0),
            qs,
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        for (byte, &q) in b[2..].iter_mut().zip(&self.qs) {
            *byte = q as u8;
        }
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = q as f32 * d;
        }
    }

    /// ggml's `quantize_row_q8_0_ref` for one block: `d = amax / 127`,
    /// codes rounded half away from zero (C `roundf`, Rust `f32::round`).
    pub fn quantize(x: &[f32; QK]) -> BlockQ8_0 {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
        BlockQ8_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

/// Dequantizes whole Q8_0 blocks into `out` (32 values per 34 bytes).
pub fn dequantize_row_q8_0(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q8_0", QK, BlockQ8_0::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ8_0::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ8_0::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Quantizes `x` (a multiple of 32 values) into Q8_0 blocks in `out`.
pub fn quantize_row_q8_0_ref(x: &[f32], out: &mut [u8]) -> Result<(), String> {
    block_count("Q8_0", QK, BlockQ8_0::SIZE, out.len(), x.len())?;
    let (xs, _) = x.as_chunks::<QK>();
    let (outs, _) = out.as_chunks_mut::<{ BlockQ8_0::SIZE }>();
    for (x, o) in xs.iter().zip(outs) {
        *o = BlockQ8_0::quantize(x).to_bytes();
    }
    Ok(())
}
