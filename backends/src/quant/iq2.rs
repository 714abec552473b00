//! IQ2_XXS, IQ2_XS and IQ2_S: 2-bit "i-quants", read from GGUF files and
//! run as Q8_KS (`q8_ks`, see `import`). Eight weights at a time are one
//! entry of a lookup grid (`iq_grids`, generated from gguf-py's tables) of
//! magnitudes 8, 25 or 43, each with its own sign; a 4-bit scale per 16
//! or 32 weights makes `db = d * (0.5 + s) * 0.25`, and a weight is
//! `(db * grid) * sign`, in f32 in that order, as gguf-py computes it.
//!
//! Every weight is exactly `(d * (2 s + 1)) * (grid * sign) / 8`: the f32
//! products round nothing (an f16 times 5 bits times 6 bits). No Q8_0 or
//! Q6_K block holds that: `(2 s + 1) * grid` reaches 31 * 43 = 1333, past
//! Q8_0's codes, and folding `2 s + 1` into the scale leaves `d * (2 s +
//! 1) / 8` of up to 16 significant bits, which an f16 (11) does not hold,
//! while `grid * sign` passes Q6_K's 6-bit codes. Q8_KS keeps `d`, takes
//! `2 s + 1` as its i8 scale per 16 weights and `grid * sign` as its
//! 8-bit code, and its kernels scale the products by `2^-3`
//! (`QuantType::Q8KS { shift: 3 }`), so its values are these bit for bit.

use half::f16;

use super::import::map_blocks;
use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS_IQ2XS};
use super::q8_ks::BlockQ8KS;
use super::{block_count, f16_at, QK_K};

/// `f` over whole blocks of `N` bytes, 256 values each; an error (never a
/// panic) when the lengths are not whole, matching blocks.
pub(crate) fn rows<const N: usize>(
    name: &str,
    blocks: &[u8],
    out: &mut [f32],
    f: impl Fn(&[u8; N], &mut [f32; QK_K]),
) -> Result<(), String> {
    block_count(name, QK_K, N, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<N>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        f(b, o);
    }
    Ok(())
}

pub(crate) fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

/// Value `i` (0..8) of grid entry `g`, as f32.
#[inline]
pub(crate) fn grid8(g: u64, i: usize) -> f32 {
    ((g >> (8 * i)) & 0xFF) as u8 as f32
}

/// +1 or -1 for bit `i` of `signs`.
#[inline]
pub(crate) fn sign(signs: u8, i: usize) -> f32 {
    if (signs >> i) & 1 == 0 {
        1.0
    } else {
        -1.0
    }
}

/// `d * (0.5 + s) * 0.25` in f32, left to right (gguf-py's `db`).
#[inline]
fn db(d: f32, s: u32) -> f32 {
    d * (0.5 + s as f32) * 0.25
}

/// Eight weights: `(db * grid) * sign`.
#[inline]
fn put8(out: &mut [f32], db: f32, g: u64, signs: u8) {
    for (i, o) in out.iter_mut().enumerate().take(8) {
        *o = db * grid8(g, i) * sign(signs, i);
    }
}

/// IQ2_XXS: 66 bytes per 256 weights = 2.0625 bits per weight. Byte layout
/// (ggml `block_iq2_xxs`): `d: f16`, then per 32 weights two LE u32s:
/// `aux0` (four 8-bit grid indices, 8 weights each) and `aux1` (four 7-bit
/// sign indices into `KSIGNS_IQ2XS` at bits `7l`, the scale in bits 28..32).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ2XXS {
    pub d: f16,
    pub qs: [u8; 64],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);

