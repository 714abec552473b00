//! The arithmetic ops of the CPU backend: matmuls, norms, rope, attention,
//! elementwise maps, reductions. `Op::infer` has checked shapes and dtypes
//! and computed the output's (`out`) before any of this runs.

use super::{attention, elementwise, f32_of, fused, linear, norm, qlinear, reduce, rope};
use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::infer::TensorMeta;
use crate::op::{BinaryOp, Op};
use crate::tensor::Tensor;

pub(super) fn run(op: &Op, inputs: &[&Tensor], out: TensorMeta) -> Result<Tensor> {
    let shape = out.shape;
    match op {
        Op::Linear => {
            let (x, w) = (inputs[0], inputs[1]);
            let (n, k) = (w.shape()[0], w.shape()[1]);
            let m = x.numel() / k.max(1);
            let bias = inputs.get(2).map(|b| b.to_f32_vec()).transpose()?;
            let xs = f32_of("linear", x)?;
            let y = match w.dtype() {
                DType::Quant(_) => {
                    let (blocks, ty) = w.quant_bytes()?;
                    qlinear::linear(xs, m, k, blocks, ty, n, bias.as_deref())?
                }
                _ => linear::linear(xs, m, k, w.floats()?, n, bias.as_deref()),
            };
            Tensor::from_f32(y, shape)
        }
        Op::Matmul => {
            let (a, b) = (inputs[0].to_f32()?, inputs[1].to_f32()?);
            let (m, k) = (a.shape()[a.rank() - 2], a.shape()[a.rank() - 1]);
            let n = b.shape()[b.rank() - 1];
            let b_batched = !b.shape()[..b.rank() - 2].iter().all(|&d| d == 1);
            let batch: usize = a.shape()[..a.rank() - 2].iter().product();
            let y = linear::matmul(a.f32s()?, b.f32s()?, batch, b_batched, m, k, n);
            Tensor::from_f32(y, shape)
        }
        Op::Embedding => {
            let mut y = vec![0.0f32; shape.iter().product()];
            embedding_into(inputs[0], inputs[1], &mut y)?;
            Tensor::from_f32(y, shape)
        }
        Op::RmsNorm { eps } => {
            let (x, w) = (inputs[0], inputs[1]);
            let d = shape[shape.len() - 1];
            let y = norm::rms_norm(f32_of("rms_norm", x)?, &w.to_f32_vec()?, d, *eps);
            Tensor::from_f32(y, shape)
        }
        Op::LayerNorm { eps } => {
            let (x, w, b) = (inputs[0], inputs[1], inputs[2]);
            let d = shape[shape.len() - 1];
            let y = norm::layer_norm(
                f32_of("layer_norm", x)?,
                &w.to_f32_vec()?,
                &b.to_f32_vec()?,
                d,
                *eps,
            );
            Tensor::from_f32(y, shape)
        }
        Op::ApplyRope => {
            let (x, c, s) = (inputs[0], inputs[1], inputs[2]);
            let (sq, h, d) = (shape[0], shape[1], shape[2]);
            let y = rope::apply_rope(x.f32s()?, c.f32s()?, s.f32s()?, sq, h, d);
            Tensor::from_f32(y, shape)
        }
        Op::Sdpa {
            causal,
            scale,
            window,
        } => sdpa(inputs[0], inputs[1], inputs[2], *causal, *window, *scale),
        Op::CachedSdpa {
            causal,
            scale,
            window,
        } => {
            // The reference decomposition: past rows, then the new ones.
            let (past_k, past_v, len) = (inputs[3], inputs[4], inputs[5]);
            let n = past_len(len, past_k.shape()[0])?;
            let join = |past: &Tensor, new: &Tensor| -> Result<Tensor> {
                let past = past.narrow0(0, n)?;
                // An f16 / q8_0 cache is widened here (the reference path).
                let past = Tensor::from_f32(past.to_f32_vec()?, past.shape().to_vec())?;
                super::shape_ops::run(
                    &Op::Concat { dim: 0 },
                    &[&past, new],
                    Op::Concat { dim: 0 }.infer(&[TensorMeta::of(&past), TensorMeta::of(new)])?,
                )
            };
            let (k, v) = (join(past_k, inputs[1])?, join(past_v, inputs[2])?);
            sdpa(inputs[0], &k, &v, *causal, *window, *scale)
        }
        Op::GatedAct { act } => {
            let y = fused::gated_act(*act, inputs[0].f32s()?, inputs[1].f32s()?);
            Tensor::from_f32(y, shape)
        }
        Op::AddRmsNorm { eps } => {
            let (x, y, w) = (inputs[0], inputs[1], inputs[2]);
            let d = shape[shape.len() - 1];
            let out = fused::add_rms_norm(x.f32s()?, y.f32s()?, &w.f32_cow()?, d, *eps);
            Tensor::from_f32(out, shape)
        }
        Op::MergedLinear { norm_eps, .. } => {
            let mut y = vec![0.0f32; shape.iter().product()];
            super::merged::run_into(inputs, *norm_eps, &mut y)?;
            Tensor::from_f32(y, shape)
        }
        Op::Unary(u) => {
            let x = inputs[0].to_f32()?;
            Tensor::from_f32(elementwise::unary(*u, x.f32s()?), shape)
        }
        Op::Binary(b) => {
            let (x, y) = (inputs[0], inputs[1]);
            if out.dtype == DType::I32 {
                return binary_int(*b, x, y, shape);
            }
            let (x, y) = (x.to_f32()?, y.to_f32()?);
            let z = elementwise::binary(*b, x.f32s()?, x.shape(), y.f32s()?, y.shape(), &shape);
            Tensor::from_f32(z, shape)
        }
        Op::Softmax { dim } => {
            let x = inputs[0];
            let (o, n, i) = reduce::split_dims(x.shape(), *dim);
            Tensor::from_f32(reduce::softmax(x.f32s()?, o, n, i), shape)
        }
        Op::Reduce { op: r, dim, .. } => {
            let x = inputs[0].to_f32()?;
            let (o, n, i) = reduce::split_dims(x.shape(), *dim);
            Tensor::from_f32(reduce::reduce(*r, x.f32s()?, o, n, i), shape)
        }
        Op::Argmax { dim } => {
            let x = inputs[0].to_f32()?;
            let (o, n, i) = reduce::split_dims(x.shape(), *dim);
            Tensor::from_i32(reduce::argmax(x.f32s()?, o, n, i), shape)
        }
        Op::TopK { k } => {
            let x = inputs[0].f32s()?;
            let n = inputs[0].shape().last().copied().unwrap_or(0);
            let rows = x.len() / n.max(1);
            Tensor::from_i32(super::topk::topk(x, rows, n, *k), shape)
        }
        Op::MoeLinear => {
            let mut y = vec![0.0f32; shape.iter().product()];
            super::moe::moe_linear_into(inputs, &mut y)?;
            Tensor::from_f32(y, shape)
        }
        Op::CausalConv1d => {
            let (x, w, state) = (inputs[0].f32s()?, inputs[1].to_f32()?, inputs[2].f32s()?);
            let (c, kernel) = (w.shape()[0], w.shape()[1]);
            let y = super::conv1d::causal_conv1d(x, w.f32s()?, state, c, kernel);
            Tensor::from_f32(y, shape)
        }
        Op::GatedDeltaRule => {
            let (q, v) = (inputs[0].shape(), inputs[2].shape());
            let d = super::delta_rule::Dims {
                t: q[0],
                hk: q[1],
                dk: q[2],
                hv: v[1],
                dv: v[2],
            };
            let x = super::delta_rule::Inputs {
                q: inputs[0].f32s()?,
                k: inputs[1].f32s()?,
                v: inputs[2].f32s()?,
                g: inputs[3].f32s()?,
                beta: inputs[4].f32s()?,
                state: inputs[5].f32s()?,
            };
            Tensor::from_f32(super::delta_rule::gated_delta_rule(d, &x), shape)
        }
        Op::Where => where_(inputs, shape),
        _ => unreachable!("{} is a shape op", op.name()),
    }
}

