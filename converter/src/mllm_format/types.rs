//! The element types a `.mllm` tensor can be stored as, numbered with
//! ggml's type ids (FORMAT.md, "Tensor table") so the quantized ones are
//! known to be ggml's block layouts, which `mllm_backends::quant` reads.

use mllm_backends::quant::QuantType;
use mllm_backends::DType;

/// A stored tensor type: a plain dtype or a ggml block type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoredType {
    Plain(DType),
    Quant(QuantType),
}

impl From<DType> for StoredType {
    /// A dtype as a stored type (a quantized dtype is its block type).
    fn from(d: DType) -> StoredType {
        match d {
            DType::Quant(q) => StoredType::Quant(q),
            d => StoredType::Plain(d),
        }
    }
}

impl StoredType {
    pub const F32: StoredType = StoredType::Plain(DType::F32);
    pub const F16: StoredType = StoredType::Plain(DType::F16);
    pub const BF16: StoredType = StoredType::Plain(DType::BF16);
    pub const I32: StoredType = StoredType::Plain(DType::I32);

    /// `w8a8` as recipes name it: the row length is filled in per tensor
    /// (`for_shape`), since a W8A8 block is a whole row.
    pub const W8A8: StoredType = StoredType::Quant(QuantType::W8A8 { k: 0 });

    /// Every type version 1 files may hold (W8A8 with its row left open).
    pub const ALL: [StoredType; 29] = [
        StoredType::F32,
        StoredType::F16,
        StoredType::BF16,
        StoredType::I32,
        StoredType::Quant(QuantType::Q4_0),
        StoredType::Quant(QuantType::Q4_1),
        StoredType::Quant(QuantType::Q8_0),
        StoredType::Quant(QuantType::Q4_K),
        StoredType::Quant(QuantType::Q5_K),
        StoredType::Quant(QuantType::Q6_K),
        StoredType::Quant(QuantType::IQ4_XS),
        StoredType::Quant(QuantType::Q2_K),
        StoredType::Quant(QuantType::Q3_K),
        StoredType::Quant(QuantType::Q5_0),
        StoredType::Quant(QuantType::Q5_1),
        StoredType::Quant(QuantType::IQ4_NL),
        StoredType::Quant(QuantType::MXFP4),
        StoredType::Quant(QuantType::TQ2_0),
        StoredType::Quant(QuantType::W4A16 { group: 32 }),
        StoredType::Quant(QuantType::W4A16 { group: 64 }),
        StoredType::Quant(QuantType::W4A16 { group: 128 }),
        StoredType::W8A8,
        StoredType::Quant(QuantType::Q6KScaled { shift: 1 }),
        StoredType::Quant(QuantType::Q6KScaled { shift: 2 }),
        StoredType::Quant(QuantType::Q6KScaled { shift: 3 }),
        StoredType::Quant(QuantType::Q8KS { shift: 0 }),
        StoredType::Quant(QuantType::Q8KS { shift: 1 }),
        StoredType::Quant(QuantType::Q8KS { shift: 2 }),
        StoredType::Quant(QuantType::Q8KS { shift: 3 }),
    ];

    /// This type for a tensor of `shape`: W8A8 takes the row length.
    pub fn for_shape(self, shape: &[usize]) -> StoredType {
        match self.norm() {
            StoredType::Quant(QuantType::W8A8 { .. }) => {
                let row = shape.last().copied().unwrap_or(1);
                QuantType::w8a8(row).map_or(self, StoredType::Quant)
            }
            t => t,
        }
    }

    /// The canonical form: a block type as `Quant`, never `Plain(DType::Quant)`.
    pub fn norm(self) -> StoredType {
        match self {
            StoredType::Plain(d) => StoredType::from(d),
            q => q,
        }
    }

    /// The dtype a tensor of this type has in memory.
    pub fn dtype(self) -> DType {
        match self {
            StoredType::Plain(d) => d,
            StoredType::Quant(q) => DType::Quant(q),
        }
    }

    /// The ggml type id written in the table.
    pub fn ggml_id(self) -> u32 {
        match self.norm() {
            StoredType::Plain(DType::F32) => 0,
            StoredType::Plain(DType::F16) => 1,
            StoredType::Plain(DType::I32) => 26,
            StoredType::Plain(DType::BF16) => 30,
            StoredType::Quant(q) | StoredType::Plain(DType::Quant(q)) => q.ggml_type_id(),
        }
    }

