//! `GgufWeights`: a GGUF file's tensors under Hugging Face names, as a
//! `WeightSource`. F32/F16/BF16/I32 tensors borrow the mapping; quantized
//! 2-D weights and 3-D expert stacks stay as borrowed ggml blocks for the
//! quantized kernels (or are widened to F32 on load with
//! `set_dequantize(true)`). The ggml types without kernels of their own
//! (TQ1_0 and the IQ1..IQ3 types; `quant::import`) are repacked at
//! load into a type whose kernels compute the same values exactly (TQ2_0,
//! Q6_K, scaled Q6_K or Q8_KS), or widened to f32 where no type holds
//! them exactly (none today).
//! Where llama.cpp's converter changed a tensor
//! beyond its name (Llama's permuted Q/K rows, Gemma's and Qwen3.5's norms
//! stored as 1 + w, Qwen3.5's DeltaNet layout; fixes.rs), `load` undoes it
//! so the tensor equals the Hugging Face one: moved rows keep their blocks,
//! changed values are widened to f32.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use mllm_backends::quant::{self, ImportType, QuantType};
use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, OwnedBytes, Tensor};

use super::fixes::{gather_cols, gather_rows, Fix, Fixer, ValueFix};
use super::names::mtp_name;
use super::{hf_name_for, GgufFile, GgufTensorInfo, MetaValue};
use crate::error::{ConvertError, Result};

enum Kind {
    /// Borrowed (or, for moved rows, copied) in this dtype.
    Raw(DType),
    Quant(QuantType),
    /// Repacked into `runs_as()` blocks, or f32 values where it has none.
    Import(ImportType),
}

/// What `GgufWeights::new` lists when it refuses a tensor's type.
const READABLE: &str = "F32, F16, BF16, I32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0 and MXFP4";

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
        // Blocks past the decoder: the multi-token-prediction head.
        let mtp_from = match super::config::nextn_layers(&file)? {
            Some(k) => file
                .arch_meta("block_count")
                .and_then(MetaValue::as_u64)
                .and_then(|b| b.checked_sub(k))
                .map(|f| f as usize),
            None => None,
        };
        let mut entries = BTreeMap::new();
        for (index, t) in file.tensor_infos().iter().enumerate() {
            let g = t.ggml_type;
            let kind = match (g.dtype(), g.quant(), g.import()) {
                (Some(d), _, _) => Kind::Raw(d),
                (None, Some(q), _) => Kind::Quant(q),
                (None, None, Some(i)) => Kind::Import(i),
                (None, None, None) => {
                    return Err(ConvertError::Unsupported(format!(
                        "{path}: tensor `{}` has ggml type {g}; mllm reads {READABLE}",
                        t.name
                    )))
                }
            };
            let fix = fixer.fix(t)?;
            let mut name = hf_name_for(&arch, &t.name).unwrap_or_else(|| t.name.clone());
            if let Some(mtp) = mtp_from.and_then(|f| mtp_name(&t.name, &name, f)) {
                name = mtp;
            }
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

    /// The block type of a quantized tensor whose blocks can be copied
    /// (`blocks`): none where loading changes its values. An imported type
    /// names the type it is repacked into (its values unchanged).
    pub fn block_type(&self, hf: &str) -> Option<QuantType> {
        let e = self.entries.get(hf)?;
        match e.kind {
            _ if e.fix.changes_values() => None,
            Kind::Quant(q) => Some(q),
            Kind::Import(i) => i.runs_as(),
            Kind::Raw(_) => None,
        }
    }

    /// The blocks of a `block_type` tensor in Hugging Face row order (rows
    /// llama.cpp moved put back; each row's blocks are unchanged).
    pub fn blocks(&self, hf: &str) -> Option<Vec<u8>> {
        let q = self.block_type(hf)?;
        let e = self.entries.get(hf)?;
        let t = &self.file.tensor_infos()[e.index];
        let (_, data) = self.stored(e).ok()?;
        match &e.fix.rows {
            None => Some(data.into_owned()),
            Some(order) => {
                let row_bytes = DType::Quant(q).row_bytes(row_len(t))?;
                Some(gather_rows(&data, row_bytes, order))
            }
        }
    }

    /// The dtype and bytes entry `e` keeps when it is not widened: the
    /// file's bytes, borrowed, or an imported type's repacked blocks.
    fn stored(&self, e: &Entry) -> std::result::Result<(DType, Cow<'_, [u8]>), String> {
        let t = &self.file.tensor_infos()[e.index];
        let data = self.file.tensor_data(t);
        Ok(match e.kind {
            Kind::Raw(d) => (d, Cow::Borrowed(data)),
            Kind::Quant(q) => (DType::Quant(q), Cow::Borrowed(data)),
            Kind::Import(i) => {
                let to = i
                    .runs_as()
                    .ok_or_else(|| format!("{i} loads as f32 values"))?;
                (DType::Quant(to), Cow::Owned(i.repack(data)?))
            }
        })
    }

    /// The HF shape of entry `e`.
    fn shape(&self, e: &Entry) -> Vec<usize> {
        let t = &self.file.tensor_infos()[e.index];
        e.fix.shape.clone().unwrap_or_else(|| t.shape.clone())
    }

    /// Whether `load` widens the tensor to f32 values.
    fn widens(&self, e: &Entry) -> bool {
        let t = &self.file.tensor_infos()[e.index];
        e.fix.changes_values()
            || match e.kind {
                Kind::Raw(_) => false,
                Kind::Quant(_) => !self.keeps_blocks(&t.shape),
                Kind::Import(i) => i.runs_as().is_none() || !self.keeps_blocks(&t.shape),
            }
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
                Kind::Import(i) => i.runs_as().map_or(DType::F32, DType::Quant),
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
                Kind::Import(i) => i
                    .dequantize(self.file.tensor_data(t), t.numel())
                    .map_err(fail)?,
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
        let (dtype, data) = self.stored(e).map_err(fail)?;
        let bytes = match (&e.fix.rows, data) {
            (None, Cow::Borrowed(_)) => {
                return Tensor::from_bytes(self.file.owner(), t.offset, t.len, dtype, shape)
                    .map_err(|err| fail(err.to_string()))
            }
            (None, Cow::Owned(b)) => b,
            (Some(order), data) => {
                // Whole rows move, so the blocks inside each row stay intact.
                let row_bytes = dtype
                    .row_bytes(row)
                    .ok_or_else(|| fail(format!("rows of {row} are not whole {dtype} blocks")))?;
                gather_rows(&data, row_bytes, order)
            }
        };
        let len = bytes.len();
        let owner: Arc<dyn ByteOwner> = Arc::new(OwnedBytes(bytes));
        Tensor::from_bytes(owner, 0, len, dtype, shape).map_err(|err| fail(err.to_string()))
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
