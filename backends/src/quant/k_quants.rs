//! K-quants: 256-weight super-blocks made of 16- or 32-weight sub-blocks
//! whose scales are themselves quantized (ggml's `block_q4_K`, `block_q5_K`,
//! `block_q6_K`). Only dequantization is here; the quantizers (ggml's
//! `make_qkx2_quants` search) come with a later change.
//!
//! Q4_K and Q5_K share the 12-byte packing of eight 6-bit scales and eight
//! 6-bit mins (`scale_min_k4`); Q6_K has sixteen plain i8 scales.

use half::f16;

use super::{block_count, f16_at, QK_K};

/// Bytes of packed 6-bit scales and mins in Q4_K/Q5_K (ggml's `K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes `q`:
/// bytes 0..4 hold scales 0..4 in their low 6 bits, bytes 4..8 mins 0..4;
/// scales/mins 4..8 keep their low 4 bits in the nibbles of bytes 8..12 and
/// their top 2 bits in the spare top bits of bytes 0..4 / 4..8.
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K: eight 32-weight sub-blocks, `w = d * sc * q - dmin * m` with 4-bit
/// `q` and 6-bit `sc`, `m`. 144 bytes per 256 weights = 4.5 bits per weight.
/// `qs` holds pairs of sub-blocks: byte `32 p + l` has weight `l` of
/// sub-block `2p` in its low nibble and of `2p + 1` in its high nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Q5_K: as Q4_K plus a fifth bit per weight: bit `i` of `qh[l]` is the
/// high bit of weight `l` of sub-block `i`. 176 bytes per 256 weights =
/// 5.5 bits per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// Q6_K: sixteen 16-weight sub-blocks, `w = d * scale * (q - 32)` with
/// 6-bit `q` and i8 `scale`. 210 bytes per 256 weights = 6.5625 bits per
/// weight. Each 128-weight half `n` uses `ql[64 n..]` and `qh[32 n..]`:
/// weights `l`, `l + 32`, `l + 64`, `l + 96` (l < 32) take their low 4 bits
/// from the low nibble of `ql[l]`, low nibble of `ql[l + 32]`, high nibble
/// of `ql[l]`, high nibble of `ql[l + 32]`, and their top 2 bits from bits
/// 0-1, 2-3, 4-5, 6-7 of `qh[l]`. Note `d` comes last in this block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

fn copy_into<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    a
}

impl BlockQ4K {
    pub const SIZE: usize = 144;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ4K {
        BlockQ4K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: copy_into(&b[4..16]),
            qs: copy_into(&b[16..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        b[4..16].copy_from_slice(&self.scales);
        b[16..].copy_from_slice(&self.qs);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for p in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * p, &self.scales);
            let (sc2, m2) = scale_min_k4(2 * p + 1, &self.scales);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            let qs = &self.qs[32 * p..32 * p + 32];
            let o = &mut out[64 * p..64 * p + 64];
            for (l, &q) in qs.iter().enumerate() {
                o[l] = d1 * (q & 0x0F) as f32 - m1;
                o[l + 32] = d2 * (q >> 4) as f32 - m2;
            }
        }
    }
}

impl BlockQ5K {
    pub const SIZE: usize = 176;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ5K {
        BlockQ5K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: copy_into(&b[4..16]),
            qh: copy_into(&b[16..48]),
            qs: copy_into(&b[48..]),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..2].copy_from_slice(&self.d.to_le_bytes());
        b[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        b[4..16].copy_from_slice(&self.scales);
        b[16..48].copy_from_slice(&self.qh);
        b[48..].copy_from_slice(&self.qs);
        b
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for p in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * p, &self.scales);
            let (sc2, m2) = scale_min_k4(2 * p + 1, &self.scales);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            let qs = &self.qs[32 * p..32 * p + 32];
            let o = &mut out[64 * p..64 * p + 64];
            for (l, (&q, &h)) in qs.iter().zip(&self.qh).enumerate() {
                let lo = (q & 0x0F) | (((h >> (2 * p)) & 1) << 4);
                let hi = (q >> 4) | (((h >> (2 * p + 1)) & 1) << 4);
                o[l] = d1 * lo as f32 - m1;
                o[l + 32] = d2 * hi as f32 - m2;
            }
        }
    }
}

