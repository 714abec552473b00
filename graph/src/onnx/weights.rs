//! Parameters and large constants as ONNX initializers. A parameter is read
//! from the checkpoint itself (a backend may have repacked the tensor the
//! graph was captured with) when the data file is written; here each use
//! is only planned: which initializer name, element type, shape and layout.
//!
//! Linear weights are stored transposed (`[in, out]`, named
//! `CHECKPOINT_NAME.T`) so a linear is one MatMul; a tensor used both ways
//! (tied embeddings: Gather and the output projection) is stored once per
//! layout. `--quant dequantize` widens every weight to f32.

use std::collections::HashMap;

use mllm_backends::weights::WeightSource;
use mllm_backends::{DType, Tensor, TensorMeta};

use super::builder::Builder;
use super::proto::DataType;
use crate::{GraphError, Result};

/// How quantized checkpoint weights enter the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantMode {
    /// Every weight becomes an f32 initializer (default domain only).
    Dequantize,
    /// Quantized weights stay quantized behind DequantizeLinear.
    Keep,
}

impl QuantMode {
    pub fn name(self) -> &'static str {
        match self {
            QuantMode::Dequantize => "dequantize",
            QuantMode::Keep => "keep",
        }
    }
}

impl std::str::FromStr for QuantMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<QuantMode, String> {
        match s {
            "dequantize" => Ok(QuantMode::Dequantize),
            "keep" => Ok(QuantMode::Keep),
            _ => Err(format!("--quant takes `keep` or `dequantize`, not `{s}`")),
        }
    }
}

/// Where an external initializer's bytes come from.
pub enum Source {
    /// A checkpoint tensor widened to f32; `transpose` turns `[n, k]` into
    /// `[k, n]`.
    Param { name: String, transpose: bool },
    /// Bytes computed while planning (constants).
    Bytes(Vec<u8>),
    /// One array (codes or scales) of a weight kept quantized.
    Quant {
        name: String,
        part: super::quant::Part,
    },
}

/// One initializer written to the data file.
pub struct Pending {
    pub name: String,
    pub elem: DataType,
    pub dims: Vec<usize>,
    pub source: Source,
}

/// Initializers this many bytes or smaller stay inside `model.onnx`.
pub const INLINE_MAX_BYTES: usize = 1024;

pub struct Weights<'a> {
    pub src: &'a dyn WeightSource,
    pub mode: QuantMode,
    planned: HashMap<(String, bool), String>,
    /// Initializers already planned, by their hint (kept weights' parts).
    parts: HashMap<String, String>,
    pub pending: Vec<Pending>,
}

impl<'a> Weights<'a> {
    pub fn new(src: &'a dyn WeightSource, mode: QuantMode) -> Weights<'a> {
        Weights {
            src,
            mode,
            planned: HashMap::new(),
            parts: HashMap::new(),
            pending: vec![],
        }
    }

    /// The checkpoint's own description of `name`, checked against the
    /// shape the graph was captured with.
    fn checked_info(&self, name: &str, meta: &TensorMeta) -> Result<DType> {
        let info = self.src.info(name).ok_or_else(|| {
            GraphError(format!(
                "parameter `{name}` of the graph is not in {}",
                self.src.describe()
            ))
        })?;
        if info.shape != meta.shape {
            return Err(GraphError(format!(
                "parameter `{name}` is {:?} in {} but {:?} in the captured graph",
                info.shape,
                self.src.describe(),
                meta.shape
            )));
        }
        Ok(info.dtype)
    }

    /// The initializer holding parameter `name` (shape `meta`), as f32;
    /// `transpose`: a 2-D weight as `[in, out]` for MatMul.
    pub fn param(
        &mut self,
        b: &mut Builder,
        name: &str,
        meta: &TensorMeta,
        transpose: bool,
    ) -> Result<String> {
        let key = (name.to_string(), transpose);
        if let Some(n) = self.planned.get(&key) {
            return Ok(n.clone());
        }
        let dtype = self.checked_info(name, meta)?;
        if self.mode == QuantMode::Keep && dtype.is_quantized() {
            let onnx = super::quant::keep(self, b, name, dtype, &meta.shape, transpose)?;
            self.planned.insert(key, onnx.clone());
            return Ok(onnx);
        }
        if transpose && meta.rank() != 2 {
            return Err(GraphError(format!(
                "parameter `{name}` {:?} is used as a linear weight but is not 2-D",
                meta.shape
            )));
        }
        let wanted = if transpose {
            format!("{name}.T")
        } else {
            name.to_string()
        };
        // Initializers keep their checkpoint names (what a vendor's
        // quantization overrides refer to) unless a name is taken.
        let onnx = if b.reserve(&wanted) {
            wanted
        } else {
            b.fresh(&wanted)
        };
        let dims = if transpose {
            vec![meta.shape[1], meta.shape[0]]
        } else {
            meta.shape.clone()
        };
        self.pending.push(Pending {
            name: onnx.clone(),
            elem: DataType::Float,
            dims,
            source: Source::Param {
                name: name.to_string(),
                transpose,
            },
        });
        self.planned.insert(key, onnx.clone());
        Ok(onnx)
    }

    /// Every parameter planned as an f32 initializer: (checkpoint name,
    /// transposed, initializer name), in initializer-name order.
    pub fn params(&self) -> Vec<(String, bool, String)> {
        let mut v: Vec<(String, bool, String)> = self
            .planned
            .iter()
            .map(|((n, t), o)| (n.clone(), *t, o.clone()))
            .collect();
        v.sort_by(|a, b| a.2.cmp(&b.2));
        v
    }

    /// A constant captured with the graph: inline when small, else in the
    /// data file. Float constants are stored as f32.
    pub fn constant(&mut self, b: &mut Builder, t: &Tensor) -> Result<String> {
        let (elem, raw) = match t.dtype() {
            DType::I32 => (
                DataType::Int32,
                t.i32s()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
            d if d.is_float() => (
                DataType::Float,
                t.to_f32_vec()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            d => {
                return Err(GraphError(format!(
                    "a {d} constant {:?} in the graph cannot be exported",
                    t.shape()
                )))
            }
        };
        if raw.len() <= INLINE_MAX_BYTES {
            return Ok(b.constant(elem, t.shape(), raw));
        }
        Ok(self.external(b, "const", elem, t.shape(), Source::Bytes(raw)))
    }

    /// The checkpoint dtype of parameter `name` when the export keeps it
    /// quantized (`--quant keep` and a quantized tensor), else None.
    pub fn kept(&self, name: &str) -> Option<DType> {
        let d = self.src.info(name)?.dtype;
        (self.mode == QuantMode::Keep && d.is_quantized()).then_some(d)
    }

    /// `external` planned once per `hint` (a kept weight's codes or scales
    /// read by several nodes).
    pub fn part(
        &mut self,
        b: &mut Builder,
        hint: &str,
        elem: DataType,
        dims: &[usize],
        source: Source,
    ) -> String {
        if let Some(n) = self.parts.get(hint) {
            return n.clone();
        }
        let n = self.external(b, hint, elem, dims, source);
        self.parts.insert(hint.to_string(), n.clone());
        n
    }

    /// Plans an initializer written to the data file under a fresh name.
    pub fn external(
        &mut self,
        b: &mut Builder,
        hint: &str,
        elem: DataType,
        dims: &[usize],
        source: Source,
    ) -> String {
        let name = b.fresh(hint);
        self.pending.push(Pending {
            name: name.clone(),
            elem,
            dims: dims.to_vec(),
            source,
        });
        name
    }
}