/// Rows of table `w` picked by `ids`, into `out` (`ids.len() * dim`); a
/// quantized table dequantizes only the picked rows.
pub(super) fn embedding_into(w: &Tensor, ids: &Tensor, out: &mut [f32]) -> Result<()> {
    let (v, d) = (w.shape()[0], w.shape()[1]);
    let idx = ids.i32s()?;
    if let Some(&id) = idx.iter().find(|&&id| id < 0 || id as usize >= v) {
        return invalid(
            "embedding",
            format!("token id {id} is outside the vocabulary of {v}"),
        );
    }
    if let DType::Quant(_) = w.dtype() {
        let (blocks, ty) = w.quant_bytes()?;
        qlinear::embedding_rows(blocks, ty, d, idx, out)?;
    } else {
        let table = w.floats()?;
        for (row, &id) in out.chunks_mut(d.max(1)).zip(idx) {
            table.sub(id as usize * d, d).widen_into(row);
        }
    }
    Ok(())
}

/// The valid rows of a cache of `capacity` rows, from `past_len`'s data.
fn past_len(len: &Tensor, capacity: usize) -> Result<usize> {
    let n = len.i32s()?[0];
    match usize::try_from(n) {
        Ok(n) if n <= capacity => Ok(n),
        _ => invalid(
            "cached_sdpa",
            format!("past length {n} is outside a cache of {capacity} rows"),
        ),
    }
}

