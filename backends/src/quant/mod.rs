//! Quantized weight blocks, byte-compatible with ggml's (and so with GGUF
//! files): the block structs, a scalar reference dequantizer for every type,
//! reference quantizers for the 32-element types, and `QuantType`, which says
//! how big a type's blocks are. The reference kernels are the oracle that any
//! faster kernel added later must agree with bit for bit; they are checked
//! against gguf-py's numpy implementation on committed fixtures
//! (backends/tests/quant.rs, tests/fixtures/gguf/).
//!
//! Blocks are read from raw little-endian bytes (a GGUF mapping has no
//! alignment guarantee for the f16 scales inside a block), one block at a
//! time through `Block::from_bytes`, so no `unsafe` casts are needed.

pub mod k_quants;
pub mod q4_0;
pub mod q4_1;
pub mod q8_0;

use rayon::prelude::*;

pub use k_quants::{
    dequantize_row_q4_k, dequantize_row_q5_k, dequantize_row_q6_k, BlockQ4K, BlockQ5K, BlockQ6K,
};
pub use q4_0::{dequantize_row_q4_0, quantize_row_q4_0_ref, BlockQ4_0};
pub use q4_1::{dequantize_row_q4_1, quantize_row_q4_1_ref, BlockQ4_1};
pub use q8_0::{dequantize_row_q8_0, quantize_row_q8_0_ref, BlockQ8_0};

use crate::tensor::MAX_ELEMENTS;

/// Elements per block of the 32-wide types (ggml's `QK4_0`, `QK8_0`, ...).
pub const QK: usize = 32;
/// Elements per super-block of the K-quants (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// The quantized block formats mllm can read, named as ggml names them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl QuantType {
    pub const ALL: [QuantType; 6] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q8_0,
        QuantType::Q4_K,
        QuantType::Q5_K,
        QuantType::Q6_K,
    ];

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q8_0 => QK,
            QuantType::Q4_K | QuantType::Q5_K | QuantType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            QuantType::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            QuantType::Q4_1 => std::mem::size_of::<BlockQ4_1>(),
            QuantType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
            QuantType::Q4_K => std::mem::size_of::<BlockQ4K>(),
            QuantType::Q5_K => std::mem::size_of::<BlockQ5K>(),
            QuantType::Q6_K => std::mem::size_of::<BlockQ6K>(),
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
        }
    }

    /// The `ggml_type` number GGUF files store for this type.
    pub fn ggml_type_id(self) -> u32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q8_0 => 8,
            QuantType::Q4_K => 12,
            QuantType::Q5_K => 13,
            QuantType::Q6_K => 14,
        }
    }

    pub fn from_ggml_type_id(id: u32) -> Option<QuantType> {
        QuantType::ALL.into_iter().find(|t| t.ggml_type_id() == id)
    }

    /// Whether `quantize` implements this type (the K-quant quantizers come later).
    pub fn can_quantize(self) -> bool {
        matches!(self, QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q8_0)
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

    fn dequantize_fn(self) -> fn(&[u8], &mut [f32]) -> Result<(), String> {
        match self {
            QuantType::Q4_0 => dequantize_row_q4_0,
            QuantType::Q4_1 => dequantize_row_q4_1,
            QuantType::Q8_0 => dequantize_row_q8_0,
            QuantType::Q4_K => dequantize_row_q4_k,
            QuantType::Q5_K => dequantize_row_q5_k,
            QuantType::Q6_K => dequantize_row_q6_k,
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
    let f = ty.dequantize_fn();
    if blocks <= PAR_BLOCKS {
        return f(bytes, out);
    }
    out.par_chunks_mut(PAR_BLOCKS * bs)
        .zip(bytes.par_chunks(PAR_BLOCKS * ts))
        .try_for_each(|(o, b)| f(b, o))
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
    match ty {
        QuantType::Q4_0 => quantize_row_q4_0_ref(x, &mut out)?,
        QuantType::Q4_1 => quantize_row_q4_1_ref(x, &mut out)?,
        QuantType::Q8_0 => quantize_row_q8_0_ref(x, &mut out)?,
        QuantType::Q4_K | QuantType::Q5_K | QuantType::Q6_K => {
            return Err(format!(
                "{ty}: quantizing to K-quants is not implemented yet"
            ))
        }
    }
    Ok(out)
}

/// Reads a little-endian f16 at `b[i..i + 2]`.
#[inline]
pub(crate) fn f16_at(b: &[u8], i: usize) -> half::f16 {
    half::f16::from_le_bytes([b[i], b[i + 1]])
}
