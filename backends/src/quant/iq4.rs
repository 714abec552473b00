//! IQ4_NL and IQ4_XS: 4-bit codes that index a fixed non-linear table of
//! sixteen int8 values (ggml's `kvalues_iq4nl`), read from GGUF files and
//! computed in their own blocks (`cpu::qlinear`). llama-quantize writes
//! IQ4_NL where Q2_K/Q3_K/IQ-quants do not fit a row of 256 values, and
//! IQ4_XS as the main type of its IQ4_XS files.
//!
//! Codes are packed as in Q4_0: within each 32 weights, byte `j` holds code
//! `j` in its low nibble and code `j + 16` in its high nibble.

use half::f16;

use super::import::map_blocks;
use super::{block_count, f16_at, BlockQ8_0, QK, QK_K};

/// The values a 4-bit IQ4 code stands for (ggml's `kvalues_iq4nl`): all
/// fit an i8, which is why an IQ4_NL block is exactly a Q8_0 block.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL: `w = d * KVALUES_IQ4NL[q]`. 18 bytes per 32 weights = 4.5 bits
/// per weight. Byte layout (ggml `block_iq4_nl`): `d: f16`, then `qs[16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ4NL {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

/// IQ4_XS: eight 32-weight sub-blocks, `w = d * (ls - 32) * KVALUES_IQ4NL[q]`
/// with a 6-bit `ls` per sub-block. 136 bytes per 256 weights = 4.25 bits
/// per weight. Byte layout (ggml `block_iq4_xs`): `d: f16`, `scales_h: u16`
/// (bits `2i..2i+2` are the top 2 bits of `ls` of sub-block `i`),
/// `scales_l[4]` (nibble `i % 2` of byte `i / 2` is the low 4 bits of `ls`
/// of sub-block `i`), then `qs[128]`, 16 bytes per sub-block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ4XS {
    pub d: f16,
    pub scales_h: u16,
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

/// The table values of 16 packed bytes: 32 weights.
pub(crate) fn lookup(qs: &[u8]) -> [i8; QK] {
    let mut v = [0i8; QK];
    for (j, &b) in qs.iter().enumerate().take(QK / 2) {
        v[j] = KVALUES_IQ4NL[(b & 0x0F) as usize];
        v[j + QK / 2] = KVALUES_IQ4NL[(b >> 4) as usize];
    }
    v
}

impl BlockIQ4NL {
    pub const SIZE: usize = 18;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ4NL {
        let mut qs = [0u8; QK / 2];
        qs.copy_from_slice(&b[2..]);
        BlockIQ4NL {
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

    /// `d * value` in f32, as gguf-py computes it.
    pub fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (o, v) in out.iter_mut().zip(lookup(&self.qs)) {
            *o = d * v as f32;
        }
    }

    /// The same values as a Q8_0 block, exactly: the same f16 `d`, the
    /// table values as the i8 codes, one f32 product either way.
    pub fn to_q8_0(&self) -> BlockQ8_0 {
        BlockQ8_0 {
            d: self.d,
            qs: lookup(&self.qs),
        }
    }
}

impl BlockIQ4XS {
    pub const SIZE: usize = 136;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ4XS {
        let mut scales_l = [0u8; QK_K / 64];
        scales_l.copy_from_slice(&b[4..8]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[8..]);
        BlockIQ4XS {
            d: f16_at(b, 0),
            scales_h: u16::from_le_bytes([b[2], b[3]]),
            scales_l,
            qs,
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..4].copy_from_slice(&self.scales_h.to_le_bytes());
        b[4..8].copy_from_slice(&self.scales_l);
        b[8..].copy_from_slice(&self.qs);
        b
    }

    /// The scale `ls - 32` (-32..=31) of sub-block `i` (0..8).
    pub fn scale(&self, i: usize) -> i32 {
        let lo = (self.scales_l[i / 2] >> (4 * (i % 2))) & 0x0F;
        let hi = ((self.scales_h >> (2 * i)) & 3) as u8;
        (lo | (hi << 4)) as i32 - 32
    }

    /// `(d * (ls - 32)) * value` in f32: the sub-block scale first, as
    /// gguf-py (and ggml) compute it.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let (outs, _) = out.as_chunks_mut::<QK>();
        for (i, o) in outs.iter_mut().enumerate() {
            let dl = d * self.scale(i) as f32;
            for (o, v) in o.iter_mut().zip(lookup(&self.qs[16 * i..16 * i + 16])) {
                *o = dl * v as f32;
            }
        }
    }
}

/// Dequantizes whole IQ4_NL blocks into `out` (32 values per 18 bytes).
pub fn dequantize_row_iq4_nl(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("IQ4_NL", QK, BlockIQ4NL::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockIQ4NL::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockIQ4NL::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Dequantizes whole IQ4_XS blocks into `out` (256 values per 136 bytes).
pub fn dequantize_row_iq4_xs(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("IQ4_XS", QK_K, BlockIQ4XS::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockIQ4XS::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockIQ4XS::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Rewrites whole IQ4_NL blocks as Q8_0 blocks (34 bytes per 18), value
/// for value (`BlockIQ4NL::to_q8_0`): how the OpenCL backend, which has
/// Q8_0 kernels but none for IQ4_NL, keeps them on the device.
pub fn repack_iq4_nl_to_q8_0(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ4_NL", blocks, out, |b: &[u8; BlockIQ4NL::SIZE]| {
        BlockIQ4NL::from_bytes(b).to_q8_0().to_bytes()
    })
}
