//! TQ1_0 and TQ2_0: ternary weights (BitNet b1.58 style), read from GGUF
//! files. Every weight is
//! `d * t` with one f16 `d` per 256 values and `t` in {-1, 0, 1} (TQ2_0's
//! 2-bit code 3 stands for 2, which no quantizer writes but a file may
//! hold; the twin and the repack keep it).
//!
//! TQ2_0 computes in its own blocks (`QuantType::TQ2_0`, the kernels in
//! `cpu::qlinear::k_quants`: `d * da * (sum(code * a) - sum(a))`); TQ1_0
//! repacks into it exactly (the same `d`, `t + 1` as the code: gguf-py's
//! `d * t` bit for bit, a zero keeping `d`'s sign as there). Both used to
//! become Q8_0 (8.5 bits a weight; tg128 0.70x llama.cpp's), then Q3_K
//! (3.44 bits: Q3_K's kernels, which do 16 sub-block scales and a third
//! code bit these types do not have); TQ2_0 is 2.06.

use half::f16;

use super::import::map_blocks;
use super::{block_count, f16_at, BlockQ8_0, QK, QK_K};

/// TQ1_0: five ternary digits per byte (base 3, most significant first,
/// scaled to 0..=255 so that digit `n` is `((q * 3^n mod 256) * 3) >> 8`),
/// four per byte in `qh`. 54 bytes per 256 weights = 1.6875 bits per
/// weight. Byte layout (ggml `block_tq1_0`): `qs[48]`, `qh[4]`, `d: f16`.
/// Weight order: `qs[0..32]` give weights `32 n + m` (digit `n` of byte
/// `m`), `qs[32..48]` weights `160 + 16 n + m`, `qh` weights `240 + 4 n + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockTQ1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);

/// TQ2_0: 2-bit codes `t + 1`. 66 bytes per 256 weights = 2.0625 bits per
/// weight. Byte layout (ggml `block_tq2_0`): `qs[64]`, `d: f16`. Weight
/// `128 j + 32 l + m` is bits `2l..2l+2` of `qs[32 j + m]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockTQ2_0 {
    pub qs: [u8; QK_K / 4],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Digit `n` of a TQ1_0 byte, -1..=1 (gguf-py: u8 product, wrapping).
fn trit(q: u8, n: usize) -> i8 {
    let x = q.wrapping_mul(POW3[n]) as u16;
    ((x * 3) >> 8) as i8 - 1
}

/// `d * t` for the 256 ternary values `t`, as gguf-py computes it.
fn scale(d: f16, t: &[i8; QK_K], out: &mut [f32; QK_K]) {
    let d = d.to_f32();
    for (o, &t) in out.iter_mut().zip(t) {
        *o = d * t as f32;
    }
}

/// The 256 ternary values as one TQ2_0 block of the same `d` (codes
/// `t + 1`; a 2 from a TQ2_0 code 3 stays 3).
fn to_tq2_0(d: f16, t: &[i8; QK_K]) -> [u8; BlockTQ2_0::SIZE] {
    let mut qs = [0u8; QK_K / 4];
    for (e, &t) in t.iter().enumerate() {
        let (j, l, m) = (e / 128, (e % 128) / 32, e % 32);
        qs[32 * j + m] |= ((t + 1) as u8 & 3) << (2 * l);
    }
    BlockTQ2_0 { qs, d }.to_bytes()
}

impl BlockTQ1_0 {
    pub const SIZE: usize = 54;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockTQ1_0 {
        let mut qs = [0u8; 48];
        qs.copy_from_slice(&b[..48]);
        let mut qh = [0u8; 4];
        qh.copy_from_slice(&b[48..52]);
        BlockTQ1_0 {
            qs,
            qh,
            d: f16_at(b, 52),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..48].copy_from_slice(&self.qs);
        b[48..52].copy_from_slice(&self.qh);
        b[52..].copy_from_slice(&self.d.to_le_bytes());
        b
    }

    /// The 256 ternary values, in weight order.
    pub fn trits(&self) -> [i8; QK_K] {
        let mut t = [0i8; QK_K];
        for n in 0..5 {
            for m in 0..32 {
                t[32 * n + m] = trit(self.qs[m], n);
            }
            for m in 0..16 {
                t[160 + 16 * n + m] = trit(self.qs[32 + m], n);
            }
        }
        for n in 0..4 {
            for m in 0..4 {
                t[240 + 4 * n + m] = trit(self.qh[m], n);
            }
        }
        t
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        scale(self.d, &self.trits(), out);
    }
}

impl BlockTQ2_0 {
    pub const SIZE: usize = 66;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockTQ2_0 {
        let mut qs = [0u8; QK_K / 4];
        qs.copy_from_slice(&b[..64]);
        BlockTQ2_0 {
            qs,
            d: f16_at(b, 64),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..64].copy_from_slice(&self.qs);
        b[64..].copy_from_slice(&self.d.to_le_bytes());
        b
    }

    /// The 256 values `code - 1` (-1..=2), in weight order.
    pub fn trits(&self) -> [i8; QK_K] {
        let mut t = [0i8; QK_K];
        for j in 0..2 {
            for l in 0..4 {
                for m in 0..32 {
                    t[128 * j + 32 * l + m] = ((self.qs[32 * j + m] >> (2 * l)) & 3) as i8 - 1;
                }
            }
        }
        t
    }

    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        scale(self.d, &self.trits(), out);
    }
}

/// Dequantizes whole TQ1_0 blocks into `out` (256 values per 54 bytes).
pub fn dequantize_row_tq1_0(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("TQ1_0", QK_K, BlockTQ1_0::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockTQ1_0::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockTQ1_0::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Dequantizes whole TQ2_0 blocks into `out` (256 values per 66 bytes).
pub fn dequantize_row_tq2_0(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    block_count("TQ2_0", QK_K, BlockTQ2_0::SIZE, blocks.len(), out.len())?;
    let (blocks, _) = blocks.as_chunks::<{ BlockTQ2_0::SIZE }>();
    let (outs, _) = out.as_chunks_mut::<QK_K>();
    for (b, o) in blocks.iter().zip(outs) {
        BlockTQ2_0::from_bytes(b).dequantize(o);
    }
    Ok(())
}

/// Rewrites whole TQ1_0 blocks as TQ2_0 blocks (66 bytes per 54), value
/// for value (see the module documentation).
pub fn repack_tq1_0_to_tq2_0(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    map_blocks("TQ1_0", blocks, out, |b: &[u8; BlockTQ1_0::SIZE]| {
        let b = BlockTQ1_0::from_bytes(b);
        to_tq2_0(b.d, &b.trits())
    })
}

/// Rewrites whole TQ2_0 blocks as Q8_0 blocks (8 of 34 bytes per 66: the
/// same `d`, `code - 1` as the i8 code), value for value: how OpenCL,
/// which has no TQ2_0 kernel, keeps them.
pub fn repack_tq2_0_to_q8_0(blocks: &[u8], out: &mut [u8]) -> Result<(), String> {
    const OUT: usize = QK_K / QK * BlockQ8_0::SIZE;
    map_blocks("TQ2_0", blocks, out, |b: &[u8; BlockTQ2_0::SIZE]| {
        let b = BlockTQ2_0::from_bytes(b);
        let t = b.trits();
        let mut o = [0u8; OUT];
        for (q, t) in o.chunks_exact_mut(BlockQ8_0::SIZE).zip(t.chunks_exact(QK)) {
            q[..2].copy_from_slice(&b.d.to_le_bytes());
            for (c, &v) in q[2..].iter_mut().zip(t) {
                *c = v as u8;
            }
        }
        o
    })
}
