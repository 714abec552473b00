//! The CPU backend: shape and dtype checks for every op, then a call into the
//! kernel files (one family each, each with its reference twin).

pub mod attention;
pub mod elementwise;
pub mod layout;
pub mod linear;
pub mod norm;
pub mod qlinear;
pub mod reduce;
pub mod rope;
pub mod simd;
#[cfg(test)]
pub(crate) mod testutil;
pub mod vmath;

use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{dtype_err, invalid, shape_err, BackendError, Result};
use crate::op::{BinaryOp, Op};
use crate::tensor::{numel, Tensor};

/// Multi-threaded through rayon's global pool (size it with
/// `rayon::ThreadPoolBuilder` before the first op).
#[derive(Default, Clone, Copy, Debug)]
pub struct CpuBackend;

fn arity(op: &Op, inputs: &[&Tensor], lo: usize, hi: usize) -> Result<()> {
    if inputs.len() < lo || inputs.len() > hi {
        let want = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo} to {hi}")
        };
        return invalid(
            op.name(),
            format!("takes {want} tensors, got {}", inputs.len()),
        );
    }
    Ok(())
}

fn f32_of<'a>(op: &'static str, t: &'a Tensor) -> Result<&'a [f32]> {
    t.f32s().map_err(|_| BackendError::DType {
        op,
        msg: format!("expected an f32 activation, found {}", t.dtype()),
    })
}

fn weight_f32(t: &Tensor) -> Result<Vec<f32>> {
    t.to_f32_vec()
}

/// Quantized tensors are read only as a linear's weight (input 1) or an
/// embedding table (input 0); any other use, and casts or constants of a
/// quantized dtype, are dtype errors rather than silent dequantization.
fn check_quant_inputs(op: &Op, inputs: &[&Tensor]) -> Result<()> {
    let allowed = match op {
        Op::Linear => Some(1),
        Op::Embedding => Some(0),
        Op::Cast { dtype } | Op::Arange { dtype, .. } | Op::Full { dtype, .. }
            if dtype.is_quantized() =>
        {
            return dtype_err(
                op.name(),
                format!("cannot make {dtype} tensors; quantize weights in the converter"),
            );
        }
        _ => None,
    };
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype().is_quantized() && Some(i) != allowed {
            let what = match op {
                Op::Linear => "only its weight (second input) may be quantized".to_string(),
                Op::Embedding => "only its table (first input) may be quantized".to_string(),
                _ => "takes no quantized tensors (only linear weights and embedding tables may be)"
                    .to_string(),
            };
            return dtype_err(
                op.name(),
                format!("input {i} is {} {:?}: {what}", t.dtype(), t.shape()),
            );
        }
    }
    Ok(())
}

