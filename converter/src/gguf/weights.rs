//! `GgufWeights`: a GGUF file's tensors under Hugging Face names, as a
//! `WeightSource`. F32/F16/BF16/I32 tensors borrow the mapping; quantized
//! 2-D weights and 3-D expert stacks stay as borrowed ggml blocks for the
//! quantized kernels (or are widened to F32 on load with
//! `set_dequantize(true)`). Where llama.cpp's converter changed a tensor
//! beyond its name (Llama's permuted Q/K rows, Gemma's and Qwen3.5's norms
//! stored as 1 + w, Qwen3.5's DeltaNet layout; fixes.rs), `load` undoes it
//! so the tensor equals the Hugging Face one: moved rows keep their blocks,
//! changed values are widened to f32.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, OwnedBytes, Tensor};

use super::fixes::{gather_cols, gather_rows, Fix, Fixer, ValueFix};
use super::{hf_name_for, GgufFile, GgufTensorInfo};
use crate::error::{ConvertError, Result};

enum Kind {
    /// Borrowed (or, for moved rows, copied) in this dtype.
    Raw(DType),
    Quant(QuantType),
}

struct Entry {
    /// Index into the file's tensor infos.
    index: usize,
    kind: Kind,
    fix: Fix,
}

pub struct GgufWeights {
    file: GgufFile,
    entries: BTreeMap<String, Entry>,
    /// Quantized 2-D weights load as blocks (default) or widened to f32.
    keep_quantized: bool,
}

impl std::fmt::Debug for GgufWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWeights")
            .field("file", &self.file)
            .field("tensors", &self.entries.len())
            .finish()
    }
}

impl GgufWeights {
    pub fn open(path: &Path) -> Result<GgufWeights> {
        GgufWeights::new(GgufFile::open(path)?)
    }

    /// Checks every tensor can be loaded and maps the names.
    pub fn new(file: GgufFile) -> Result<GgufWeights> {
        let path = file.path().display().to_string();
        let arch = file.architecture().unwrap_or("").to_string();
        let fixer = Fixer::new(&file)?;
        let mut entries = BTreeMap::new();
        for (index, t) in file.tensor_infos().iter().enumerate() {
            let kind = match (t.ggml_type.dtype(), t.ggml_type.quant()) {
                (Some(d), _) => Kind::Raw(d),
                (None, Some(q)) => Kind::Quant(q),
                (None, None) => {
                    return Err(ConvertError::Unsupported(format!(
                        "{path}: tensor `{}` has ggml type {}; mllm reads F32, F16, BF16, I32, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K",
                        t.name, t.ggml_type
                    )))
                }
            };
            let fix = fixer.fix(t)?;
            let name = hf_name_for(&arch, &t.name).unwrap_or_else(|| t.name.clone());
            if entries
                .insert(name.clone(), Entry { index, kind, fix })
                .is_some()
            {
                return Err(ConvertError::Corrupt(format!(
                    "{path}: two tensors map to the name `{name}`"
                )));
            }
        }
        Ok(GgufWeights {
            file,
            entries,
            keep_quantized: true,
        })
    }

    /// With `true`, quantized weights are widened to f32 on load (exact f32
    /// matmuls on the dequantized values, as transformers runs a GGUF); the
    /// default keeps 2-D weights as blocks for the quantized kernels.
    pub fn set_dequantize(&mut self, dequantize: bool) {
        self.keep_quantized = !dequantize;
    }