fn sdpa(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    window: usize,
    scale: f32,
) -> Result<Tensor> {
    let sh = attention::SdpaShape::of(q, k, v);
    if causal && sh.sq > sh.sk {
        return crate::error::shape_err(
            "sdpa",
            format!("{} queries but only {} keys", sh.sq, sh.sk),
        );
    }
    let (kr, vr) = (attention::Rows::of(k)?, attention::Rows::of(v)?);
    let y = attention::sdpa(q.f32s()?, kr, vr, &sh, causal, window, scale);
    Tensor::from_f32(y, vec![sh.sq, sh.hq, sh.dv])
}

fn binary_int(b: BinaryOp, x: &Tensor, y: &Tensor, shape: Vec<usize>) -> Result<Tensor> {
    let (xs, ys) = (x.i32s()?, y.i32s()?);
    let (sa, sb) = (
        elementwise::broadcast_strides(x.shape(), &shape),
        elementwise::broadcast_strides(y.shape(), &shape),
    );
    let mut out = Vec::with_capacity(shape.iter().product());
    let mut failed = false;
    elementwise::for_each_broadcast(&shape, &sa, &sb, |_, i, j| {
        out.push(elementwise::binary_i32(b, xs[i], ys[j]).unwrap_or_else(|| {
            failed = true;
            0
        }))
    });
    if failed {
        return invalid("binary", "integer division by zero");
    }
    Tensor::from_i32(out, shape)
}

fn where_(inputs: &[&Tensor], shape: Vec<usize>) -> Result<Tensor> {
    let (c, a, b) = (
        inputs[0].to_f32()?,
        inputs[1].to_f32()?,
        inputs[2].to_f32()?,
    );
    let (sc, sa, sb) = (
        elementwise::broadcast_strides(c.shape(), &shape),
        elementwise::broadcast_strides(a.shape(), &shape),
        elementwise::broadcast_strides(b.shape(), &shape),
    );
    let (cv, av, bv) = (c.f32s()?, a.f32s()?, b.f32s()?);
    // Two walks: one pairs (cond, a), the other (cond, b) indexes.
    let mut pick_a = Vec::with_capacity(shape.iter().product());
    elementwise::for_each_broadcast(&shape, &sc, &sa, |_, ic, ia| {
        pick_a.push((cv[ic] != 0.0, av[ia]))
    });
    let mut out = Vec::with_capacity(pick_a.len());
    elementwise::for_each_broadcast(&shape, &sb, &sb, |o, ib, _| {
        out.push(if pick_a[o].0 { pick_a[o].1 } else { bv[ib] })
    });
    Tensor::from_f32(out, shape)
}
