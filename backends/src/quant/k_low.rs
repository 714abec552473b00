//! Q2_K and Q3_K: the 2- and 3-bit K-quants, read from GGUF files (mllm
//! computes them as other types, see `import`). Both cut a 256-weight
//! super-block into sixteen 16-weight sub-blocks with quantized scales.
//!
//! Both spread their 2-bit fields the same way: the 256 weights are two
//! halves of 128; in half `h`, weight `32 s + l` (s < 4, l < 32) is bits
//! `2s..2s+2` of `qs[32 h + l]`.

use half::f16;

use super::import::map_blocks;
use super::{block_count, f16_at, BlockQ6K, QK_K};

/// Q2_K: `w = (d * (sc & 15)) * q - dmin * (sc >> 4)`, a 2-bit `q` and a
/// byte `sc` per sub-block holding a 4-bit scale and a 4-bit min. 84 bytes
/// per 256 weights = 2.625 bits per weight. Byte layout (ggml
/// `block_q2_K`): `scales[16]`, `qs[64]`, then `d: f16`, `dmin: f16`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// Q3_K: `w = (d * (sc - 32)) * q`, with `q` = the 2 low bits from `qs`
/// minus 4 unless the weight's bit in `hmask` is set (so -4..=3), and a
/// 6-bit `sc` per sub-block. 110 bytes per 256 weights = 3.4375 bits per
/// weight. Byte layout (ggml `block_q3_K`): `hmask[32]` (bit `g` of
/// `hmask[l]` belongs to weight `32 g + l`), `qs[64]`, `scales[12]` (the
/// low 4 bits of scale `i` are nibble `i / 8` of byte `i % 8`, its top 2
/// bits are bits `2 (i / 4)..` of byte `8 + i % 4`), then `d: f16`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

/// The 2-bit field of weight `e` (0..256) in a K-quant `qs` of 64 bytes.
#[inline]
fn two_bits(qs: &[u8; QK_K / 4], e: usize) -> u8 {
    let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
    (qs[32 * h + l] >> (2 * s)) & 3
}

impl BlockQ2K {
    pub const SIZE: usize = 84;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ2K {
        BlockQ2K {
            scales: array(&b[..16]),
            qs: array(&b[16..80]),
            d: f16_at(b, 80),
            dmin: f16_at(b, 82),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..16].copy_from_slice(&self.scales);
        b[16..80].copy_from_slice(&self.qs);
        b[80..82].copy_from_slice(&self.d.to_le_bytes());
        b[82..].copy_from_slice(&self.dmin.to_le_bytes());
        b
    }

    /// `dl * q - ml` in f32 with `dl = d * scale`, `ml = dmin * min` per
    /// sub-block, unfused, in gguf-py's order.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for (e, o) in out.iter_mut().enumerate() {
            let sc = self.scales[e / 16];
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *o = dl * two_bits(&self.qs, e) as f32 - ml;
        }
    }
}

impl BlockQ3K {
    pub const SIZE: usize = 110;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ3K {
        BlockQ3K {
            hmask: array(&b[..32]),
            qs: array(&b[32..96]),
            scales: array(&b[96..108]),
            d: f16_at(b, 108),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..32].copy_from_slice(&self.hmask);
        b[32..96].copy_from_slice(&self.qs);
        b[96..108].copy_from_slice(&self.scales);
        b[108..].copy_from_slice(&self.d.to_le_bytes());
        b
    }

    /// The scale `sc - 32` (-32..=31) of sub-block `i` (0..16).
    pub fn scale(&self, i: usize) -> i8 {
        let lo = (self.scales[i % 8] >> (4 * (i / 8))) & 0x0F;
        let hi = (self.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
        (lo | (hi << 4)) as i8 - 32
    }

    /// The block of `d`, the sixteen 16-weight `scales` (-32..=31) and the
    /// codes `code(e)` (-4..=3) of weights `e` (0..256), the inverse of
    /// `scale` and `code`: each weight is then `(d * scales[e / 16]) *
    /// code(e)` (`dequantize`). How TQ1_0 and TQ2_0 are repacked.
    pub fn from_codes(d: f16, scales: [i8; QK_K / 16], code: impl Fn(usize) -> i8) -> BlockQ3K {
        let mut out = BlockQ3K {
            hmask: [0; QK_K / 8],
            qs: [0; QK_K / 4],
            scales: [0; 12],
            d,
        };
        for (i, &s) in scales.iter().enumerate() {
            debug_assert!((-32..32).contains(&s), "Q3_K scale {s}");
            let s = (s as i16 + 32) as u8 & 0x3F;
            out.scales[i % 8] |= (s & 0x0F) << (4 * (i / 8));
            out.scales[8 + i % 4] |= (s >> 4) << (2 * (i / 4));
        }
        for e in 0..QK_K {
            let c = code(e);
            debug_assert!((-4..4).contains(&c), "Q3_K code {c}");
            // Codes 0..=3 set their high bit; -4..=-1 are 4 below theirs.
            let (high, two) = if c >= 0 {
                (1, c as u8)
            } else {
                (0, (c + 4) as u8)
            };
            out.hmask[e % 32] |= high << (e / 32);
            let (h, sub, l) = (e / 128, (e % 128) / 32, e % 32);
            out.qs[32 * h + l] |= (two & 3) << (2 * sub);
        }
        out
    }

    /// The code (-4..=3) of weight `e` (0..256).
    pub fn code(&self, e: usize) -> i8 {
        let high = (self.hmask[e % 32] >> (e / 32)) & 1;
        two_bits(&self.qs, e) as i8 - if high == 0 { 4 } else { 0 }
    }

    /// `(d * (sc - 32)) * q` in f32, the sub-block scale first, as gguf-py
    /// computes it.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            let dl = d * self.scale(e / 16) as f32;
            *o = dl * self.code(e) as f32;
        }
    }

    /// The same values as a Q6_K block, exactly. Q6_K is
    /// `(d * scale) * (q - 32)` over the same sixteen 16-weight sub-blocks,
    /// with an i8 `scale` and a 6-bit `q`: the same f16 `d`, `scale = sc -
    /// 32` and `q = code + 32` (28..=35) give the same two f32 products in
    /// the same order (`BlockQ6K::dequantize`), so the same bits.
    pub fn to_q6_k(&self) -> BlockQ6K {
        let scales = std::array::from_fn(|i| self.scale(i));
        BlockQ6K::from_codes(self.d, scales, |e| self.code(e))
    }
}

/// Dequantizes whole Q2_K blocks into `out` (256 values per 84 bytes).
pub fn dequantize_row_q2_k(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q2_K", QK_K, BlockQ2K::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ2K::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ2K::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Dequantizes whole Q3_K blocks into `out` (256 values per 110 bytes).
pub fn dequantize_row_q3_k(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("Q3_K", QK_K, BlockQ3K::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockQ3K::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockQ3K::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Rewrites whole Q3_K blocks as Q6_K blocks (210 bytes per 110), value
/// for value (`BlockQ3K::to_q6_k`).
pub fn repack_q3_k_to_q6_k(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("Q3_K", blocks, out, |b: &[u8; BlockQ3K::SIZE]| {
        BlockQ3K::from_bytes(b).to_q6_k().to_bytes()
    })
}
