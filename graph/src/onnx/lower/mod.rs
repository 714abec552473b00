//! Lowering our ops to ONNX (opset 17, default domain): `Ctx` names every
//! graph value on the ONNX side, and each op family's file turns one op
//! into ONNX nodes. Every ONNX value made from a graph value is float32
//! (f32, and every f16/bf16/quantized tensor, which is widened) or int32
//! (i32); integer graph inputs arrive as int64 and are cast once.

mod attention;
mod elementwise;
mod layout;
mod linear;
mod moe;
mod norm;

use std::collections::HashMap;

use mllm_backends::{DType, Op, TensorMeta};

use super::builder::Builder;
use super::proto::DataType;
use super::weights::Weights;
use crate::ir::{Def, Graph, ValueId};
use crate::{GraphError, Result};

pub struct Ctx<'g, 'w> {
    pub g: &'g Graph,
    pub b: Builder,
    pub w: Weights<'w>,
    names: Vec<Option<String>>,
    floats: HashMap<ValueId, String>,
}

impl<'g, 'w> Ctx<'g, 'w> {
    pub fn new(g: &'g Graph, w: Weights<'w>, opset: i64) -> Ctx<'g, 'w> {
        Ctx {
            g,
            b: Builder::new(opset),
            w,
            names: vec![None; g.values.len()],
            floats: HashMap::new(),
        }
    }

    pub fn meta(&self, id: ValueId) -> &'g TensorMeta {
        &self.g.values[id].meta
    }

    /// Whether value `id` is int32 on the ONNX side.
    pub fn is_int(&self, id: ValueId) -> bool {
        self.meta(id).dtype == DType::I32
    }

    /// Sets the ONNX name of value `id` (graph inputs).
    pub fn bind(&mut self, id: ValueId, name: String) {
        self.names[id] = Some(name);
    }

    /// The ONNX name of value `id`: parameters in their checkpoint layout,
    /// constants as initializers (both made on first use).
    pub fn value(&mut self, id: ValueId) -> Result<String> {
        if let Some(n) = &self.names[id] {
            return Ok(n.clone());
        }
        let v = &self.g.values[id];
        let name = match &v.def {
            Def::Param { name } => self.w.param(&mut self.b, name, &v.meta, false)?,
            Def::Const { data } => self.w.constant(&mut self.b, data)?,
            Def::Input { name } => {
                return Err(GraphError(format!("graph input `{name}` was not declared")))
            }
            Def::Node { op, .. } => {
                return Err(GraphError(format!(
                    "%{id} ({}) is read before it is computed",
                    op.name()
                )))
            }
        };
        self.names[id] = Some(name.clone());
        Ok(name)
    }

    /// Value `id` as float32 (int32 values are cast once).
    pub fn float(&mut self, id: ValueId) -> Result<String> {
        let n = self.value(id)?;
        if !self.is_int(id) {
            return Ok(n);
        }
        if let Some(f) = self.floats.get(&id) {
            return Ok(f.clone());
        }
        let f = self.b.cast(&n, DataType::Float);
        self.floats.insert(id, f.clone());
        Ok(f)
    }

    /// A linear weight `[n, k]` as `[k, n]`: a parameter is stored
    /// transposed; a computed weight is transposed by a node.
    pub fn weight_t(&mut self, id: ValueId) -> Result<String> {
        let v = &self.g.values[id];
        if let Def::Param { name } = &v.def {
            return self.w.param(&mut self.b, name, &v.meta, true);
        }
        let w = self.float(id)?;
        Ok(self.b.transpose(&w, &[1, 0]))
    }

    /// The checkpoint dtype of value `id` when it is a parameter the export
    /// keeps quantized.
    pub fn kept(&self, id: ValueId) -> Option<(&'g str, DType)> {
        match &self.g.values[id].def {
            Def::Param { name } => self.w.kept(name).map(|d| (name.as_str(), d)),
            _ => None,
        }
    }

    /// Lowers node `id` and records its ONNX name.
    pub fn lower(&mut self, id: ValueId) -> Result<()> {
        let Def::Node { op, inputs } = &self.g.values[id].def else {
            return Ok(());
        };
        let name = lower_op(self, id, op, inputs)
            .map_err(|e| GraphError(format!("exporting %{id} ({}): {}", op.name(), e.0)))?;
        self.names[id] = Some(name);
        Ok(())
    }
}