fn check_dim(op: &'static str, t: &Tensor, dim: usize) -> Result<()> {
    if dim >= t.rank() {
        return shape_err(
            op,
            format!("dimension {dim} is out of range for shape {:?}", t.shape()),
        );
    }
    Ok(())
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        check_quant_inputs(op, inputs)?;
        match op {
            Op::Linear => {
                arity(op, inputs, 2, 3)?;
                let (x, w) = (inputs[0], inputs[1]);
                let xs = f32_of("linear", x)?;
                if w.rank() != 2 || x.rank() == 0 || x.shape()[x.rank() - 1] != w.shape()[1] {
                    return shape_err(
                        "linear",
                        format!(
                            "input {:?} does not match weight {:?} ([out, in])",
                            x.shape(),
                            w.shape()
                        ),
                    );
                }
                let (n, k) = (w.shape()[0], w.shape()[1]);
                let m = x.numel() / k.max(1);
                let bias = match inputs.get(2) {
                    Some(b) if b.shape() != [n] => {
                        return shape_err("linear", format!("bias {:?} for {n} outputs", b.shape()))
                    }
                    Some(b) => Some(weight_f32(b)?),
                    None => None,
                };
                let out = match w.dtype() {
                    DType::Quant(_) => {
                        let (blocks, ty) = w.quant_bytes()?;
                        qlinear::linear(xs, m, k, blocks, ty, n, bias.as_deref())?
                    }
                    _ => linear::linear(xs, m, k, w.floats()?, n, bias.as_deref()),
                };
                let mut shape = x.shape().to_vec();
                *shape.last_mut().unwrap_or(&mut 0) = n;
                Tensor::from_f32(out, shape)
            }
            Op::Matmul => {
                arity(op, inputs, 2, 2)?;
                let (a, b) = (inputs[0].to_f32()?, inputs[1].to_f32()?);
                if a.rank() < 2 || b.rank() < 2 {
                    return shape_err(
                        "matmul",
                        format!("needs matrices, got {:?} @ {:?}", a.shape(), b.shape()),
                    );
                }
                let (m, k) = (a.shape()[a.rank() - 2], a.shape()[a.rank() - 1]);
                let (k2, n) = (b.shape()[b.rank() - 2], b.shape()[b.rank() - 1]);
                let batch_a = &a.shape()[..a.rank() - 2];
                let batch_b = &b.shape()[..b.rank() - 2];
                let b_batched = !batch_b.iter().all(|&d| d == 1);
                if k != k2 || (b_batched && batch_a != batch_b) {
                    return shape_err(
                        "matmul",
                        format!("cannot multiply {:?} @ {:?}", a.shape(), b.shape()),
                    );
                }
                let batch: usize = batch_a.iter().product();
                let out = linear::matmul(a.f32s()?, b.f32s()?, batch, b_batched, m, k, n);
                let mut shape = batch_a.to_vec();
                shape.extend([m, n]);
                Tensor::from_f32(out, shape)
            }
            Op::Embedding => {
                arity(op, inputs, 2, 2)?;
                let (w, ids) = (inputs[0], inputs[1]);
                if w.rank() != 2 {
                    return shape_err(
                        "embedding",
                        format!("table must be [vocab, dim], got {:?}", w.shape()),
                    );
                }
                let (v, d) = (w.shape()[0], w.shape()[1]);
                let idx = ids.i32s().map_err(|_| BackendError::DType {
                    op: "embedding",
                    msg: format!("ids must be i32, found {}", ids.dtype()),
                })?;
                if let Some(&id) = idx.iter().find(|&&id| id < 0 || id as usize >= v) {
                    return invalid(
                        "embedding",
                        format!("token id {id} is outside the vocabulary of {v}"),
                    );
                }
                numel(&[idx.len(), d])?;
                let mut out = vec![0.0f32; idx.len() * d];
                if let DType::Quant(_) = w.dtype() {
                    // Only the picked rows are dequantized.
                    let (blocks, ty) = w.quant_bytes()?;
                    qlinear::embedding_rows(blocks, ty, d, idx, &mut out)?;
                } else {
                    let table = w.floats()?;
                    for (row, &id) in out.chunks_mut(d.max(1)).zip(idx) {
                        table.sub(id as usize * d, d).widen_into(row);
                    }
                }
                let mut shape = ids.shape().to_vec();
                shape.push(d);
                Tensor::from_f32(out, shape)
            }
            Op::RmsNorm { eps } => {
                arity(op, inputs, 2, 2)?;
                let (x, w) = (inputs[0], inputs[1]);
                let d = *x.shape().last().unwrap_or(&0);
                if w.shape() != [d] || d == 0 {
                    return shape_err(
                        "rms_norm",
                        format!(
                            "weight {:?} does not match input {:?}",
                            w.shape(),
                            x.shape()
                        ),
                    );
                }
                Tensor::from_f32(
                    norm::rms_norm(f32_of("rms_norm", x)?, &weight_f32(w)?, d, *eps),
                    x.shape().to_vec(),
                )
            }
            Op::LayerNorm { eps } => {
                arity(op, inputs, 3, 3)?;
                let (x, w, b) = (inputs[0], inputs[1], inputs[2]);
                let d = *x.shape().last().unwrap_or(&0);
                if w.shape() != [d] || b.shape() != [d] || d == 0 {
                    return shape_err(
                        "layer_norm",
                        format!(
                            "weight {:?} / bias {:?} do not match input {:?}",
                            w.shape(),
                            b.shape(),
                            x.shape()
                        ),
                    );
                }
                let out = norm::layer_norm(
                    f32_of("layer_norm", x)?,
                    &weight_f32(w)?,
                    &weight_f32(b)?,
                    d,
                    *eps,
                );
                Tensor::from_f32(out, x.shape().to_vec())
            }
            Op::ApplyRope => {
                arity(op, inputs, 3, 3)?;
                let (x, c, s) = (inputs[0], inputs[1], inputs[2]);
                if x.rank() != 3 || x.shape()[2] % 2 != 0 {
                    return shape_err(
                        "apply_rope",
                        format!("input must be [seq, heads, even dim], got {:?}", x.shape()),
                    );
                }
                let (sq, h, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
                if c.shape() != [sq, d / 2] || s.shape() != [sq, d / 2] {
                    return shape_err(
                        "apply_rope",
                        format!(
                            "cos {:?} / sin {:?} must be [{sq}, {}]",
                            c.shape(),
                            s.shape(),
                            d / 2
                        ),
                    );
                }
                let out = rope::apply_rope(
                    f32_of("apply_rope", x)?,
                    f32_of("apply_rope", c)?,
                    f32_of("apply_rope", s)?,
                    sq,
                    h,
                    d,
                );
                Tensor::from_f32(out, x.shape().to_vec())
            }
            Op::Sdpa { causal, scale } => {
                arity(op, inputs, 3, 3)?;
                let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
                if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
                    return shape_err("sdpa", "q, k and v must be [seq, heads, dim]");
                }
                let sh = attention::SdpaShape {
                    sq: q.shape()[0],
                    hq: q.shape()[1],
                    d: q.shape()[2],
                    sk: k.shape()[0],
                    hk: k.shape()[1],
                    dv: v.shape()[2],
                };
                if k.shape()[2] != sh.d
                    || v.shape()[0] != sh.sk
                    || v.shape()[1] != sh.hk
                    || sh.hk == 0
                    || !sh.hq.is_multiple_of(sh.hk)
                {
                    return shape_err("sdpa", format!("q {:?}, k {:?}, v {:?} do not fit (query heads must be a multiple of key heads)", q.shape(), k.shape(), v.shape()));
                }
                if *causal && sh.sq > sh.sk {
                    return shape_err("sdpa", format!("{} queries but only {} keys", sh.sq, sh.sk));
                }
                let out = attention::sdpa(
                    f32_of("sdpa", q)?,
                    f32_of("sdpa", k)?,
                    f32_of("sdpa", v)?,
                    &sh,
                    *causal,
                    *scale,
                );
                Tensor::from_f32(out, vec![sh.sq, sh.hq, sh.dv])
            }
            Op::Unary(u) => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0].to_f32()?;
                Tensor::from_f32(elementwise::unary(*u, x.f32s()?), x.shape().to_vec())
            }
            Op::Binary(b) => {
                arity(op, inputs, 2, 2)?;
                let (x, y) = (inputs[0], inputs[1]);
                let Some(out_shape) = elementwise::broadcast_shape(x.shape(), y.shape()) else {
                    return shape_err(
                        "binary",
                        format!(
                            "shapes {:?} and {:?} do not broadcast",
                            x.shape(),
                            y.shape()
                        ),
                    );
                };
                numel(&out_shape)?;
                if x.dtype() == DType::I32 && y.dtype() == DType::I32 {
                    return binary_int(*b, x, y, out_shape);
                }
                let (x, y) = (x.to_f32()?, y.to_f32()?);
                let out =
                    elementwise::binary(*b, x.f32s()?, x.shape(), y.f32s()?, y.shape(), &out_shape);
                Tensor::from_f32(out, out_shape)
            }
            Op::Softmax { dim } => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0];
                check_dim("softmax", x, *dim)?;
                let (o, n, i) = reduce::split_dims(x.shape(), *dim);
                Tensor::from_f32(
                    reduce::softmax(f32_of("softmax", x)?, o, n, i),
                    x.shape().to_vec(),
                )
            }
            Op::Reduce {
                op: r,
                dim,
                keepdim,
            } => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0].to_f32()?;
                check_dim("reduce", &x, *dim)?;
                let (o, n, i) = reduce::split_dims(x.shape(), *dim);
                let mut shape = x.shape().to_vec();
                if *keepdim {
                    shape[*dim] = 1
                } else {
                    shape.remove(*dim);
                }
                Tensor::from_f32(reduce::reduce(*r, x.f32s()?, o, n, i), shape)
            }
            Op::Argmax { dim } => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0].to_f32()?;
                check_dim("argmax", &x, *dim)?;
                let (o, n, i) = reduce::split_dims(x.shape(), *dim);
                if n == 0 {
                    return shape_err("argmax", "argmax of an empty dimension");
                }
                let mut shape = x.shape().to_vec();
                shape.remove(*dim);
                Tensor::from_i32(reduce::argmax(x.f32s()?, o, n, i), shape)
            }
            Op::Reshape { shape } => {
                arity(op, inputs, 1, 1)?;
                inputs[0].reshaped(shape.clone())
            }
            Op::Permute { perm } => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0];
                let mut seen = vec![false; x.rank()];
                if perm.len() != x.rank()
                    || perm
                        .iter()
                        .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
                {
                    return shape_err(
                        "permute",
                        format!(
                            "{perm:?} is not a permutation of the {} dimensions of {:?}",
                            x.rank(),
                            x.shape()
                        ),
                    );
                }
                let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
                match x.dtype() {
                    DType::I32 => {
                        Tensor::from_i32(layout::permute(x.i32s()?, x.shape(), perm), shape)
                    }
                    _ => {
                        let x = x.to_f32()?;
                        Tensor::from_f32(layout::permute(x.f32s()?, x.shape(), perm), shape)
                    }
                }
            }
            Op::Concat { dim } => {
                if inputs.is_empty() {
                    return invalid("concat", "needs at least one tensor");
                }
                let first = inputs[0];
                check_dim("concat", first, *dim)?;
                for t in inputs {
                    let same = t.rank() == first.rank()
                        && t.shape()
                            .iter()
                            .zip(first.shape())
                            .enumerate()
                            .all(|(i, (a, b))| i == *dim || a == b);
                    if !same {
                        return shape_err(
                            "concat",
                            format!(
                                "{:?} and {:?} differ outside dimension {dim}",
                                first.shape(),
                                t.shape()
                            ),
                        );
                    }
                }
                let mut shape = first.shape().to_vec();
                shape[*dim] = inputs.iter().map(|t| t.shape()[*dim]).sum();
                numel(&shape)?;
                if inputs.iter().all(|t| t.dtype() == DType::I32) {
                    let parts: Vec<(&[i32], &[usize])> = inputs
                        .iter()
                        .map(|t| Ok((t.i32s()?, t.shape())))
                        .collect::<Result<_>>()?;
                    return Tensor::from_i32(layout::concat(&parts, *dim), shape);
                }
                let owned: Vec<Tensor> =
                    inputs.iter().map(|t| t.to_f32()).collect::<Result<_>>()?;
                let parts: Vec<(&[f32], &[usize])> = owned
                    .iter()
                    .map(|t| Ok((t.f32s()?, t.shape())))
                    .collect::<Result<_>>()?;
                Tensor::from_f32(layout::concat(&parts, *dim), shape)
            }
            Op::Slice {
                dim,
                start,
                end,
                step,
            } => {
                arity(op, inputs, 1, 1)?;
                let x = inputs[0];
                check_dim("slice", x, *dim)?;
                let n = x.shape()[*dim];
                if *step == 0 || start > end || *end > n {
                    return shape_err(
                        "slice",
                        format!("{start}..{end} step {step} of a dimension of size {n}"),
                    );
                }
                if *dim == 0 && *step == 1 {
                    return x.narrow0(*start, *end);
                }
                let mut shape = x.shape().to_vec();
                shape[*dim] = (end - start).div_ceil(*step);
                let dims = reduce::split_dims(x.shape(), *dim);
                match x.dtype() {
                    DType::I32 => {
                        Tensor::from_i32(layout::slice(x.i32s()?, dims, *start, *end, *step), shape)
                    }
                    _ => {
                        let x = x.to_f32()?;
                        Tensor::from_f32(layout::slice(x.f32s()?, dims, *start, *end, *step), shape)
                    }
                }
            }
            Op::IndexSelect { dim } => {
                arity(op, inputs, 2, 2)?;
                let (x, idx) = (inputs[0], inputs[1]);
                check_dim("index_select", x, *dim)?;
                let n = x.shape()[*dim];
                let raw = idx.i32s().map_err(|_| BackendError::DType {
                    op: "index_select",
                    msg: "indexes must be i32".into(),
                })?;
                let picks: Vec<usize> = raw
                    .iter()
                    .map(|&i| {
                        if i >= 0 && (i as usize) < n {
                            Ok(i as usize)
                        } else {
                            invalid(
                                "index_select",
                                format!("index {i} out of range for size {n}"),
                            )
                        }
                    })
                    .collect::<Result<_>>()?;
                let mut shape = x.shape().to_vec();
                shape[*dim] = picks.len();
                let dims = reduce::split_dims(x.shape(), *dim);
                match x.dtype() {
                    DType::I32 => {
                        Tensor::from_i32(layout::index_select(x.i32s()?, dims, &picks), shape)
                    }
                    _ => {
                        let x = x.to_f32()?;
                        Tensor::from_f32(layout::index_select(x.f32s()?, dims, &picks), shape)
                    }
                }
            }
            Op::Where => {
                arity(op, inputs, 3, 3)?;
                let (c, a, b) = (
                    inputs[0].to_f32()?,
                    inputs[1].to_f32()?,
                    inputs[2].to_f32()?,
                );
                let shape = elementwise::broadcast_shape(c.shape(), a.shape())
                    .and_then(|s| elementwise::broadcast_shape(&s, b.shape()));
                let Some(shape) = shape else {
                    return shape_err(
                        "where",
                        format!(
                            "{:?}, {:?}, {:?} do not broadcast",
                            c.shape(),
                            a.shape(),
                            b.shape()
                        ),
                    );
                };
                numel(&shape)?;
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
            Op::Cast { dtype } => {
                arity(op, inputs, 1, 1)?;
                cast(inputs[0], *dtype)
            }
            Op::Arange {
                start,
                end,
                step,
                dtype,
            } => {
                arity(op, inputs, 0, 0)?;
                if *step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
                    return invalid("arange", "step must be non-zero and bounds finite");
                }
                let n = ((end - start) / step).ceil().max(0.0) as usize;
                numel(&[n])?;
                let vals = (0..n).map(|i| start + i as f64 * step);
                match dtype {
                    DType::I32 => Tensor::from_i32(vals.map(|v| v as i32).collect(), vec![n]),
                    _ => cast(
                        &Tensor::from_f32(vals.map(|v| v as f32).collect(), vec![n])?,
                        *dtype,
                    ),
                }
            }
            Op::Full {
                shape,
                value,
                dtype,
            } => {
                arity(op, inputs, 0, 0)?;
                let n = numel(shape)?;
                match dtype {
                    DType::I32 => Tensor::from_i32(vec![*value as i32; n], shape.clone()),
                    _ => cast(
                        &Tensor::from_f32(vec![*value as f32; n], shape.clone())?,
                        *dtype,
                    ),
                }
            }
        }
    }
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

fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    let shape = x.shape().to_vec();
    match dtype {
        DType::F32 => x.to_f32(),
        DType::I32 => Tensor::from_i32(x.to_f32_vec()?.iter().map(|&v| v as i32).collect(), shape),
        DType::F16 => Tensor::from_f16(
            x.to_f32_vec()?
                .iter()
                .map(|&v| half::f16::from_f32(v))
                .collect(),
            shape,
        ),
        DType::BF16 => Tensor::from_bf16(
            x.to_f32_vec()?
                .iter()
                .map(|&v| half::bf16::from_f32(v))
                .collect(),
            shape,
        ),
        DType::Quant(_) => dtype_err("cast", format!("cannot cast to {dtype}")),
    }
}
