//! Q5_0 and Q5_1: 32 weights as 5-bit codes, read from GGUF files and
//! computed in their own blocks (`cpu::qlinear::q5`). llama-quantize writes them
//! where a K-quant does not fit: Q4_K -> Q5_0 and Q5_K -> Q5_1 for rows that
//! are not whole 256-value super-blocks.
//!
//! Both keep the low 4 bits of the codes like Q4_0 (`qs[j]` holds code `j`
//! in its low nibble and code `j + 16` in its high nibble) and the fifth
//! bits in a little-endian u32 `qh` (bit `i` is the high bit of code `i`).

use half::f16;

use super::import::map_blocks;
use super::{block_count, f16_at, BlockQ8_0, QK};

/// Q5_0: `w = d * (q - 16)`, codes 0..=31. 22 bytes per 32 weights = 5.5
/// bits per weight. Byte layout (ggml `block_q5_0`): `d: f16`, `qh: [u8; 4]`
/// (a u32 that ggml keeps as bytes, so the block has no alignment), then
/// `qs[16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// Q5_1: `w = d * q + m`, codes 0..=31. 24 bytes per 32 weights = 6 bits
/// per weight. Byte layout (ggml `block_q5_1`): `d: f16`, `m: f16`,
/// `qh: [u8; 4]`, then `qs[16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// The 32 five-bit codes (0..=31) of `qh` and `qs`, in weight order.
pub(crate) fn codes5(qh: &[u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let h = u32::from_le_bytes(*qh);
    let mut q = [0u8; QK];
    for (j, &b) in qs.iter().enumerate() {
        q[j] = (b & 0x0F) | ((((h >> j) & 1) as u8) << 4);
        q[j + QK / 2] = (b >> 4) | ((((h >> (j + QK / 2)) & 1) as u8) << 4);
    }
    q
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

impl BlockQ5_0 {
    pub const SIZE: usize = 22;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ5_0 {
        BlockQ5_0 {
            d: f16_at(b, 0),
            qh: array(&b[2..6]),
            qs: array(&b[6..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..6].copy_from_slice(&self.qh);
        b[6..].copy_from_slice(&self.qs);
        b
    }

    /// The signed codes `q - 16` (-16..=15).
    pub fn signed_codes(&self) -> [i8; QK] {
        codes5(&self.qh, &self.qs).map(|q| q as i8 - 16)
    }

    /// `d * (q - 16)` in f32, as gguf-py computes it.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (o, q) in out.iter_mut().zip(self.signed_codes()) {
            *o = d * q as f32;
        }
    }

    /// The same values as a Q8_0 block, exactly: Q8_0 is `d * q` with the
    /// same f16 `d` and i8 codes, and `q - 16` fits an i8. Q8_0 computes
    /// `q as f32 * d`, the same single f32 product as ours.
    pub fn to_q8_0(&self) -> BlockQ8_0 {
        BlockQ8_0 {
            d: self.d,
            qs: self.signed_codes(),
        }
    }
}

impl BlockQ5_1 {
    pub const SIZE: usize = 24;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ5_1 {
        BlockQ5_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qh: array(&b[4..8]),
            qs: array(&b[8..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..4].copy_from_slice(&self.m.to_le_bytes());
        b[4..8].copy_from_slice(&self.qh);
        b[8..].copy_from_slice(&self.qs);
        b
    }

    /// `d * q + m` in f32: a product then a sum, never fused (gguf-py's
    /// numpy order; Rust does not contract `a * b + c` into an FMA).
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (o, q) in out.iter_mut().zip(codes5(&self.qh, &self.qs)) {
            *o = d * q as f32 + m;
        }
    }
}

/// Dequantizes whole Q5_0 blocks into `out` (32 values per 22 bytes).
pub fn dequantize_row_q5_0(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q5_0", QK, BlockQ5_0::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ5_0::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ5_0::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Dequantizes whole Q5_1 blocks into `out` (32 values per 24 bytes).
pub fn dequantize_row_q5_1(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q5_1", QK, BlockQ5_1::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ5_1::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ5_1::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Rewrites whole Q5_0 blocks as Q8_0 blocks (34 bytes per 22), value for
/// value (`BlockQ5_0::to_q8_0`): how the OpenCL backend, which has Q8_0
/// kernels but none for Q5_0, keeps them on the device.
pub fn repack_q5_0_to_q8_0(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("Q5_0", blocks, out, |b: &[u8; BlockQ5_0::SIZE]| {
        BlockQ5_0::from_bytes(b).to_q8_0().to_bytes()
    })
}