impl BlockQ6K {
    pub const SIZE: usize = 210;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ6K {
        let mut scales = [0i8; QK_K / 16];
        for (s, &byte) in scales.iter_mut().zip(&b[192..208]) {
            *s = byte as i8;
        }
        BlockQ6K {
            ql: copy_into(&b[..128]),
            qh: copy_into(&b[128..192]),
            scales,
            d: f16_at(b, 208),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..128].copy_from_slice(&self.ql);
        b[128..192].copy_from_slice(&self.qh);
        for (byte, &s) in b[192..208].iter_mut().zip(&self.scales) {
            *byte = s as u8;
        }
        b[208..].copy_from_slice(&self.d.to_le_bytes());
        b
    }

    /// The block of `d`, the sixteen 16-weight `scales` and the codes
    /// `code(e)` (-32..=31) of weights `e` (0..256): each weight is then
    /// `(d * scales[e / 16]) * code(e)` (`dequantize`). How lossless
    /// repacks (Q3_K, IQ3_S) write Q6_K.
    pub fn from_codes(d: f16, scales: [i8; QK_K / 16], code: impl Fn(usize) -> i8) -> BlockQ6K {
        let mut out = BlockQ6K {
            ql: [0; QK_K / 2],
            qh: [0; QK_K / 4],
            scales,
            d,
        };
        // In half `n`, weight `32 c + l` keeps its low nibble in
        // `ql[64 n + l + 32 (c % 2)]` (nibble `c / 2`) and its top 2 bits
        // in bits `2c..` of `qh[32 n + l]`.
        for e in 0..QK_K {
            let c6 = code(e);
            debug_assert!((-32..32).contains(&c6), "Q6_K code {c6}");
            let q = (c6 as i16 + 32) as u8 & 0x3F;
            let (n, c, l) = (e / 128, (e % 128) / 32, e % 32);
            out.ql[64 * n + l + 32 * (c % 2)] |= (q & 0x0F) << (4 * (c / 2));
            out.qh[32 * n + l] |= (q >> 4) << (2 * c);
        }
        out
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for n in 0..2 {
            let ql = &self.ql[64 * n..64 * n + 64];
            let qh = &self.qh[32 * n..32 * n + 32];
            // Sub-block k (16 weights) of this half uses scale 8 n + k.
            let sc = |k: usize| d * self.scales[8 * n + k] as f32;
            let o = &mut out[128 * n..128 * n + 128];
            for l in 0..32 {
                let h = qh[l];
                let q = [
                    (ql[l] & 0x0F) | ((h & 3) << 4),
                    (ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((h >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((h >> 6) & 3) << 4),
                ];
                for (c, &q) in q.iter().enumerate() {
                    let i = l + 32 * c;
                    o[i] = sc(i / 16) * (q as i32 - 32) as f32;
                }
            }
        }
    }
}

macro_rules! row_fn {
    ($name:ident, $block:ident, $label:literal) => {
        #[doc = concat!("Dequantizes whole ", $label, " blocks into `out` (256 values per block).")]
        pub fn $name(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
            block_count($label, QK_K, $block::SIZE, blocks.len(), out.len())?;
            let (blocks, _) = blocks.as_chunks::<{ $block::SIZE }>();
            let (outs, _) = out.as_chunks_mut::<QK_K>();
            for (b, o) in blocks.iter().zip(outs) {
                $block::from_bytes(b).dequantize(o);
            }
            Ok(())
        }
    };
}

row_fn!(dequantize_row_q4_k, BlockQ4K, "Q4_K");
row_fn!(dequantize_row_q5_k, BlockQ5K, "Q5_K");
row_fn!(dequantize_row_q6_k, BlockQ6K, "Q6_K");
