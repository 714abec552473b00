//! `GgufWeights`: a GGUF file's tensors under Hugging Face names, as a
//! `WeightSource`. F32/F16/BF16/I32 tensors borrow the mapping; quantized
//! 2-D weights stay as borrowed ggml blocks for the quantized kernels (or are
//! widened to F32 on load with `set_dequantize(true)`). For
//! architectures whose llama.cpp converter permuted the Q/K rows (Llama's
//! rotary layout), `load` undoes the permutation so the tensor equals the
//! Hugging Face one; for Gemma, whose converter stored RMSNorm weights as
//! `1 + w`, it subtracts the 1 again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, OwnedBytes, Tensor};

use super::{hf_name_for, GgufFile};
use crate::error::{ConvertError, Result};

/// Architectures whose GGUF Q/K rows llama.cpp's converter permuted
/// (`LlamaModel.permute`: per head, rows `[half 0 | half 1]` interleaved).
/// (SmolLM3's converter is `LlamaModel`'s.)
const PERMUTED_QK_ARCHS: &[&str] = &["llama", "smollm3"];

/// Whether llama.cpp's converter permuted the Q/K rows of `arch`'s files.
pub(crate) fn permutes_qk(arch: Option<&str>) -> bool {
    arch.is_some_and(|a| PERMUTED_QK_ARCHS.contains(&a))
}

/// Architectures whose llama.cpp converter adds 1 to every RMSNorm weight
/// (`*norm.weight`), since their norms scale by `1 + w`: loading subtracts
/// it. The f32 GGUF value is g = fl(1 + w); g - 1 is exact for g in
/// [0.5, 2] (Sterbenz), so the script's `1 + (g - 1)` is g again, the very
/// factor transformers computes; for w < -0.5 it is within 2^-25 of it.
const NORM_PLUS_ONE_ARCHS: &[&str] = &["gemma", "gemma2", "gemma3"];

enum Kind {
    /// Borrowed (or, for permuted rows, copied) in this dtype.
    Raw(DType),
    Quant(QuantType),
}

struct Entry {
    /// Index into the file's tensor infos.
    index: usize,
    kind: Kind,
    /// Heads whose rows to un-permute (Llama Q/K weights and biases).
    unpermute_heads: Option<usize>,
    /// Gemma's norm weights, stored as 1 + w: loaded as f32 minus 1.
    minus_one: bool,
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
        let permuted = PERMUTED_QK_ARCHS.contains(&arch.as_str());
        let norm_plus_one = NORM_PLUS_ONE_ARCHS.contains(&arch.as_str());
        let heads = |key: &str| -> Result<Option<usize>> {
            Ok(match file.arch_meta(key) {
                None => None,
                Some(v) => Some(v.as_u64().filter(|&h| h > 0).ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{path}: {arch}.{key} must be a positive integer, found {v:?}"
                    ))
                })? as usize),
            })
        };
        let (n_head, n_head_kv) = if permuted {
            let h = heads("attention.head_count")?;
            (h, heads("attention.head_count_kv")?.or(h))
        } else {
            (None, None)
        };

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
            let unpermute_heads = if !permuted {
                None
            } else if is_block_tensor(&t.name, "attn_q") {
                Some(n_head)
            } else if is_block_tensor(&t.name, "attn_k") {
                Some(n_head_kv)
            } else {
                None
            };
            let unpermute_heads = match unpermute_heads {
                None => None,
                Some(None) => {
                    return Err(ConvertError::Corrupt(format!(
                        "{path}: `{}` needs {arch}.attention.head_count to undo llama.cpp's row permutation",
                        t.name
                    )))
                }
                Some(Some(h)) => {
                    let rows = t.shape.first().copied().unwrap_or(1);
                    if rows % h != 0 || (rows / h) % 2 != 0 {
                        return Err(ConvertError::Corrupt(format!(
                            "{path}: `{}` has {rows} rows, which {h} heads of even size cannot share",
                            t.name
                        )));
                    }
                    Some(h)
                }
            };
            let name = hf_name_for(&arch, &t.name).unwrap_or_else(|| t.name.clone());
            let entry = Entry {
                index,
                kind,
                unpermute_heads,
                minus_one: norm_plus_one && t.name.ends_with("norm.weight"),
            };
            if entries.insert(name.clone(), entry).is_some() {
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
}