    /// The type a table id names for a tensor whose rows hold `cols` values.
    pub fn from_ggml_id(id: u32, cols: usize) -> Option<StoredType> {
        StoredType::ALL
            .into_iter()
            .find(|t| t.ggml_id() == id)
            .map(|t| t.for_shape(&[cols]))
    }

    /// Lower-case name, as recipes and `mllm inspect` spell it.
    pub fn name(self) -> &'static str {
        match self.norm() {
            StoredType::Plain(d) => d.name(),
            StoredType::Quant(QuantType::Q4_0) => "q4_0",
            StoredType::Quant(QuantType::Q4_1) => "q4_1",
            StoredType::Quant(QuantType::Q8_0) => "q8_0",
            StoredType::Quant(QuantType::Q4_K) => "q4_k",
            StoredType::Quant(QuantType::Q5_K) => "q5_k",
            StoredType::Quant(QuantType::Q6_K) => "q6_k",
            StoredType::Quant(QuantType::IQ4_XS) => "iq4_xs",
            StoredType::Quant(QuantType::Q2_K) => "q2_k",
            StoredType::Quant(QuantType::Q3_K) => "q3_k",
            StoredType::Quant(QuantType::Q5_0) => "q5_0",
            StoredType::Quant(QuantType::Q5_1) => "q5_1",
            StoredType::Quant(QuantType::IQ4_NL) => "iq4_nl",
            StoredType::Quant(QuantType::MXFP4) => "mxfp4",
            StoredType::Quant(QuantType::TQ2_0) => "tq2_0",
            StoredType::Quant(QuantType::W4A16 { group: 32 }) => "w4a16_g32",
            StoredType::Quant(QuantType::W4A16 { group: 64 }) => "w4a16_g64",
            StoredType::Quant(QuantType::W4A16 { .. }) => "w4a16_g128",
            StoredType::Quant(QuantType::W8A8 { .. }) => "w8a8",
            StoredType::Quant(QuantType::Q4_0x16) => "q4_0x16",
            StoredType::Quant(QuantType::Q4_1x16) => "q4_1x16",
            StoredType::Quant(QuantType::Q8_0x16) => "q8_0x16",
            StoredType::Quant(QuantType::IQ4_NLx16) => "iq4_nlx16",
            StoredType::Quant(QuantType::MXFP4x16) => "mxfp4x16",
            StoredType::Quant(QuantType::Q5_0x16) => "q5_0x16",
            StoredType::Quant(QuantType::Q5_1x16) => "q5_1x16",
            StoredType::Quant(q @ (QuantType::Q6KScaled { .. } | QuantType::Q8KS { .. })) => {
                DType::Quant(q).name()
            }
        }
    }

    /// Parses a name (case-insensitive; `float16`-style spellings too).
    pub fn parse(s: &str) -> Option<StoredType> {
        let s = s.to_ascii_lowercase();
        if s == "w4a16" {
            return Some(StoredType::Quant(QuantType::W4A16 { group: 128 }));
        }
        StoredType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .or_else(|| DType::parse(&s).map(StoredType::from))
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> usize {
        match self.norm() {
            StoredType::Plain(_) => 1,
            StoredType::Quant(q) => q.block_size(),
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self.norm() {
            StoredType::Plain(d) => d.size(),
            StoredType::Quant(q) => q.type_size(),
        }
    }

    pub fn is_quant(self) -> bool {
        matches!(self.norm(), StoredType::Quant(_))
    }

    /// Bytes a tensor of this type and shape takes, or why it cannot be
    /// stored so (rows not whole blocks, overflow). Rows are the innermost
    /// dimension; a scalar is one row of one element.
    pub fn byte_len(self, shape: &[u64]) -> Result<u64, String> {
        let numel = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| format!("shape {shape:?} overflows"))?;
        let bs = self.block_size() as u64;
        let row = shape.last().copied().unwrap_or(1);
        if bs == 0 || (bs > 1 && !row.is_multiple_of(bs)) {
            return Err(format!(
                "rows of {row} values are not a whole number of {}-value {} blocks",
                bs,
                self.name()
            ));
        }
        (numel / bs)
            .checked_mul(self.block_bytes() as u64)
            .ok_or_else(|| format!("shape {shape:?} overflows"))
    }
}

impl std::fmt::Display for StoredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