impl BlockIQ2XXS {
    pub const SIZE: usize = 66;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ2XXS {
        BlockIQ2XXS {
            d: f16_at(b, 0),
            qs: array(&b[2..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..].copy_from_slice(&self.qs);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for ib in 0..8 {
            let q = &self.qs[8 * ib..8 * ib + 8];
            let aux1 = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
            let dl = db(d, aux1 >> 28);
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 0x7F) as usize];
                let o = &mut out[32 * ib + 8 * l..32 * ib + 8 * l + 8];
                put8(o, dl, IQ2XXS_GRID[q[l] as usize], signs);
            }
        }
    }
}

/// IQ2_XS: 74 bytes per 256 weights = 2.3125 bits per weight. Byte layout
/// (ggml `block_iq2_xs`): `d: f16`, `qs: [u16; 32]` LE (per 8 weights: a
/// 9-bit grid index, a 7-bit sign index above it), `scales[8]` (nibble `h`
/// of byte `k` scales weights `32 k + 16 h..+16`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ2XS {
    pub d: f16,
    pub qs: [u8; 64],
    pub scales: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);

impl BlockIQ2XS {
    pub const SIZE: usize = 74;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ2XS {
        BlockIQ2XS {
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
        for j in 0..32 {
            let q = u16::from_le_bytes([self.qs[2 * j], self.qs[2 * j + 1]]);
            let s = (self.scales[j / 4] >> (4 * ((j / 2) % 2))) & 0x0F;
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            let g = IQ2XS_GRID[(q & 511) as usize];
            put8(&mut out[8 * j..8 * j + 8], db(d, s as u32), g, signs);
        }
    }
}

/// IQ2_S: 82 bytes per 256 weights = 2.5625 bits per weight. Byte layout
/// (ggml `block_iq2_s`): `d: f16`, `qs[32]` (low 8 bits of the 10-bit grid
/// index per 8 weights), `signs[32]` (one bit per weight), `qh[8]` (bits
/// `2l..2l+2` of byte `k` are the top bits of index `4 k + l`), `scales[8]`
/// (as IQ2_XS).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIQ2S {
    pub d: f16,
    pub qs: [u8; 32],
    pub signs: [u8; 32],
    pub qh: [u8; 8],
    pub scales: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);

