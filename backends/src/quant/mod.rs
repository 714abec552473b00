//! Quantized weight blocks, byte-compatible with ggml's (and so with GGUF
//! files): the block structs, a scalar reference dequantizer for every type,
//! reference quantizers for the 32-element types, and `QuantType`, which says
//! how big a type's blocks are. The reference kernels are the oracle that any
//! faster kernel added later must agree with bit for bit; they are checked
//! against gguf-py's numpy implementation on committed fixtures
//! (backends/tests/quant.rs, tests/fixtures/gguf/).
//!
//! Types read from GGUF files but computed as another type (TQ1_0 and
//! the IQ1..IQ3 types) are `import::ImportType`, not `QuantType`:
//! no kernel or tensor ever holds them.
//!
//! Blocks are read from raw little-endian bytes (a GGUF mapping has no
//! alignment guarantee for the f16 scales inside a block), one block at a
//! time through `Block::from_bytes`, so no `unsafe` casts are needed.

pub mod import;
pub mod iq1;
pub mod iq2;
pub mod iq3;
pub mod iq4;
// Generated (tests/fixtures/quants/make_iq_grids.py): kept as printed.
#[rustfmt::skip]
mod iq_grids;
pub mod k_low;
pub mod k_quants;
pub mod mxfp4;
pub mod packed;
pub mod q4_0;
pub mod q4_1;
pub mod q5;
pub mod q8_0;
pub mod q8_ks;
pub mod tq;
pub mod w4a16;
pub mod w8a8;

use rayon::prelude::*;

pub use k_quants::{
    dequantize_row_q4_k, dequantize_row_q5_k, dequantize_row_q6_k, BlockQ4K, BlockQ5K, BlockQ6K,
};
pub use q4_0::{dequantize_row_q4_0, quantize_row_q4_0_ref, BlockQ4_0};
pub use q4_1::{dequantize_row_q4_1, quantize_row_q4_1_ref, BlockQ4_1};
pub use q8_0::{dequantize_row_q8_0, quantize_row_q8_0_ref, BlockQ8_0};
pub use q8_ks::{dequantize_row_q8_ks, BlockQ8KS};

pub use import::ImportType;
pub use iq1::{dequantize_row_iq1_m, dequantize_row_iq1_s, BlockIQ1M, BlockIQ1S};
pub use iq2::{
    dequantize_row_iq2_s, dequantize_row_iq2_xs, dequantize_row_iq2_xxs, BlockIQ2S, BlockIQ2XS,
    BlockIQ2XXS,
};
pub use iq3::{dequantize_row_iq3_s, dequantize_row_iq3_xxs, BlockIQ3S, BlockIQ3XXS};
pub use iq4::{dequantize_row_iq4_nl, dequantize_row_iq4_xs, BlockIQ4NL, BlockIQ4XS};
pub use k_low::{dequantize_row_q2_k, dequantize_row_q3_k, BlockQ2K, BlockQ3K};
pub use mxfp4::{dequantize_row_mxfp4, BlockMXFP4};
pub use q5::{dequantize_row_q5_0, dequantize_row_q5_1, BlockQ5_0, BlockQ5_1};
pub use tq::{dequantize_row_tq1_0, dequantize_row_tq2_0, BlockTQ1_0, BlockTQ2_0};

use crate::tensor::MAX_ELEMENTS;

