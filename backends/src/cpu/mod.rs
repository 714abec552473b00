//! The CPU backend: `Op::infer` checks shapes and dtypes of every op, then a
//! dispatch calls into the kernel files (one family each, each with its
//! reference twin): `compute.rs` for the arithmetic ops, `shape_ops.rs` for
//! layout ops, casts and constants.

mod attend;
pub mod attention;
mod compute;
pub mod elementwise;
pub mod fused;
mod into;
pub mod layout;
pub mod linear;
pub mod merged;
pub mod norm;
pub mod pool;
pub mod qlinear;
pub mod reduce;
pub mod rope;
mod shape_ops;
pub mod simd;
#[cfg(test)]
pub(crate) mod testutil;
pub mod vmath;

use crate::backend::Backend;
use crate::error::{BackendError, Result};
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::tensor::Tensor;

/// Multi-threaded through rayon's global pool (size it with
/// `rayon::ThreadPoolBuilder` before the first op).
#[derive(Default, Clone, Copy, Debug)]
pub struct CpuBackend;

fn f32_of<'a>(op: &'static str, t: &'a Tensor) -> Result<&'a [f32]> {
    t.f32s().map_err(|_| BackendError::DType {
        op,
        msg: format!("expected an f32 activation, found {}", t.dtype()),
    })
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn writes_into(&self, op: &Op, out: &TensorMeta) -> bool {
        into::writes_into(op, out)
    }

    fn run_into(&self, op: &Op, inputs: &[&Tensor], out: &mut [f32]) -> Result<bool> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
        let meta = op.infer(&metas)?;
        into::run_into(op, inputs, &meta, out)
    }

    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
        let out = op.infer(&metas)?;
        match op {
            Op::Linear
            | Op::Matmul
            | Op::Embedding
            | Op::RmsNorm { .. }
            | Op::LayerNorm { .. }
            | Op::ApplyRope
            | Op::Sdpa { .. }
            | Op::CachedSdpa { .. }
            | Op::GatedAct { .. }
            | Op::AddRmsNorm { .. }
            | Op::MergedLinear { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Softmax { .. }
            | Op::Reduce { .. }
            | Op::Argmax { .. }
            | Op::Where => compute::run(op, inputs, out),
            Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::IndexSelect { .. }
            | Op::Cast { .. }
            | Op::Arange { .. }
            | Op::Full { .. } => shape_ops::run(op, inputs, out),
        }
    }
}