impl BlockIQ2S {
    pub const SIZE: usize = 82;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockIQ2S {
        BlockIQ2S {
            d: f16_at(b, 0),
            qs: array(&b[2..34]),
            signs: array(&b[34..66]),
            qh: array(&b[66..74]),
            scales: array(&b[74..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..34].copy_from_slice(&self.qs);
        b[34..66].copy_from_slice(&self.signs);
        b[66..74].copy_from_slice(&self.qh);
        b[74..].copy_from_slice(&self.scales);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for j in 0..32 {
            let hi = ((self.qh[j / 4] >> (2 * (j % 4))) & 3) as usize;
            let g = IQ2S_GRID[self.qs[j] as usize | hi << 8];
            let s = (self.scales[j / 4] >> (4 * ((j / 2) % 2))) & 0x0F;
            put8(
                &mut out[8 * j..8 * j + 8],
                db(d, s as u32),
                g,
                self.signs[j],
            );
        }
    }
}

/// Grid value `i` of entry `g` times sign bit `i` of `signs`, as a code.
#[inline]
fn code8(g: u64, signs: u8, i: usize) -> i8 {
    let v = ((g >> (8 * i)) & 0xFF) as i8;
    if (signs >> i) & 1 == 0 {
        v
    } else {
        -v
    }
}

/// The odd scale `2 s + 1` of 16-weight group `k` of an IQ2_XS / IQ2_S
/// block (`s`: nibble `k % 2` of `scales[k / 2]`).
#[inline]
fn odd_scale_per16(scales: &[u8; 8], k: usize) -> i8 {
    (2 * ((scales[k / 2] >> (4 * (k % 2))) & 0x0F) + 1) as i8
}

impl BlockIQ2XXS {
    /// The `Q8KS { shift: 3 }` block with these values exactly: the same
    /// `d`, scale `2 s + 1` for both halves of each 32 weights, code
    /// `grid * sign`.
    pub fn to_q8_ks(&self) -> BlockQ8KS {
        let aux1 = |ib: usize| {
            let q = &self.qs[8 * ib + 4..8 * ib + 8];
            u32::from_le_bytes([q[0], q[1], q[2], q[3]])
        };
        let scales = std::array::from_fn(|k| (2 * (aux1(k / 2) >> 28) + 1) as i8);
        BlockQ8KS::from_codes(self.d, scales, |e| {
            let (ib, l, i) = (e / 32, (e % 32) / 8, e % 8);
            let signs = KSIGNS_IQ2XS[((aux1(ib) >> (7 * l)) & 0x7F) as usize];
            code8(IQ2XXS_GRID[self.qs[8 * ib + l] as usize], signs, i)
        })
    }
}

impl BlockIQ2XS {
    /// The `Q8KS { shift: 3 }` block with these values exactly.
    pub fn to_q8_ks(&self) -> BlockQ8KS {
        let scales = std::array::from_fn(|k| odd_scale_per16(&self.scales, k));
        BlockQ8KS::from_codes(self.d, scales, |e| {
            let j = e / 8;
            let q = u16::from_le_bytes([self.qs[2 * j], self.qs[2 * j + 1]]);
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            code8(IQ2XS_GRID[(q & 511) as usize], signs, e % 8)
        })
    }
}

impl BlockIQ2S {
    /// The `Q8KS { shift: 3 }` block with these values exactly.
    pub fn to_q8_ks(&self) -> BlockQ8KS {
        let scales = std::array::from_fn(|k| odd_scale_per16(&self.scales, k));
        BlockQ8KS::from_codes(self.d, scales, |e| {
            let j = e / 8;
            let hi = ((self.qh[j / 4] >> (2 * (j % 4))) & 3) as usize;
            code8(
                IQ2S_GRID[self.qs[j] as usize | hi << 8],
                self.signs[j],
                e % 8,
            )
        })
    }
}

/// Rewrites whole IQ2_XXS blocks as Q8_KS blocks of 8 times their values
/// (274 bytes per 66; run as `Q8KS { shift: 3 }`).
pub fn repack_iq2_xxs_to_q8_ks(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ2_XXS", blocks, out, |b: &[u8; BlockIQ2XXS::SIZE]| {
        BlockIQ2XXS::from_bytes(b).to_q8_ks().to_bytes()
    })
}

/// As `repack_iq2_xxs_to_q8_ks` for IQ2_XS (274 bytes per 74).
pub fn repack_iq2_xs_to_q8_ks(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ2_XS", blocks, out, |b: &[u8; BlockIQ2XS::SIZE]| {
        BlockIQ2XS::from_bytes(b).to_q8_ks().to_bytes()
    })
}

/// As `repack_iq2_xxs_to_q8_ks` for IQ2_S (274 bytes per 82).
pub fn repack_iq2_s_to_q8_ks(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("IQ2_S", blocks, out, |b: &[u8; BlockIQ2S::SIZE]| {
        BlockIQ2S::from_bytes(b).to_q8_ks().to_bytes()
    })
}

/// Dequantizes whole IQ2_XXS blocks into `out` (256 values per 66 bytes).
pub fn dequantize_row_iq2_xxs(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ2_XXS", blocks, out, |b, o| {
        BlockIQ2XXS::from_bytes(b).dequantize(o)
    })
}

/// Dequantizes whole IQ2_XS blocks into `out` (256 values per 74 bytes).
pub fn dequantize_row_iq2_xs(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ2_XS", blocks, out, |b, o| {
        BlockIQ2XS::from_bytes(b).dequantize(o)
    })
}

/// Dequantizes whole IQ2_S blocks into `out` (256 values per 82 bytes).
pub fn dequantize_row_iq2_s(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("IQ2_S", blocks, out, |b, o| {
        BlockIQ2S::from_bytes(b).dequantize(o)
    })
}
