//! IQ1_S and IQ1_M: 1.5-bit "i-quants", read from GGUF files. Eight
//! weights at a time are one entry of a ternary lookup grid (`IQ1S_GRID`,
//! generated from gguf-py's tables, values -1/0/1) shifted by `delta =
//! ±0.125`; a weight is `dl * (grid + delta)` in f32, as gguf-py computes
//! it.
//!
//! Every weight is exactly `d / 8 * (2 s + 1) * (8 grid ± 1)` (the f32
//! products round nothing), with `2 s + 1` <= 15 per 32 (IQ1_S) or 16
//! (IQ1_M) weights and `8 grid ± 1` in -9..=9: Q6_K's sixteen i8 scales
//! and 6-bit codes hold the integers, but an f16 `d / 8` would round a
//! small `d`, so both run as `Q6KScaled { shift: 3 }`, Q6_K blocks of the
//! same `d` whose product is scaled by 1/8 (`to_q6_k`; 6.56 bits per
//! weight). Q8_0 could not hold them: `(2 s + 1) * (8 grid ± 1)` reaches
//! 135, past an i8.

use half::f16;

use super::import::map_blocks;
use super::iq2::{array, grid8, rows};
use super::iq_grids::IQ1S_GRID;
use super::{f16_at, BlockQ6K, QK_K};

const IQ1S_DELTA: f32 = 0.125;

/// Eight weights: `dl * (grid + delta)`, the grid's bytes read as i8.
#[inline]
fn put8(out: &mut [f32], dl: f32, g: u64, delta: f32) {
    for (i, o) in out.iter_mut().enumerate().take(8) {
        let v = grid8(g, i) as u8 as i8 as f32;
        *o = dl * (v + delta);
    }
}

/// IQ1_S: 50 bytes per 256 weights = 1.5625 bits per weight. Byte layout
/// (ggml `block_iq1_s`): `d: f16`, `qs[32]` (low 8 bits of the 11-bit grid
/// index per 8 weights), `qh: [u16; 8]` LE, one per 32 weights: bits `3l..
/// 3l+3` are the top bits of index `4 ib + l`, bits 12..15 the scale `s`
/// (`dl = d * (2 s + 1)`), bit 15 the sign of `delta`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ1S {
    pub d: f16,
    pub qs: [u8; 32],
    pub qh: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);

