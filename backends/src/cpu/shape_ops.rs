//! Layout ops, casts and constants of the CPU backend. Reshapes and
//! outer-dimension slices are views (no copy); the rest copy into new
//! buffers. `Op::infer` has checked the inputs before any of this runs.

use super::{gather, layout, reduce};
use crate::dtype::DType;
use crate::error::{dtype_err, invalid, Result};
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::tensor::{numel, Tensor};

pub(super) fn run(op: &Op, inputs: &[&Tensor], out: TensorMeta) -> Result<Tensor> {
    let shape = out.shape;
    match op {
        Op::Reshape { .. } => inputs[0].reshaped(shape),
        Op::Permute { perm } => {
            let x = inputs[0];
            match x.dtype() {
                DType::I32 => Tensor::from_i32(layout::permute(x.i32s()?, x.shape(), perm), shape),
                _ => {
                    let x = x.to_f32()?;
                    Tensor::from_f32(layout::permute(x.f32s()?, x.shape(), perm), shape)
                }
            }
        }
        Op::Concat { dim } => {
            if out.dtype == DType::I32 {
                let parts: Vec<(&[i32], &[usize])> = inputs
                    .iter()
                    .map(|t| Ok((t.i32s()?, t.shape())))
                    .collect::<Result<_>>()?;
                return Tensor::from_i32(layout::concat(&parts, *dim), shape);
            }
            let owned: Vec<Tensor> = inputs.iter().map(|t| t.to_f32()).collect::<Result<_>>()?;
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
            let x = inputs[0];
            if *dim == 0 && *step == 1 {
                return x.narrow0(*start, *end);
            }
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
        Op::Gather { dim } => {
            let (x, idx) = (inputs[0], inputs[1]);
            let is = idx.i32s()?;
            gather::check_indexes(is, x.shape()[*dim])?;
            let d = gather::GatherDims::of(x.shape(), idx.shape(), *dim);
            match x.dtype() {
                DType::I32 => Tensor::from_i32(gather::gather(x.i32s()?, is, d), shape),
                _ => {
                    let x = x.to_f32()?;
                    Tensor::from_f32(gather::gather(x.f32s()?, is, d), shape)
                }
            }
        }
        Op::IndexSelect { dim } => {
            let (x, idx) = (inputs[0], inputs[1]);
            let n = x.shape()[*dim];
            let picks: Vec<usize> = idx
                .i32s()?
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
        Op::Cast { dtype } => cast(inputs[0], *dtype),
        Op::Arange {
            start, step, dtype, ..
        } => {
            let n = shape[0];
            let vals = (0..n).map(|i| start + i as f64 * step);
            match dtype {
                DType::I32 => Tensor::from_i32(vals.map(|v| v as i32).collect(), shape),
                _ => cast(
                    &Tensor::from_f32(vals.map(|v| v as f32).collect(), shape)?,
                    *dtype,
                ),
            }
        }
        Op::Full { value, dtype, .. } => {
            let n = numel(&shape)?;
            match dtype {
                DType::I32 => Tensor::from_i32(vec![*value as i32; n], shape),
                _ => cast(&Tensor::from_f32(vec![*value as f32; n], shape)?, *dtype),
            }
        }
        _ => unreachable!("{} is a compute op", op.name()),
    }
}

pub(crate) fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
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
