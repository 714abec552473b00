//! Element types a tensor can hold.

use std::fmt;

use crate::quant::QuantType;

/// The element type of a tensor. Activations are always `F32`; weights may stay
/// in the checkpoint's `F16`/`BF16` and are widened inside the kernels, or stay
/// in a ggml block format (`Quant`), read by the quantized kernels.
///
/// Sizes follow ggml: a dtype stores its values in blocks of `block_size()`
/// elements taking `size()` bytes each. A plain dtype's block is one element;
/// a quantized tensor's rows (its last dimension) are whole blocks, so its
/// bytes are `row_bytes(cols)` per row, `storage_bytes(shape)` in all. Use
/// those, not `numel * size()`, whenever the dtype may be quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    /// ggml blocks (Q4_0, Q8_0, Q4_K, ...), row-major, each row whole blocks.
    Quant(QuantType),
}

impl DType {
    /// Bytes per block: bytes per element for the plain dtypes, bytes per
    /// `block_size()` elements for a quantized one (ggml's `type_size`).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Quant(q) => q.type_size(),
        }
    }

    /// Elements per block: 1 for the plain dtypes (ggml's `blck_size`).
    pub fn block_size(self) -> usize {
        match self {
            DType::Quant(q) => q.block_size(),
            _ => 1,
        }
    }

    /// The block format of a quantized dtype.
    pub fn quant(self) -> Option<QuantType> {
        match self {
            DType::Quant(q) => Some(q),
            _ => None,
        }
    }

    pub fn is_quantized(self) -> bool {
        matches!(self, DType::Quant(_))
    }

    /// Stored as plain floats (f32, f16, bf16): what `Tensor::floats` reads.
    /// Quantized tensors hold real values too, but only as blocks.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes of one row of `cols` elements; `None` when `cols` is not a whole
    /// number of blocks, or on overflow.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        let bs = self.block_size();
        if !cols.is_multiple_of(bs) {
            return None;
        }
        (cols / bs).checked_mul(self.size())
    }

    /// Bytes of a row-major tensor of `shape`: rows of the last dimension.
    /// A scalar is one element, which a quantized dtype cannot hold.
    pub fn storage_bytes(self, shape: &[usize]) -> Option<usize> {
        let Some((&cols, outer)) = shape.split_last() else {
            return self.row_bytes(1);
        };
        let rows = outer.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
        rows.checked_mul(self.row_bytes(cols)?)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Quant(q) => match q {
                QuantType::Q4_0 => "q4_0",
                QuantType::Q4_1 => "q4_1",
                QuantType::Q8_0 => "q8_0",
                QuantType::Q4_K => "q4_k",
                QuantType::Q5_K => "q5_k",
                QuantType::Q6_K => "q6_k",
                QuantType::IQ4_XS => "iq4_xs",
                QuantType::Q2_K => "q2_k",
                QuantType::Q3_K => "q3_k",
                QuantType::Q5_0 => "q5_0",
                QuantType::Q5_1 => "q5_1",
                QuantType::IQ4_NL => "iq4_nl",
                QuantType::MXFP4 => "mxfp4",
                QuantType::TQ2_0 => "tq2_0",
                QuantType::W4A16 { group: 32 } => "w4a16_g32",
                QuantType::W4A16 { group: 64 } => "w4a16_g64",
                QuantType::W4A16 { .. } => "w4a16_g128",
                QuantType::W8A8 { .. } => "w8a8",
                QuantType::Q4_0x16 => "q4_0x16",
                QuantType::Q4_1x16 => "q4_1x16",
                QuantType::Q8_0x16 => "q8_0x16",
                QuantType::IQ4_NLx16 => "iq4_nlx16",
                QuantType::MXFP4x16 => "mxfp4x16",
                QuantType::Q5_0x16 => "q5_0x16",
                QuantType::Q5_1x16 => "q5_1x16",
                QuantType::Q6KScaled { shift: 1 } => "q6_k/2",
                QuantType::Q6KScaled { shift: 2 } => "q6_k/4",
                QuantType::Q6KScaled { .. } => "q6_k/8",
                QuantType::Q8KS { shift: 0 } => "q8_ks",
                QuantType::Q8KS { shift: 1 } => "q8_ks/2",
                QuantType::Q8KS { shift: 2 } => "q8_ks/4",
                QuantType::Q8KS { .. } => "q8_ks/8",
            },
        }
    }

    /// Parses the names used in scripts (`"f32"`, `"bf16"`, `"q4_0"`, ...);
    /// quantized types also by ggml's spelling (`"Q4_K"`).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f32" | "float32" => DType::F32,
            "f16" | "float16" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "i32" | "int32" => DType::I32,
            _ => {
                return QuantType::ALL
                    .into_iter()
                    .find(|q| q.name().eq_ignore_ascii_case(s))
                    .map(DType::Quant)
            }
        })
    }
}

impl From<QuantType> for DType {
    fn from(q: QuantType) -> DType {
        DType::Quant(q)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_plain_and_quantized_dtypes() {
        assert_eq!(DType::F32.row_bytes(3), Some(12));
        assert_eq!(DType::BF16.storage_bytes(&[2, 3]), Some(12));
        assert_eq!(DType::F32.storage_bytes(&[]), Some(4));
        let q = DType::Quant(QuantType::Q4_0);
        assert_eq!((q.size(), q.block_size()), (18, 32));
        assert_eq!(q.row_bytes(64), Some(36));
        assert_eq!(q.row_bytes(48), None);
        assert_eq!(q.storage_bytes(&[3, 64]), Some(108));
        assert_eq!(q.storage_bytes(&[]), None);
        assert_eq!(q.storage_bytes(&[usize::MAX, 64]), None);
        assert_eq!(DType::Quant(QuantType::Q6_K).row_bytes(512), Some(420));
        assert!(!q.is_float() && q.is_quantized() && DType::BF16.is_float());
    }

    #[test]
    fn names_round_trip() {
        for d in [DType::F32, DType::F16, DType::BF16, DType::I32]
            .into_iter()
            .chain(QuantType::ALL.map(DType::Quant))
        {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("Q4_K"), Some(DType::Quant(QuantType::Q4_K)));
        assert_eq!(DType::parse("q5_0"), Some(DType::Quant(QuantType::Q5_0)));
        // Imported at load (widened or repacked), never a tensor's dtype.
        assert_eq!(DType::parse("iq2_xxs"), None);
    }
}
