//! ggml tensor types as GGUF files number them: name, block size and bytes
//! per block of every type ggml defines, so that any GGUF's tensor sizes can
//! be checked, and which of them mllm can load (as a dtype, as blocks its
//! kernels read, or imported: repacked or dequantized at load).

use mllm_backends::quant::{ImportType, QuantType};
use mllm_backends::DType;

/// A ggml tensor type: `block_size` elements take `type_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block_size: usize,
    pub type_size: usize,
}

/// (id, name, elements per block, bytes per block), after ggml's type
/// traits. Ids 4, 5, 31..=33 and 36..=38 were removed from ggml and are
/// unknown here on purpose.
const TABLE: &[(u32, &str, usize, usize)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|t| t.0 == id)
            .map(|&(id, name, block_size, type_size)| GgmlType {
                id,
                name,
                block_size,
                type_size,
            })
    }

    /// The dtype a tensor of this type can be borrowed as, without conversion.
    pub fn dtype(self) -> Option<DType> {
        match self.id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            26 => Some(DType::I32),
            30 => Some(DType::BF16),
            _ => None,
        }
    }

    /// The block format mllm dequantizes this type with, if any.
    pub fn quant(self) -> Option<QuantType> {
        QuantType::from_ggml_type_id(self.id)
    }

    /// The block format mllm imports this type as, if it has no kernels of
    /// its own (TQ1_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
    /// IQ3_XXS, IQ3_S; `quant::import`).
    pub fn import(self) -> Option<ImportType> {
        ImportType::from_ggml_type_id(self.id)
    }

    /// Whether mllm can load tensors of this type at all.
    pub fn is_loadable(self) -> bool {
        self.dtype().is_some() || self.quant().is_some() || self.import().is_some()
    }

    /// Bytes taken by `numel` elements whose innermost dimension is `ne0`
    /// (blocks never straddle rows), or why that is impossible.
    pub fn byte_len(self, ne0: u64, numel: u64) -> Result<u64, String> {
        let bs = self.block_size as u64;
        if bs > 1 && !ne0.is_multiple_of(bs) {
            return Err(format!(
                "its rows of {ne0} values are not a whole number of {} blocks of {bs}",
                self.name
            ));
        }
        (numel / bs)
            .checked_mul(self.type_size as u64)
            .ok_or_else(|| "its byte size overflows".to_string())
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}