/// Elements per block of the 32-wide types (ggml's `QK4_0`, `QK8_0`, ...).
pub const QK: usize = 32;
/// Elements per super-block of the K-quants (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// The quantized block formats mllm can read: ggml's (named as ggml names
/// them) and mllm's own weight-only / per-channel types.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
    /// IQ4_XS (`iq4`): 4-bit codes into a fixed non-linear table, a 6-bit
    /// scale per 32 values, 256-value super-blocks; computed with its own
    /// kernels (`cpu::qlinear::k_quants`).
    IQ4_XS,
    /// Q2_K (`k_low`): 2-bit codes with a 4-bit scale and a 4-bit min per
    /// 16 values, 256-value super-blocks; computed with its own kernels.
    Q2_K,
    /// Q3_K (`k_low`): 3-bit codes (-4..=3) with a 6-bit scale per 16
    /// values, 256-value super-blocks; computed with its own kernels.
    Q3_K,
    /// Q5_0 (`q5`): 5-bit codes less 16 and an f16 scale per 32 values.
    Q5_0,
    /// Q5_1 (`q5`): 5-bit codes with an f16 scale and minimum per 32 values.
    Q5_1,
    /// IQ4_NL (`iq4`): 4-bit codes into IQ4_XS's non-linear table and an
    /// f16 scale per 32 values. These three compute in their own blocks
    /// with the 32-value kernels (`cpu::qlinear::block32`).
    IQ4_NL,
    /// MXFP4 (`mxfp4`, gpt-oss): 4-bit e2m1 codes and an e8m0 power-of-two
    /// scale per 32 values; computed in its own blocks as IQ4_NL is, with
    /// its table and the scale read from its byte.
    MXFP4,
    /// TQ2_0 (`tq`, ternary BitNet-style models): 2-bit codes `t + 1` and
    /// one f16 scale per 256 values, Q2_K's code layout without its
    /// scales; computed in its own blocks (`cpu::qlinear::k_quants`).
    TQ2_0,
    /// 4-bit weights in groups of `group` (32, 64 or 128) with f16 scales,
    /// f32 activations (`w4a16`).
    W4A16 {
        group: u16,
    },
    /// int8 weights with one f32 scale per row of `k`, int8 activations per
    /// token (`w8a8`). The block is the whole row.
    W8A8 {
        k: u32,
    },
    /// Q4_0 rows interleaved in groups of 16 (`packed`): made at load by
    /// the CPU backend for its 512-bit kernels, never stored in a file.
    Q4_0x16,
    /// Q4_1 rows interleaved in groups of 16 (`packed`).
    Q4_1x16,
    /// Q8_0 rows interleaved in groups of 16 (`packed`).
    Q8_0x16,
    /// IQ4_NL rows interleaved in groups of 16 (`packed`).
    IQ4_NLx16,
    /// Q5_0 rows interleaved in groups of 16 (`packed`).
    Q5_0x16,
    /// Q5_1 rows interleaved in groups of 16 (`packed`).
    Q5_1x16,
    /// MXFP4 rows interleaved in groups of 16 (`packed`).
    MXFP4x16,
    /// Q6_K blocks whose values are `2^-shift` times what their bytes say
    /// (`shift` 1..=3): how IQ3_XXS (`d / 2`) and IQ1_S / IQ1_M (`d / 8`)
    /// run on Q6_K's kernels exactly (`import`), where an f16 `d / 2` or
    /// `d / 8` would round a small `d`. The kernels compute the plain Q6_K
    /// product and scale it by the power of two, which is exact: every
    /// float the kernels make is then the power of two times the plain one.
    Q6KScaled {
        shift: u8,
    },
    /// mllm's 8-bit-code K-quant (`q8_ks`): Q6_K's layout of an i8 scale
    /// per 16 values and an f16 `d` per 256, with one byte per code
    /// (-64..=63), values times `2^-shift` (`shift` 0..=3) as `Q6KScaled`'s.
    /// How the IQ2 types (`d / 8` steps, grid values up to 43) run exactly
    /// on Q6_K's kernels with a plain byte load (`import`).
    Q8KS {
        shift: u8,
    },
}

