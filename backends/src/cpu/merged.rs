//! The merged linear the graph's fusion makes of q/k/v or gate/up
//! projections (several weights reading one input), optionally with the
//! RMSNorm before them folded in. The fast version runs the very kernels of
//! the decomposed ops: the norm is `rms_norm_into` into a per-thread scratch
//! row buffer (never an arena tensor), then the quantized weights share one
//! activation quantization and one pool dispatch (`qlinear::linear_parts_into`);
//! float weights run `linear_into` one after the other. Every part gives
//! bit for bit what its own `linear` gives.

use std::cell::Cell;

use super::{linear, norm, qlinear};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

thread_local! {
    /// The normed rows of the last merged linear with a norm.
    static NORMED: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// At most this many parts go through one dispatch without a heap list.
const STACK_PARTS: usize = 8;

/// `Op::MergedLinear` over its inputs (`x`, the norm weight with
/// `norm_eps`, the weights), into `out`.
pub(super) fn run_into(inputs: &[&Tensor], norm_eps: Option<f32>, out: &mut [f32]) -> Result<()> {
    let x = inputs[0];
    let k = x.shape().last().copied().unwrap_or(0);
    let (g, weights) = match norm_eps {
        Some(_) => (Some(inputs[1].f32_cow()?), &inputs[2..]),
        None => (None, &inputs[1..]),
    };
    merged_linear_into(x.f32s()?, k, g.as_deref().zip(norm_eps), weights, out)
}

/// `out` = `[linear(x', w_0) | linear(x', w_1) | ...]` flattened, where
/// `x' = rms_norm(x, g, eps)` with `norm = Some((g, eps))`, else `x`;
/// `x` is `[m, k]` row-major. Shapes were checked by `Op::infer`.
pub fn merged_linear_into(
    x: &[f32],
    k: usize,
    norm: Option<(&[f32], f32)>,
    weights: &[&Tensor],
    out: &mut [f32],
) -> Result<()> {
    let mut normed = NORMED.take();
    let xs: &[f32] = match norm {
        Some((g, eps)) => {
            let out = super::refill(&mut normed, x.len(), 0.0);
            norm::rms_norm_into(x, g, k, eps, out);
            out
        }
        None => x,
    };
    let r = parts_into(xs, k, weights, out);
    NORMED.set(normed);
    r
}

fn parts_into(x: &[f32], k: usize, weights: &[&Tensor], out: &mut [f32]) -> Result<()> {
    let m = x.len() / k.max(1);
    let all_quant = weights.iter().all(|w| matches!(w.dtype(), DType::Quant(_)));
    if all_quant && weights.len() <= STACK_PARTS {
        let (blocks, ty) = weights[0].quant_bytes()?;
        let first = qlinear::Part {
            w: blocks,
            ty,
            n: weights[0].shape()[0],
        };
        let mut parts = [first; STACK_PARTS];
        for (p, w) in parts.iter_mut().zip(weights).skip(1) {
            let (blocks, ty) = w.quant_bytes()?;
            *p = qlinear::Part {
                w: blocks,
                ty,
                n: w.shape()[0],
            };
        }
        return qlinear::linear_parts_into(x, m, k, &parts[..weights.len()], out);
    }
    let mut off = 0;
    for w in weights {
        let n = w.shape()[0];
        let o = &mut out[off..off + m * n];
        match w.dtype() {
            DType::Quant(_) => {
                let (blocks, ty) = w.quant_bytes()?;
                qlinear::linear_into(x, m, k, blocks, ty, n, None, o)?;
            }
            _ => linear::linear_into(x, m, k, w.floats()?, n, None, o),
        }
        off += m * n;
    }
    Ok(())
}

/// The reference twin: `rms_norm_ref`, then each weight's reference linear
/// (dequantized to f32), flattened and concatenated.
pub fn merged_linear_ref(
    x: &[f32],
    k: usize,
    norm: Option<(&[f32], f32)>,
    weights: &[&Tensor],
) -> Result<Vec<f32>> {
    let m = x.len() / k.max(1);
    let xs = match norm {
        Some((g, eps)) => norm::rms_norm_ref(x, g, k, eps),
        None => x.to_vec(),
    };
    let mut out = Vec::new();
    for w in weights {
        let n = w.shape()[0];
        let part = match w.dtype() {
            DType::Quant(_) => {
                let (blocks, ty) = w.quant_bytes()?;
                qlinear::linear_ref(&xs, m, k, blocks, ty, n, None)?
            }
            _ => linear::linear_ref(&xs, m, k, w.floats()?, n, None),
        };
        out.extend(part);
    }
    Ok(out)
}