/// One op as ONNX nodes; returns the name of the result (int32 for an i32
/// result, else float32).
fn lower_op(c: &mut Ctx, id: ValueId, op: &Op, ins: &[ValueId]) -> Result<String> {
    match op {
        Op::Linear => linear::linear(c, ins),
        Op::Matmul => linear::matmul(c, ins),
        Op::Embedding => linear::embedding(c, ins),
        Op::MergedLinear { norm_eps, .. } => linear::merged(c, ins, *norm_eps),
        Op::RmsNorm { eps } => {
            let x = c.float(ins[0])?;
            let w = c.float(ins[1])?;
            Ok(norm::rms_norm(&mut c.b, &x, &w, *eps))
        }
        Op::LayerNorm { eps } => norm::layer_norm(c, ins, *eps),
        Op::AddRmsNorm { eps } => norm::add_rms_norm(c, ins, *eps),
        Op::ApplyRope => attention::rope(c, ins),
        Op::Sdpa { window, .. } | Op::CachedSdpa { window, .. } if *window > 0 => Err(GraphError(
            format!("sliding-window attention (window {window}) is not exportable to ONNX yet"),
        )),
        Op::Sdpa { causal, scale, .. } => attention::sdpa(c, ins, *causal, *scale),
        Op::CachedSdpa { causal, scale, .. } => attention::cached_sdpa(c, ins, *causal, *scale),
        Op::Unary(u) => {
            let x = c.float(ins[0])?;
            Ok(elementwise::unary(&mut c.b, *u, &x))
        }
        Op::GatedAct { act } => {
            let (g, u) = (c.float(ins[0])?, c.float(ins[1])?);
            let a = elementwise::unary(&mut c.b, *act, &g);
            Ok(c.b.binary("Mul", &a, &u))
        }
        Op::Binary(b) => elementwise::binary(c, id, *b, ins),
        Op::Where => elementwise::where_(c, ins),
        Op::Cast { dtype } => elementwise::cast(c, ins[0], *dtype),
        Op::Softmax { dim } => elementwise::softmax(c, ins[0], *dim),
        Op::Reduce { op, dim, keepdim } => elementwise::reduce(c, ins[0], *op, *dim, *keepdim),
        Op::Argmax { dim } => elementwise::argmax(c, ins[0], *dim),
        Op::Reshape { shape } => {
            let x = c.value(ins[0])?;
            Ok(c.b.reshape(&x, shape))
        }
        Op::Permute { perm } => {
            let x = c.value(ins[0])?;
            Ok(c.b.transpose(&x, perm))
        }
        Op::Concat { dim } => layout::concat(c, id, ins, *dim),
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            let x = c.value(ins[0])?;
            Ok(c.b.slice_step(&x, *dim, *start, *end, *step))
        }
        Op::IndexSelect { dim } => layout::index_select(c, ins, *dim),
        Op::TopK { k } => moe::topk(c, ins[0], *k),
        Op::Gather { dim } => moe::gather(c, id, ins, *dim),
        Op::MoeLinear => moe::moe_linear(c, ins),
        // Gated DeltaNet's recurrence carries state between calls: the
        // graph has it as I/O (`state.L.K` in, `new_state.L.K` out), but
        // these ops have no ONNX form yet (a Scan or a custom op).
        Op::CausalConv1d | Op::GatedDeltaRule => Err(GraphError(format!(
            "`{}` (Gated DeltaNet, a recurrent layer) is not exportable to ONNX yet",
            op.name()
        ))),
        Op::Arange { .. } | Op::Full { .. } => layout::constant_op(c, op),
    }
}