/// Groups W4A16 supports.
pub const W4A16_GROUPS: [usize; 3] = [32, 64, 128];
/// Type ids of mllm's own types in a .mllm tensor table: outside ggml's
/// numbering (GGUF files never hold them). W4A16 adds its group size.
pub const W4A16_ID_BASE: u32 = 1000;
pub const W8A8_ID: u32 = 1200;
/// Ids of the in-memory packed layouts (reported, never read from a file).
pub const PACKED_ID_BASE: u32 = 1300;
/// `Q6KScaled` in a .mllm table: this plus its shift.
pub const Q6K_SCALED_ID_BASE: u32 = 1400;
/// The shifts `Q6KScaled` takes.
pub const Q6K_SHIFTS: std::ops::RangeInclusive<u8> = 1..=3;
/// `Q8KS` in a .mllm table: this plus its shift.
pub const Q8KS_ID_BASE: u32 = 1500;
/// The shifts `Q8KS` takes.
pub const Q8KS_SHIFTS: std::ops::RangeInclusive<u8> = 0..=3;

impl QuantType {
    pub const ALL: [QuantType; 14] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q8_0,
        QuantType::Q4_K,
        QuantType::Q5_K,
        QuantType::Q6_K,
        QuantType::IQ4_XS,
        QuantType::Q2_K,
        QuantType::Q3_K,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::IQ4_NL,
        QuantType::MXFP4,
        QuantType::TQ2_0,
    ];

    /// W4A16 with `group` values per scale, if the group is supported.
    pub fn w4a16(group: usize) -> Option<QuantType> {
        W4A16_GROUPS.contains(&group).then_some(QuantType::W4A16 {
            group: group as u16,
        })
    }

    /// W8A8 for rows of `k` values (`k` >= 1).
    pub fn w8a8(k: usize) -> Option<QuantType> {
        u32::try_from(k)
            .ok()
            .filter(|&k| k >= 1)
            .map(|k| QuantType::W8A8 { k })
    }

    /// Q6_K blocks whose values are `2^-shift` of the plain ones.
    pub fn q6k_scaled(shift: u8) -> Option<QuantType> {
        Q6K_SHIFTS
            .contains(&shift)
            .then_some(QuantType::Q6KScaled { shift })
    }

    /// Q8_KS blocks whose values are `2^-shift` of the plain ones.
    pub fn q8ks(shift: u8) -> Option<QuantType> {
        Q8KS_SHIFTS
            .contains(&shift)
            .then_some(QuantType::Q8KS { shift })
    }

    /// The factor `Q6KScaled` and `Q8KS` apply to their blocks' plain
    /// values (1 for every other type).
    pub fn value_scale(self) -> f32 {
        match self {
            QuantType::Q6KScaled { shift } | QuantType::Q8KS { shift } => {
                1.0 / (1u32 << shift) as f32
            }
            _ => 1.0,
        }
    }

    /// One of the in-memory interleaved layouts (`packed`): rows are not
    /// stored one after the other.
    pub fn is_packed(self) -> bool {
        matches!(
            self,
            QuantType::Q4_0x16
                | QuantType::Q4_1x16
                | QuantType::Q8_0x16
                | QuantType::IQ4_NLx16
                | QuantType::Q5_0x16
                | QuantType::Q5_1x16
                | QuantType::MXFP4x16
        )
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q8_0 => QK,
            QuantType::Q5_0 | QuantType::Q5_1 | QuantType::IQ4_NL | QuantType::MXFP4 => QK,
            QuantType::Q4_0x16 | QuantType::Q4_1x16 | QuantType::Q8_0x16 => QK,
            QuantType::IQ4_NLx16 | QuantType::MXFP4x16 | QuantType::Q5_0x16 => QK,
            QuantType::Q5_1x16 => QK,
            QuantType::Q4_K
            | QuantType::Q5_K
            | QuantType::Q6_K
            | QuantType::Q6KScaled { .. }
            | QuantType::Q8KS { .. }
            | QuantType::IQ4_XS
            | QuantType::Q2_K
            | QuantType::Q3_K
            | QuantType::TQ2_0 => QK_K,
            QuantType::W4A16 { group } => group as usize,
            QuantType::W8A8 { k } => k as usize,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_0x16 => std::mem::size_of::<BlockQ4_0>(),
            QuantType::Q4_1 | QuantType::Q4_1x16 => std::mem::size_of::<BlockQ4_1>(),
            QuantType::Q8_0 | QuantType::Q8_0x16 => std::mem::size_of::<BlockQ8_0>(),
            QuantType::Q4_K => std::mem::size_of::<BlockQ4K>(),
            QuantType::Q5_K => std::mem::size_of::<BlockQ5K>(),
            QuantType::Q6_K | QuantType::Q6KScaled { .. } => std::mem::size_of::<BlockQ6K>(),
            QuantType::Q8KS { .. } => BlockQ8KS::SIZE,
            QuantType::IQ4_XS => iq4::BlockIQ4XS::SIZE,
            QuantType::Q2_K => k_low::BlockQ2K::SIZE,
            QuantType::Q3_K => k_low::BlockQ3K::SIZE,
            QuantType::Q5_0 | QuantType::Q5_0x16 => q5::BlockQ5_0::SIZE,
            QuantType::Q5_1 | QuantType::Q5_1x16 => q5::BlockQ5_1::SIZE,
            QuantType::IQ4_NL | QuantType::IQ4_NLx16 => iq4::BlockIQ4NL::SIZE,
            QuantType::MXFP4 | QuantType::MXFP4x16 => mxfp4::BlockMXFP4::SIZE,
            QuantType::TQ2_0 => tq::BlockTQ2_0::SIZE,
            QuantType::W4A16 { group } => w4a16::group_bytes(group as usize),
            QuantType::W8A8 { k } => w8a8::row_bytes(k as usize),
        }
    }

    /// Storage cost, scales included (Q4_0: 4.5).
    pub fn bits_per_weight(self) -> f64 {
        (self.type_size() * 8) as f64 / self.block_size() as f64
    }

    /// ggml's spelling, as printed by llama.cpp tools.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "Q4_0",
            QuantType::Q4_1 => "Q4_1",
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q4_K => "Q4_K",
            QuantType::Q5_K => "Q5_K",
            QuantType::Q6_K => "Q6_K",
            QuantType::IQ4_XS => "IQ4_XS",
            QuantType::Q2_K => "Q2_K",
            QuantType::Q3_K => "Q3_K",
            QuantType::Q5_0 => "Q5_0",
            QuantType::Q5_1 => "Q5_1",
            QuantType::IQ4_NL => "IQ4_NL",
            QuantType::MXFP4 => "MXFP4",
            QuantType::TQ2_0 => "TQ2_0",
            QuantType::W4A16 { group: 32 } => "W4A16_G32",
            QuantType::W4A16 { group: 64 } => "W4A16_G64",
            QuantType::W4A16 { group: 128 } => "W4A16_G128",
            QuantType::W4A16 { .. } => "W4A16",
            QuantType::W8A8 { .. } => "W8A8",
            QuantType::Q4_0x16 => "Q4_0x16",
            QuantType::Q4_1x16 => "Q4_1x16",
            QuantType::Q8_0x16 => "Q8_0x16",
            QuantType::IQ4_NLx16 => "IQ4_NLx16",
            QuantType::MXFP4x16 => "MXFP4x16",
            QuantType::Q5_0x16 => "Q5_0x16",
            QuantType::Q5_1x16 => "Q5_1x16",
            QuantType::Q6KScaled { shift: 1 } => "Q6_K/2",
            QuantType::Q6KScaled { shift: 2 } => "Q6_K/4",
            QuantType::Q6KScaled { shift: 3 } => "Q6_K/8",
            QuantType::Q6KScaled { .. } => "Q6_K/2^s",
            QuantType::Q8KS { shift: 0 } => "Q8_KS",
            QuantType::Q8KS { shift: 1 } => "Q8_KS/2",
            QuantType::Q8KS { shift: 2 } => "Q8_KS/4",
            QuantType::Q8KS { shift: 3 } => "Q8_KS/8",
            QuantType::Q8KS { .. } => "Q8_KS/2^s",
        }
    }

    /// The `ggml_type` number GGUF files store for this type; for mllm's own
    /// types, the id a .mllm table stores (`W4A16_ID_BASE + group`,
    /// `W8A8_ID`), outside ggml's numbering.
    pub fn ggml_type_id(self) -> u32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q8_0 => 8,
            QuantType::Q4_K => 12,
            QuantType::Q5_K => 13,
            QuantType::Q6_K => 14,
            QuantType::IQ4_XS => 23,
            QuantType::Q2_K => 10,
            QuantType::Q3_K => 11,
            QuantType::Q5_0 => 6,
            QuantType::Q5_1 => 7,
            QuantType::IQ4_NL => 20,
            QuantType::MXFP4 => 39,
            QuantType::TQ2_0 => 35,
            QuantType::W4A16 { group } => W4A16_ID_BASE + group as u32,
            QuantType::W8A8 { .. } => W8A8_ID,
            QuantType::Q4_0x16 => PACKED_ID_BASE,
            QuantType::Q8_0x16 => PACKED_ID_BASE + 1,
            QuantType::Q4_1x16 => PACKED_ID_BASE + 2,
            QuantType::IQ4_NLx16 => PACKED_ID_BASE + 3,
            QuantType::MXFP4x16 => PACKED_ID_BASE + 4,
            QuantType::Q5_0x16 => PACKED_ID_BASE + 5,
            QuantType::Q5_1x16 => PACKED_ID_BASE + 6,
            QuantType::Q6KScaled { shift } => Q6K_SCALED_ID_BASE + shift as u32,
            QuantType::Q8KS { shift } => Q8KS_ID_BASE + shift as u32,
        }
    }

    /// ggml's types only (what a GGUF file may name).
    pub fn from_ggml_type_id(id: u32) -> Option<QuantType> {
        QuantType::ALL.into_iter().find(|t| t.ggml_type_id() == id)
    }

    /// Any type by its table id; W8A8 takes its row length from the
    /// tensor's innermost dimension `cols`.
    pub fn from_type_id(id: u32, cols: usize) -> Option<QuantType> {
        match id {
            W8A8_ID => QuantType::w8a8(cols),
            _ if id > Q6K_SCALED_ID_BASE && id - Q6K_SCALED_ID_BASE <= *Q6K_SHIFTS.end() as u32 => {
                QuantType::q6k_scaled((id - Q6K_SCALED_ID_BASE) as u8)
            }
            _ if id >= Q8KS_ID_BASE && id - Q8KS_ID_BASE <= *Q8KS_SHIFTS.end() as u32 => {
                QuantType::q8ks((id - Q8KS_ID_BASE) as u8)
            }
            _ if id > W4A16_ID_BASE && id < W8A8_ID => {
                QuantType::w4a16((id - W4A16_ID_BASE) as usize)
            }
            _ => QuantType::from_ggml_type_id(id),
        }
    }

    /// The 256-value super-block types (the K-quants and IQ4_XS), whose
    /// kernels take activations quantized per 256 values.
    pub fn has_super_blocks(self) -> bool {
        matches!(
            self,
            QuantType::Q2_K
                | QuantType::Q3_K
                | QuantType::Q4_K
                | QuantType::Q5_K
                | QuantType::Q6_K
                | QuantType::Q6KScaled { .. }
                | QuantType::Q8KS { .. }
                | QuantType::IQ4_XS
                | QuantType::TQ2_0
        )
    }

    /// Whether `quantize` implements this type (the K-quant quantizers live
    /// in the converter).
    pub fn can_quantize(self) -> bool {
        !self.has_super_blocks() && !self.is_packed() && !self.read_only_block32()
    }

    /// The 32-value types mllm reads from GGUF files but cannot write yet.
    fn read_only_block32(self) -> bool {
        matches!(
            self,
            QuantType::Q5_0 | QuantType::Q5_1 | QuantType::IQ4_NL | QuantType::MXFP4
        )
    }

    /// Bytes taken by `n_elements` values; they must fill whole blocks.
    pub fn bytes_for(self, n_elements: usize) -> Result<usize, String> {
        let bs = self.block_size();
        if !n_elements.is_multiple_of(bs) {
            return Err(format!(
                "{}: {n_elements} values are not a whole number of {bs}-value blocks",
                self.name()
            ));
        }
        (n_elements / bs)
            .checked_mul(self.type_size())
            .ok_or_else(|| format!("{}: {n_elements} values is too many", self.name()))
    }

    /// Dequantizes whole blocks of this type.
    fn dequantize_blocks(self, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
        match self {
            QuantType::Q4_0 => dequantize_row_q4_0(bytes, out),
            QuantType::Q4_1 => dequantize_row_q4_1(bytes, out),
            QuantType::Q8_0 => dequantize_row_q8_0(bytes, out),
            QuantType::Q4_K => dequantize_row_q4_k(bytes, out),
            QuantType::Q5_K => dequantize_row_q5_k(bytes, out),
            QuantType::Q6_K => dequantize_row_q6_k(bytes, out),
            QuantType::Q6KScaled { .. } | QuantType::Q8KS { .. } => {
                if let QuantType::Q8KS { .. } = self {
                    dequantize_row_q8_ks(bytes, out)?;
                } else {
                    dequantize_row_q6_k(bytes, out)?;
                }
                let f = self.value_scale();
                out.iter_mut().for_each(|v| *v *= f);
                Ok(())
            }
            QuantType::IQ4_XS => iq4::dequantize_row_iq4_xs(bytes, out),
            QuantType::Q2_K => k_low::dequantize_row_q2_k(bytes, out),
            QuantType::Q3_K => k_low::dequantize_row_q3_k(bytes, out),
            QuantType::Q5_0 => q5::dequantize_row_q5_0(bytes, out),
            QuantType::Q5_1 => q5::dequantize_row_q5_1(bytes, out),
            QuantType::IQ4_NL => iq4::dequantize_row_iq4_nl(bytes, out),
            QuantType::MXFP4 => mxfp4::dequantize_row_mxfp4(bytes, out),
            QuantType::TQ2_0 => tq::dequantize_row_tq2_0(bytes, out),
            QuantType::W4A16 { group } => w4a16::dequantize_row_w4a16(group as usize, bytes, out),
            QuantType::W8A8 { k } => w8a8::dequantize_row_w8a8(k as usize, bytes, out),
            QuantType::Q4_0x16
            | QuantType::Q4_1x16
            | QuantType::Q8_0x16
            | QuantType::IQ4_NLx16
            | QuantType::Q5_0x16
            | QuantType::Q5_1x16
            | QuantType::MXFP4x16 => Err(format!(
                "{self}: interleaved rows are read with their shape (quant::packed)"
            )),
        }
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks that `n_bytes` are whole blocks whose values exactly fill
/// `n_out` outputs, and returns the number of blocks.
pub(crate) fn block_count(
    name: &str,
    block_size: usize,
    type_size: usize,
    n_bytes: usize,
    n_out: usize,
) -> Result<usize, String> {
    if !n_bytes.is_multiple_of(type_size) {
        return Err(format!(
            "{name}: {n_bytes} bytes are not a whole number of {type_size}-byte blocks"
        ));
    }
    let blocks = n_bytes / type_size;
    if blocks.checked_mul(block_size) != Some(n_out) {
        return Err(format!(
            "{name}: {blocks} blocks hold {} values but {n_out} were asked for",
            blocks.saturating_mul(block_size)
        ));
    }
    Ok(blocks)
}

/// Blocks per parallel task: big enough that rayon's overhead vanishes,
/// small enough that an embedding table spreads over all cores.
const PAR_BLOCKS: usize = 1024;

/// Dequantizes `bytes` (whole blocks of `ty`) into `out`, in parallel for
/// large inputs. Same results as the row functions: blocks are independent.
pub fn dequantize_into(ty: QuantType, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let blocks = block_count(ty.name(), bs, ts, bytes.len(), out.len())?;
    // Blocks per task: W8A8's block is a whole row, so fewer of them.
    let per_task = (PAR_BLOCKS * QK).div_ceil(bs).max(1);
    if blocks <= per_task {
        return ty.dequantize_blocks(bytes, out);
    }
    out.par_chunks_mut(per_task * bs)
        .zip(bytes.par_chunks(per_task * ts))
        .try_for_each(|(o, b)| ty.dequantize_blocks(b, o))
}

/// Dequantizes `n_elements` values of type `ty` from `bytes`, which must be
/// exactly the blocks that hold them.
pub fn dequantize(ty: QuantType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, String> {
    let need = ty.bytes_for(n_elements)?;
    if bytes.len() != need {
        return Err(format!(
            "{ty}: {n_elements} values take {need} bytes, found {}",
            bytes.len()
        ));
    }
    if n_elements > MAX_ELEMENTS {
        return Err(format!(
            "{ty}: {n_elements} values is more than one tensor may hold"
        ));
    }
    let mut out = vec![0.0f32; n_elements];
    dequantize_into(ty, bytes, &mut out)?;
    Ok(out)
}

/// Quantizes `x` (a whole number of blocks) with the reference quantizer of `ty`.
pub fn quantize(ty: QuantType, x: &[f32]) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; ty.bytes_for(x.len())?];
    quantize_into(ty, x, &mut out)?;
    Ok(out)
}

