//! The CPU backend's `run_into`: the ops of a decode or prefill step that
//! write their f32 result into a caller's buffer (a compiled graph's arena)
//! with the same kernels `run` uses (their `_into` forms), so both give the
//! same numbers.

use super::{attention, elementwise, fused, linear, merged, norm, qlinear, rope};
use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::tensor::Tensor;

/// The ops `run_into` serves (for f32 results).
pub(super) fn writes_into(op: &Op, out: &TensorMeta) -> bool {
    out.dtype == DType::F32
        && matches!(
            op,
            Op::Linear
                | Op::RmsNorm { .. }
                | Op::AddRmsNorm { .. }
                | Op::MergedLinear { .. }
                | Op::MoeLinear
                | Op::GatedAct { .. }
                | Op::Unary(_)
                | Op::Binary(_)
                | Op::ApplyRope
                | Op::Embedding
                | Op::Sdpa { .. }
        )
}

pub(super) fn run_into(
    op: &Op,
    inputs: &[&Tensor],
    meta: &TensorMeta,
    out: &mut [f32],
) -> Result<bool> {
    if !writes_into(op, meta) {
        return Ok(false);
    }
    if out.len() != meta.numel() {
        return invalid(
            op.name(),
            format!("an output buffer of {} values for {meta}", out.len()),
        );
    }
    let shape = &meta.shape;
    let f32_in = |i: usize| inputs[i].dtype() == DType::F32;
    match op {
        Op::Linear if f32_in(0) => {
            let (x, w) = (inputs[0], inputs[1]);
            let (n, k) = (w.shape()[0], w.shape()[1]);
            let m = x.numel() / k.max(1);
            let bias = inputs.get(2).map(|b| b.to_f32_vec()).transpose()?;
            match w.dtype() {
                DType::Quant(_) => {
                    let (blocks, ty) = w.quant_bytes()?;
                    qlinear::linear_into(x.f32s()?, m, k, blocks, ty, n, bias.as_deref(), out)?
                }
                _ => linear::linear_into(x.f32s()?, m, k, w.floats()?, n, bias.as_deref(), out),
            }
        }
        Op::RmsNorm { eps } => {
            let d = shape[shape.len() - 1];
            norm::rms_norm_into(inputs[0].f32s()?, &inputs[1].f32_cow()?, d, *eps, out);
        }
        Op::AddRmsNorm { eps } => {
            let d = shape[shape.len() - 1];
            let w = inputs[2].f32_cow()?;
            fused::add_rms_norm_into(inputs[0].f32s()?, inputs[1].f32s()?, &w, d, *eps, out);
        }
        Op::MergedLinear { norm_eps, .. } => merged::run_into(inputs, *norm_eps, out)?,
        Op::MoeLinear => super::moe::moe_linear_into(inputs, out)?,
        Op::GatedAct { act } => {
            fused::gated_act_into(*act, inputs[0].f32s()?, inputs[1].f32s()?, out)
        }
        Op::Unary(u) if f32_in(0) => elementwise::unary_into(*u, inputs[0].f32s()?, out),
        Op::Binary(b) if f32_in(0) && f32_in(1) => {
            let (x, y) = (inputs[0], inputs[1]);
            elementwise::binary_into(*b, x.f32s()?, x.shape(), y.f32s()?, y.shape(), shape, out);
        }
        Op::ApplyRope => {
            let (sq, h, d) = (shape[0], shape[1], shape[2]);
            let (x, c, s) = (inputs[0], inputs[1], inputs[2]);
            rope::apply_rope_into(x.f32s()?, c.f32s()?, s.f32s()?, sq, h, d, out);
        }
        Op::Embedding => super::compute::embedding_into(inputs[0], inputs[1], out)?,
        Op::Sdpa {
            causal,
            scale,
            window,
        } => {
            let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
            let sh = attention::SdpaShape::of(q, k, v);
            let (kr, vr) = (attention::Rows::of(k)?, attention::Rows::of(v)?);
            attention::sdpa_into(q.f32s()?, kr, vr, &sh, *causal, *window, *scale, out);
        }
        // Unusual input dtypes: the allocating path, copied into `out`.
        _ => {
            let t = super::CpuBackend.run(op, inputs)?;
            out.copy_from_slice(t.f32s()?);
        }
    }
    Ok(true)
}
