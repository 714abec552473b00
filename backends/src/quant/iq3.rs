//! IQ3_XXS and IQ3_S: 3-bit "i-quants", read from GGUF files. Four
//! weights at a time are one entry of a lookup grid (`iq_grids`,
//! generated from gguf-py's tables), each with its own sign; a weight is
//! `(db * grid) * sign` in f32, in that order, as gguf-py computes it.
//!
//! Every weight is exactly an f16 `d` over a power of two times integers
//! (the f32 products round nothing): IQ3_XXS `d / 4 * (2 s + 1) * grid`
//! (grid values 4..62), IQ3_S `d * (2 s + 1) * grid` (odd grid values
//! 1..15, `2 s + 1` per 32 weights). IQ3_S therefore runs as Q6_K (`d`,
//! an i8 scale per 16 weights, codes -32..31: `to_q6_k`, 6.56 bits per
//! weight). IQ3_XXS's finest step is `d / 2` (62 / 4 is not whole), which
//! an f16 does not hold when `d` is small: it runs as `Q6KScaled { shift:
//! 1 }`, Q6_K blocks of the same `d`, scale `2 s + 1` and code `grid / 2 *
//! sign` (-31..=31) whose product is halved. (Q8_0 could not hold either:
//! their products pass an i8.)

use half::f16;

use super::import::map_blocks;
use super::iq2::{array, rows, sign};
use super::iq_grids::{IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};
use super::{f16_at, BlockQ6K, QK_K};

/// Value `i` (0..4) of grid entry `g`, as f32.
#[inline]
fn grid4(g: u32, i: usize) -> f32 {
    ((g >> (8 * i)) & 0xFF) as u8 as f32
}

/// Four weights: `(db * grid) * sign` with sign bits `signs >> shift`.
#[inline]
fn put4(out: &mut [f32], db: f32, g: u32, signs: u8, shift: usize) {
    for (i, o) in out.iter_mut().enumerate().take(4) {
        *o = db * grid4(g, i) * sign(signs, shift + i);
    }
}

/// IQ3_XXS: 98 bytes per 256 weights = 3.0625 bits per weight. Byte layout
/// (ggml `block_iq3_xxs`): `d: f16`, `qs[64]` (one 8-bit grid index per 4
/// weights), then per 32 weights an LE u32 (four 7-bit sign indices into
/// `KSIGNS_IQ2XS` at bits `7l`, one per 8 weights, the scale in bits
/// 28..32): `db = d * (0.5 + s) * 0.5`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ3XXS {
    pub d: f16,
    pub qs: [u8; 64],
    pub scales: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);

impl BlockIQ3XXS {
    pub const SIZE: usize = 98;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ3XXS {
        BlockIQ3XXS {
            d: f16_at(b, 0),
            qs: array(&b[2..66]),
            scales: array(&b[66..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..66].copy_from_slice(&self.qs);
        b[66..].copy_from_slice(&self.scales);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for ib in 0..8 {
            let a = &self.scales[4 * ib..4 * ib + 4];
            let aux = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 0x7F) as usize];
                for h in 0..2 {
                    let j = 8 * ib + 2 * l + h;
                    let at = 4 * j;
                    put4(
                        &mut out[at..at + 4],
                        db,
                        IQ3XXS_GRID[self.qs[j] as usize],
                        signs,
                        4 * h,
                    );
                }
            }
        }
    }
}

/// IQ3_S: 110 bytes per 256 weights = 3.4375 bits per weight. Byte layout
/// (ggml `block_iq3_s`): `d: f16`, `qs[64]` (low 8 bits of the 9-bit grid
/// index per 4 weights), `qh[8]` (bit `b` of byte `k` is the top bit of
/// index `8 k + b`), `signs[32]` (one bit per weight), `scales[4]` (nibble
/// `h` of byte `k` scales weights `64 k + 32 h..+32`: `db = d * (1 + 2 s)`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ3S {
    pub d: f16,
    pub qs: [u8; 64],
    pub qh: [u8; 8],
    pub signs: [u8; 32],
    pub scales: [u8; 4],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);