/// Whether `name` is `blk.N.{part}.weight` or `.bias`.
fn is_block_tensor(name: &str, part: &str) -> bool {
    let Some(rest) = name.strip_prefix("blk.") else {
        return false;
    };
    let Some((_, tail)) = rest.split_once('.') else {
        return false;
    };
    tail.strip_prefix(part)
        .is_some_and(|s| s == ".weight" || s == ".bias")
}

/// Undoes llama.cpp's `permute(w, n_head)`: within each head of `hd` rows,
/// GGUF row `2 i + j` holds HF row `j * hd / 2 + i` (`j` in 0..2). `row`
/// is the number of elements (or bytes) per row.
pub(crate) fn unpermute_rows<T: Copy>(src: &[T], row: usize, n_head: usize) -> Vec<T> {
    let rows = src.len().checked_div(row).unwrap_or(0);
    let hd = rows / n_head.max(1);
    let mut out = Vec::with_capacity(src.len());
    for h in 0..n_head {
        for j in 0..2 {
            for i in 0..hd / 2 {
                let r = h * hd + 2 * i + j;
                out.extend_from_slice(&src[r * row..(r + 1) * row]);
            }
        }
    }
    out
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
        let shape = self.file.tensor_infos()[e.index].shape.clone();
        Some(TensorInfo {
            dtype: match e.kind {
                _ if e.minus_one => DType::F32,
                Kind::Raw(d) => d,
                Kind::Quant(q) if self.keeps_blocks(&shape) => DType::Quant(q),
                Kind::Quant(_) => DType::F32,
            },
            shape,
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
        let shape = t.shape.clone();
        if e.minus_one {
            let v = match e.kind {
                Kind::Raw(d) => {
                    Tensor::from_bytes(self.file.owner(), t.offset, t.len, d, shape.clone())
                        .and_then(|x| x.to_f32_vec())
                        .map_err(|err| fail(err.to_string()))?
                }
                Kind::Quant(q) => {
                    quant::dequantize(q, self.file.tensor_data(t), t.numel()).map_err(fail)?
                }
            };
            let v = v.into_iter().map(|x| x - 1.0).collect();
            return Tensor::from_f32(v, shape).map_err(|err| fail(err.to_string()));
        }
        // Elements per row: everything after the outermost dimension.
        let row: usize = shape.iter().skip(1).product();
        match (&e.kind, e.unpermute_heads) {
            (Kind::Raw(d), None) => {
                Tensor::from_bytes(self.file.owner(), t.offset, t.len, *d, shape)
                    .map_err(|err| fail(err.to_string()))
            }
            (Kind::Raw(d), Some(h)) => {
                let bytes = unpermute_rows(self.file.tensor_data(t), row * d.size(), h);
                let owner: Arc<dyn ByteOwner> = Arc::new(OwnedBytes(bytes));
                Tensor::from_bytes(owner, 0, t.len, *d, shape).map_err(|err| fail(err.to_string()))
            }
            (Kind::Quant(q), None) if self.keeps_blocks(&shape) => {
                Tensor::from_bytes(self.file.owner(), t.offset, t.len, DType::Quant(*q), shape)
                    .map_err(|err| fail(err.to_string()))
            }
            (Kind::Quant(q), Some(h)) if self.keeps_blocks(&shape) => {
                // Whole rows move, so the blocks inside each row stay intact.
                let dt = DType::Quant(*q);
                let row_bytes = dt
                    .row_bytes(row)
                    .ok_or_else(|| fail(format!("rows of {row} are not whole {q} blocks")))?;
                let bytes = unpermute_rows(self.file.tensor_data(t), row_bytes, h);
                let owner: Arc<dyn ByteOwner> = Arc::new(OwnedBytes(bytes));
                Tensor::from_bytes(owner, 0, t.len, dt, shape).map_err(|err| fail(err.to_string()))
            }
            (Kind::Quant(q), heads) => {
                let mut v =
                    quant::dequantize(*q, self.file.tensor_data(t), t.numel()).map_err(fail)?;
                if let Some(h) = heads {
                    v = unpermute_rows(&v, row, h);
                }
                Tensor::from_f32(v, shape).map_err(|err| fail(err.to_string()))
            }
        }
    }
}
