//! Q8_KS: mllm's own kernel type for weights whose integer codes pass
//! Q6_K's six bits. A 256-value super-block holds one code per weight
//! (-64..=63, stored plus 64 so that it is already the unsigned operand of
//! `maddubs` / `vpdpbusd`), an i8 scale per 16 weights and an f16 `d`;
//! weight `e` is `(d * scale[e / 16]) * code[e]`, times `2^-shift` for
//! `QuantType::Q8KS { shift }`. 274 bytes per 256 weights = 8.5625 bits.
//!
//! Why it exists: the IQ2 types (IQ2_XXS, IQ2_XS, IQ2_S) are exactly
//! `(d * (2 s + 1)) * (grid * sign) / 8` with grid values 8, 25 and 43:
//! codes past Q6_K's -32..=31, scales no f16 holds once `/ 8` is folded in.
//! Here the same `d`, the odd scale and `grid * sign` as the code give
//! gguf-py's f32 values bit for bit (`iq2`), and the kernels are Q6_K's
//! (`cpu::qlinear::k_quants`) with a byte load instead of the 6-bit
//! unpack and an offset of 64 instead of 32.

use half::f16;

use super::iq2::{array, rows};
use super::{f16_at, QK_K};

/// The code offset: a stored byte is the code plus this.
pub const Q8KS_OFFSET: i32 = 64;

/// Byte layout: `qs[256]` (codes plus 64, element order), `scales[16]`
/// (i8, one per 16 weights), `d: f16` last, as Q6_K keeps its `d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8KS {
    pub qs: [u8; QK_K],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ8KS>() == 274);

impl BlockQ8KS {
    pub const SIZE: usize = 274;

    /// A block of `d`, the sixteen `scales` and `code(e)` (-64..=63) for
    /// weight `e`.
    pub fn from_codes(d: f16, scales: [i8; QK_K / 16], code: impl Fn(usize) -> i8) -> BlockQ8KS {
        BlockQ8KS {
            qs: std::array::from_fn(|e| {
                let c = code(e) as i32;
                debug_assert!((-64..64).contains(&c), "Q8_KS code {c}");
                (c + Q8KS_OFFSET) as u8 & 0x7F
            }),
            scales,
            d,
        }
    }

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> BlockQ8KS {
        BlockQ8KS {
            qs: array(&b[..QK_K]),
            scales: std::array::from_fn(|k| b[QK_K + k] as i8),
            d: f16_at(b, QK_K + 16),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..QK_K].copy_from_slice(&self.qs);
        for (o, &s) in b[QK_K..QK_K + 16].iter_mut().zip(&self.scales) {
            *o = s as u8;
        }
        b[QK_K + 16..].copy_from_slice(&self.d.to_le_bytes());
        b
    }

    /// The plain values `(d * scale) * code` (the `2^-shift` is the
    /// caller's, `QuantType::value_scale`).
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            let code = self.qs[e] as i32 - Q8KS_OFFSET;
            *o = (d * self.scales[e / 16] as f32) * code as f32;
        }
    }
}

/// Dequantizes whole Q8_KS blocks into `out` (256 values per 274 bytes),
/// before any power-of-two scale.
pub fn dequantize_row_q8_ks(blocks: &[u8], out: &mut [f32]) -> Result<(), String> {
    rows("Q8_KS", blocks, out, |b, o| {
        BlockQ8KS::from_bytes(b).dequantize(o)
    })
}