impl BlockIQ3S {
    pub const SIZE: usize = 110;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ3S {
        BlockIQ3S {
            d: f16_at(b, 0),
            qs: array(&b[2..66]),
            qh: array(&b[66..74]),
            signs: array(&b[74..106]),
            scales: array(&b[106..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..66].copy_from_slice(&self.qs);
        b[66..74].copy_from_slice(&self.qh);
        b[74..106].copy_from_slice(&self.signs);
        b[106..].copy_from_slice(&self.scales);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for j in 0..64 {
            let ib = j / 8;
            let s = (self.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let db = d * (1 + 2 * s) as f32;
            let hi = ((self.qh[j / 8] >> (j % 8)) & 1) as usize;
            let g = IQ3S_GRID[self.qs[j] as usize | hi << 8];
            let at = 4 * j;
            put4(&mut out[at..at + 4], db, g, self.signs[j / 2], 4 * (j % 2));
        }
    }
}

impl BlockIQ3S {
    /// The same values as a Q6_K block, exactly: IQ3_S's weight `(d * (1 +
    /// 2 s)) * grid * sign` is Q6_K's `(d * scale) * (q - 32)` with the
    /// same f16 `d`, `scale = 1 + 2 s` (<= 31) for both 16-weight halves
    /// of each 32-weight group, and `q - 32 = grid * sign` (odd grid
    /// values 1..=15): each f32 product is exact, so the bits are gguf-py's.
    pub fn to_q6_k(&self) -> BlockQ6K {
        let scales = std::array::from_fn(|k| {
            let ib = k / 2;
            (1 + 2 * ((self.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F)) as i8
        });
        BlockQ6K::from_codes(self.d, scales, |e| {
            let j = e / 4;
            let hi = ((self.qh[j / 8] >> (j % 8)) & 1) as usize;
            let g = ((IQ3S_GRID[self.qs[j] as usize | hi << 8] >> (8 * (e % 4))) & 0xFF) as i8;
            if (self.signs[j / 2] >> (4 * (j % 2) + e % 4)) & 1 == 0 {
                g
            } else {
                -g
            }
        })
    }
}

impl BlockIQ3XXS {
    /// The blocks of `Q6KScaled { shift: 1 }` with these values exactly:
    /// `(d * (0.5 + s) * 0.5) * grid * sign` is half of `(d * (2 s + 1)) *
    /// (grid / 2 * sign)`, every product exact.
    pub fn to_q6_k(&self) -> BlockQ6K {
        let aux = |ib: usize| {
            let a = &self.scales[4 * ib..4 * ib + 4];
            u32::from_le_bytes([a[0], a[1], a[2], a[3]])
        };
        let scales = std::array::from_fn(|k| (2 * (aux(k / 2) >> 28) + 1) as i8);
        BlockQ6K::from_codes(self.d, scales, |e| {
            let (j, i) = (e / 4, e % 4);
            let (ib, l, h) = (j / 8, (j % 8) / 2, j % 2);
            let signs = KSIGNS_IQ2XS[((aux(ib) >> (7 * l)) & 0x7F) as usize];
            let g = ((IQ3XXS_GRID[self.qs[j] as usize] >> (8 * i)) & 0xFF) as u8;
            let half = (g / 2) as i8;
            if (signs >> (4 * h + i)) & 1 == 0 {
                half
            } else {
                -half
            }
        })
    }
}

/// Rewrites whole IQ3_XXS blocks as Q6_K blocks of twice their values (210
/// bytes per 98; run as `Q6KScaled { shift: 1 }`).
pub fn repack_iq3_xxs_to_q6_k(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ3_XXS", blocks, out, |b: &[u8; BlockIQ3XXS::SIZE]| {
        BlockIQ3XXS::from_bytes(b).to_q6_k().to_bytes()
    })
}

/// Rewrites whole IQ3_S blocks as Q6_K blocks (210 bytes per 110), value
/// for value (`BlockIQ3S::to_q6_k`).
pub fn repack_iq3_s_to_q6_k(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ3_S", blocks, out, |b: &[u8; BlockIQ3S::SIZE]| {
        BlockIQ3S::from_bytes(b).to_q6_k().to_bytes()
    })
}

/// Dequantizes whole IQ3_XXS blocks into `out` (256 values per 98 bytes).
pub fn dequantize_row_iq3_xxs(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ3_XXS", blocks, out, |b, o| {
        BlockIQ3XXS::from_bytes(b).dequantize(o)
    })
}

/// Dequantizes whole IQ3_S blocks into `out` (256 values per 110 bytes).
pub fn dequantize_row_iq3_s(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ3_S", blocks, out, |b, o| {
        BlockIQ3S::from_bytes(b).dequantize(o)
    })
}