/// `quantize` into `out` (exactly the blocks' bytes).
pub fn quantize_into(ty: QuantType, x: &[f32], out: &mut [u8]) -> Result<(), String> {
    if out.len() != ty.bytes_for(x.len())? {
        return Err(format!(
            "{ty}: {} bytes cannot hold {} values",
            out.len(),
            x.len()
        ));
    }
    match ty {
        QuantType::Q4_0 => quantize_row_q4_0_ref(x, out)?,
        QuantType::Q4_1 => quantize_row_q4_1_ref(x, out)?,
        QuantType::Q8_0 => quantize_row_q8_0_ref(x, out)?,
        QuantType::W4A16 { group } => w4a16::quantize_row_w4a16(group as usize, x, out)?,
        QuantType::W8A8 { k } => w8a8::quantize_row_w8a8(k as usize, x, out)?,
        QuantType::Q4_K | QuantType::Q5_K | QuantType::Q6_K => {
            return Err(format!(
                "{ty}: quantizing to K-quants is not implemented yet"
            ))
        }
        QuantType::IQ4_XS
        | QuantType::Q6KScaled { .. }
        | QuantType::Q8KS { .. }
        | QuantType::Q2_K
        | QuantType::Q3_K
        | QuantType::Q5_0
        | QuantType::Q5_1
        | QuantType::IQ4_NL
        | QuantType::MXFP4
        | QuantType::TQ2_0 => {
            return Err(format!(
                "{ty}: mllm reads {ty} from GGUF files; it cannot write it yet"
            ))
        }
        QuantType::Q4_0x16
        | QuantType::Q4_1x16
        | QuantType::Q8_0x16
        | QuantType::IQ4_NLx16
        | QuantType::Q5_0x16
        | QuantType::Q5_1x16
        | QuantType::MXFP4x16 => {
            return Err(format!(
            "{ty}: pack Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 blocks (quant::packed)"
        ))
        }
    }
    Ok(())
}

/// Reads a little-endian f16 at `b[i..i + 2]`.
#[inline]
pub(crate) fn f16_at(b: &[u8], i: usize) -> half::f16 {
    half::f16::from_le_bytes([b[i], b[i + 1]])
}