impl BlockIQ1S {
    pub const SIZE: usize = 50;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ1S {
        BlockIQ1S {
            d: f16_at(b, 0),
            qs: array(&b[2..34]),
            qh: array(&b[34..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..34].copy_from_slice(&self.qs);
        b[34..].copy_from_slice(&self.qh);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for ib in 0..8 {
            let qh = u16::from_le_bytes([self.qh[2 * ib], self.qh[2 * ib + 1]]);
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 == 0 {
                IQ1S_DELTA
            } else {
                -IQ1S_DELTA
            };
            for l in 0..4 {
                let j = 4 * ib + l;
                let idx = self.qs[j] as usize | (((qh >> (3 * l)) & 7) as usize) << 8;
                put8(&mut out[8 * j..8 * j + 8], dl, IQ1S_GRID[idx], delta);
            }
        }
    }
}

/// IQ1_M: 56 bytes per 256 weights = 1.75 bits per weight. Byte layout
/// (ggml `block_iq1_m`): `qs[32]` (low 8 bits of the 11-bit grid index per
/// 8 weights), `qh[16]` (nibble `h` of byte `k`, for index `2 k + h`: 3 top
/// bits, then the sign of `delta`), `scales: [u16; 4]` LE: bits `3t..3t+3`
/// of word `k` are the scale `s` of weights `64 k + 16 t..+16` (`dl = d *
/// (2 s + 1)`), and the four words' top nibbles are the f16 `d`, lowest
/// first.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ1M {
    pub qs: [u8; 32],
    pub qh: [u8; 16],
    pub scales: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

impl BlockIQ1M {
    pub const SIZE: usize = 56;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ1M {
        BlockIQ1M {
            qs: array(&b[..32]),
            qh: array(&b[32..48]),
            scales: array(&b[48..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..32].copy_from_slice(&self.qs);
        b[32..48].copy_from_slice(&self.qh);
        b[48..].copy_from_slice(&self.scales);
        b
    }

    fn word(&self, k: usize) -> u16 {
        u16::from_le_bytes([self.scales[2 * k], self.scales[2 * k + 1]])
    }

    /// The super-block scale, packed in the words' top nibbles.
    pub fn d(&self) -> f16 {
        let bits = (0..4).fold(0u16, |a, k| a | (self.word(k) & 0xF000) >> (12 - 4 * k));
        f16::from_bits(bits)
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d().to_f32();
        for j in 0..32 {
            // Scale `s` per 16 weights: index `4 k + t` of the 16.
            let si = j / 2;
            let s = (self.word(si / 4) >> (3 * (si % 4))) & 7;
            let dl = d * (2 * s + 1) as f32;
            let h = (self.qh[j / 2] >> (4 * (j % 2))) & 0x0F;
            let idx = self.qs[j] as usize | ((h & 7) as usize) << 8;
            let delta = if h & 0x08 == 0 {
                IQ1S_DELTA
            } else {
                -IQ1S_DELTA
            };
            put8(&mut out[8 * j..8 * j + 8], dl, IQ1S_GRID[idx], delta);
        }
    }
}

/// `8 * (grid + delta)` (-9..=9) of weight `i` of grid entry `g`.
fn code8(g: u64, i: usize, negative_delta: bool) -> i8 {
    let v = 8 * (grid8(g, i) as u8 as i8);
    if negative_delta {
        v - 1
    } else {
        v + 1
    }
}

impl BlockIQ1S {
    /// The blocks of `Q6KScaled { shift: 3 }` with these values exactly:
    /// the same `d`, scale `2 s + 1`, code `8 * (grid + delta)`.
    pub fn to_q6_k(&self) -> BlockQ6K {
        let qh = |ib: usize| u16::from_le_bytes([self.qh[2 * ib], self.qh[2 * ib + 1]]);
        let scales = std::array::from_fn(|k| (2 * ((qh(k / 2) >> 12) & 7) + 1) as i8);
        BlockQ6K::from_codes(self.d, scales, |e| {
            let (j, i) = (e / 8, e % 8);
            let (ib, l) = (j / 4, j % 4);
            let h = qh(ib);
            let idx = self.qs[j] as usize | (((h >> (3 * l)) & 7) as usize) << 8;
            code8(IQ1S_GRID[idx], i, h & 0x8000 != 0)
        })
    }
}

impl BlockIQ1M {
    /// The blocks of `Q6KScaled { shift: 3 }` with these values exactly
    /// (`BlockIQ1S::to_q6_k`; IQ1_M's scales are per 16 weights already).
    pub fn to_q6_k(&self) -> BlockQ6K {
        let scales =
            std::array::from_fn(|si| (2 * ((self.word(si / 4) >> (3 * (si % 4))) & 7) + 1) as i8);
        BlockQ6K::from_codes(self.d(), scales, |e| {
            let (j, i) = (e / 8, e % 8);
            let h = (self.qh[j / 2] >> (4 * (j % 2))) & 0x0F;
            let idx = self.qs[j] as usize | ((h & 7) as usize) << 8;
            code8(IQ1S_GRID[idx], i, h & 0x08 != 0)
        })
    }
}

/// Rewrites whole IQ1_S blocks as Q6_K blocks of 8 times their values (210
/// bytes per 50; run as `Q6KScaled { shift: 3 }`).
pub fn repack_iq1_s_to_q6_k(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ1_S", blocks, out, |b: &[u8; BlockIQ1S::SIZE]| {
        BlockIQ1S::from_bytes(b).to_q6_k().to_bytes()
    })
}

/// Rewrites whole IQ1_M blocks as Q6_K blocks of 8 times their values (210
/// bytes per 56).
pub fn repack_iq1_m_to_q6_k(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ1_M", blocks, out, |b: &[u8; BlockIQ1M::SIZE]| {
        BlockIQ1M::from_bytes(b).to_q6_k().to_bytes()
    })
}

/// Dequantizes whole IQ1_S blocks into `out` (256 values per 50 bytes).
pub fn dequantize_row_iq1_s(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ1_S", blocks, out, |b, o| {
        BlockIQ1S::from_bytes(b).dequantize(o)
    })
}

/// Dequantizes whole IQ1_M blocks into `out` (256 values per 56 bytes).
pub fn dequantize_row_iq1_m(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ1_M", blocks, out, |b, o| {
        BlockIQ1M::from_bytes(b).dequantize(o)
    })
}