    /// 2-D weights, and the 3-D expert stacks (`ffn_*_exps`), whose
    /// experts the binder and the expert kernel take as whole rows.
    fn keeps_blocks(&self, shape: &[usize]) -> bool {
        self.keep_quantized && matches!(shape.len(), 2 | 3)
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The GGUF name behind a Hugging Face name.
    pub fn gguf_name(&self, hf: &str) -> Option<&str> {
        let e = self.entries.get(hf)?;
        Some(&self.file.tensor_infos()[e.index].name)
    }

    /// The block type of a quantized tensor whose blocks can be copied as
    /// they are (`blocks`): none where loading changes its values.
    pub fn block_type(&self, hf: &str) -> Option<QuantType> {
        let e = self.entries.get(hf)?;
        match e.kind {
            Kind::Quant(q) if !e.fix.changes_values() => Some(q),
            _ => None,
        }
    }

    /// The blocks of a `block_type` tensor in Hugging Face row order (rows
    /// llama.cpp moved put back; each row's blocks are unchanged).
    pub fn blocks(&self, hf: &str) -> Option<Vec<u8>> {
        let q = self.block_type(hf)?;
        let e = self.entries.get(hf)?;
        let t = &self.file.tensor_infos()[e.index];
        let data = self.file.tensor_data(t);
        match &e.fix.rows {
            None => Some(data.to_vec()),
            Some(order) => {
                let row_bytes = DType::Quant(q).row_bytes(row_len(t))?;
                Some(gather_rows(data, row_bytes, order))
            }
        }
    }

    /// The HF shape of entry `e`.
    fn shape(&self, e: &Entry) -> Vec<usize> {
        let t = &self.file.tensor_infos()[e.index];
        e.fix.shape.clone().unwrap_or_else(|| t.shape.clone())
    }

    /// Whether `load` widens the tensor to f32 values.
    fn widens(&self, e: &Entry) -> bool {
        let t = &self.file.tensor_infos()[e.index];
        e.fix.changes_values() || matches!(e.kind, Kind::Quant(_)) && !self.keeps_blocks(&t.shape)
    }
}

/// Items per row (outermost index) of a GGUF tensor in PyTorch order.
/// The reader bounds the whole product only when no dimension is 0: a
/// tensor of 0 rows may declare rows too long to count (found by fuzzing),
/// and such rows hold nothing, so they count 0 here.
fn row_len(t: &GgufTensorInfo) -> usize {
    let rest = t.shape.get(1..).unwrap_or(&[]);
    rest.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .unwrap_or(0)
}

impl WeightSource for GgufWeights {
    fn describe(&self) -> String {
        format!(
            "the GGUF file {} ({}, {} tensors)",
            self.file.path().display(),
            self.file.architecture().unwrap_or("no architecture"),
            self.entries.len()
        )
    }

    fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        let e = self.entries.get(name)?;
        Some(TensorInfo {
            dtype: match e.kind {
                _ if self.widens(e) => DType::F32,
                Kind::Raw(d) => d,
                Kind::Quant(q) => DType::Quant(q),
            },
            shape: self.shape(e),
        })
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        let t = &self.file.tensor_infos()[e.index];
        let fail = |m: String| {
            format!(
                "{}: tensor `{}` ({}): {m}",
                self.file.path().display(),
                t.name,
                t.ggml_type
            )
        };
        let shape = self.shape(e);
        let row = row_len(t);
        if self.widens(e) {
            let mut v = match e.kind {
                Kind::Raw(d) => {
                    Tensor::from_bytes(self.file.owner(), t.offset, t.len, d, t.shape.clone())
                        .and_then(|x| x.to_f32_vec())
                        .map_err(|err| fail(err.to_string()))?
                }
                Kind::Quant(q) => {
                    quant::dequantize(q, self.file.tensor_data(t), t.numel()).map_err(fail)?
                }
            };
            if let Some(order) = &e.fix.rows {
                v = gather_rows(&v, row, order);
            }
            if let Some(order) = &e.fix.cols {
                v = gather_cols(&v, order);
            }
            match e.fix.value {
                ValueFix::None => {}
                ValueFix::MinusOne => v.iter_mut().for_each(|x| *x -= 1.0),
                ValueFix::LogOfNegated => v.iter_mut().for_each(|x| *x = (-*x).ln()),
            }
            return Tensor::from_f32(v, shape).map_err(|err| fail(err.to_string()));
        }
        let dtype = match e.kind {
            Kind::Raw(d) => d,
            Kind::Quant(q) => DType::Quant(q),
        };
        match &e.fix.rows {
            None => Tensor::from_bytes(self.file.owner(), t.offset, t.len, dtype, shape)
                .map_err(|err| fail(err.to_string())),
            Some(order) => {
                // Whole rows move, so the blocks inside each row stay intact.
                let row_bytes = dtype
                    .row_bytes(row)
                    .ok_or_else(|| fail(format!("rows of {row} are not whole {dtype} blocks")))?;
                let bytes = gather_rows(self.file.tensor_data(t), row_bytes, order);
                let owner: Arc<dyn ByteOwner> = Arc::new(OwnedBytes(bytes));
                Tensor::from_bytes(owner, 0, t.len, dtype, shape)
                    .map_err(|err| fail(err.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor of 0 rows whose rows are too long to count (fuzzing found
    /// one; the multiplication overflowed): its rows count 0 values.
    #[test]
    fn rows_of_an_empty_tensor_do_not_overflow() {
        let t = |shape: Vec<usize>| GgufTensorInfo {
            name: "t".into(),
            shape,
            ggml_type: crate::gguf::GgmlType::from_id(0).expect("f32"),
            offset: 0,
            len: 0,
        };
        assert_eq!(row_len(&t(vec![0, 1 << 40, 1 << 40])), 0);
        assert_eq!(row_len(&t(vec![3, 4, 5])), 20);
        assert_eq!(row_len(&t(vec![7])), 1);
        assert_eq!(row_len(&t(vec![])), 1);
    }
}
