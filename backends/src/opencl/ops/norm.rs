//! OpenCL launchers for the `norm` family (program `kernels/norm.cl`):
//! `RmsNorm`, `LayerNorm`, the fused `AddRmsNorm` (one work-group per row,
//! local-memory reductions) and `ApplyRope` (one work-item per rotated
//! pair). `Op::infer` has checked shapes and dtypes; what is left here is
//! the device dtypes of gains and biases (f32 or f16) and index ranges.

use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::opencl::ops::off;
use crate::opencl::{invalid, Arg, OpenClBackend};
use crate::tensor::Tensor;

const PROGRAM: &str = "norm";

/// `NORM_WG` of `norm.cl`: the largest work-group (and local array) size.
const NORM_WG: usize = 256;

pub fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::RmsNorm { .. } | Op::LayerNorm { .. } | Op::AddRmsNorm { .. } | Op::ApplyRope
    )
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    let name = op.name();
    for t in x {
        fits(name, t.offset() + t.numel())?;
    }
    fits(name, out.numel())?;
    match op {
        Op::RmsNorm { eps } => rms_norm(cl, x[0], x[1], *eps, out),
        Op::LayerNorm { eps } => layer_norm(cl, x[0], x[1], x[2], *eps, out),
        Op::AddRmsNorm { eps } => add_rms_norm(cl, x[0], x[1], x[2], *eps, out),
        Op::ApplyRope => rope(cl, x[0], x[1], x[2], out),
        _ => Err(invalid(name, "not a norm op")),
    }
}

/// Kernels index with `int`: every index must stay below `i32::MAX`.
fn fits(op: &'static str, n: usize) -> Result<()> {
    if n > i32::MAX as usize {
        return Err(invalid(
            op,
            format!("{n} elements exceed the kernels' i32 indexing"),
        ));
    }
    Ok(())
}

/// `1` when a gain/bias is f16 on the device, `0` for f32 (bf16 and other
/// floats were widened to f32 at upload).
fn half_flag(op: &'static str, t: &Tensor) -> Result<i32> {
    match t.dtype() {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        d => Err(invalid(op, format!("no kernel for a {d} weight"))),
    }
}

/// Work-group size for rows of `d`: the next power of two (the tree
/// reduction needs one), at most `NORM_WG` and the device's limit, so a
/// short row does not idle most of a 256-wide group.
fn group_size(cl: &OpenClBackend, d: usize) -> usize {
    let cap = NORM_WG.min(cl.ctx.info.max_work_group.max(1));
    // The largest power of two not above the cap.
    let cap = 1usize << (usize::BITS - 1 - cap.leading_zeros());
    d.next_power_of_two().min(cap)
}

/// Rows of `d` in `t` (`d` is the last dim, non-zero by `infer`).
fn rows_of(t: &Tensor, d: usize) -> usize {
    t.numel() / d.max(1)
}

fn rms_norm(
    cl: &OpenClBackend,
    x: &Tensor,
    w: &Tensor,
    eps: f32,
    out: &TensorMeta,
) -> Result<Tensor> {
    let op = "rms_norm";
    let d = w.numel();
    let y = cl.empty(out)?;
    let wg = group_size(cl, d);
    cl.ctx.launch(
        PROGRAM,
        "norm_rms",
        &[rows_of(x, d) * wg],
        Some(&[wg]),
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::Mem(OpenClBackend::mem(w)?),
            Arg::I32(off(w)),
            Arg::I32(half_flag(op, w)?),
            Arg::Mem(OpenClBackend::mem(&y)?),
            Arg::I32(d as i32),
            Arg::F32(eps),
        ],
    )?;
    Ok(y)
}

fn add_rms_norm(
    cl: &OpenClBackend,
    x: &Tensor,
    yin: &Tensor,
    w: &Tensor,
    eps: f32,
    out: &TensorMeta,
) -> Result<Tensor> {
    let op = "add_rms_norm";
    let d = w.numel();
    let rows = rows_of(x, d);
    let y = cl.empty(out)?;
    let wg = group_size(cl, d);
    cl.ctx.launch(
        PROGRAM,
        "norm_add_rms",
        &[rows * wg],
        Some(&[wg]),
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::Mem(OpenClBackend::mem(yin)?),
            Arg::I32(off(yin)),
            Arg::Mem(OpenClBackend::mem(w)?),
            Arg::I32(off(w)),
            Arg::I32(half_flag(op, w)?),
            Arg::Mem(OpenClBackend::mem(&y)?),
            Arg::I32(d as i32),
            Arg::I32(rows as i32),
            Arg::F32(eps),
        ],
    )?;
    Ok(y)
}

fn layer_norm(
    cl: &OpenClBackend,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    eps: f32,
    out: &TensorMeta,
) -> Result<Tensor> {
    let op = "layer_norm";
    let d = w.numel();
    let y = cl.empty(out)?;
    let wg = group_size(cl, d);
    cl.ctx.launch(
        PROGRAM,
        "norm_layer",
        &[rows_of(x, d) * wg],
        Some(&[wg]),
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::Mem(OpenClBackend::mem(w)?),
            Arg::I32(off(w)),
            Arg::I32(half_flag(op, w)?),
            Arg::Mem(OpenClBackend::mem(b)?),
            Arg::I32(off(b)),
            Arg::I32(half_flag(op, b)?),
            Arg::Mem(OpenClBackend::mem(&y)?),
            Arg::I32(d as i32),
            Arg::F32(eps),
        ],
    )?;
    Ok(y)
}

fn rope(
    cl: &OpenClBackend,
    x: &Tensor,
    c: &Tensor,
    s: &Tensor,
    out: &TensorMeta,
) -> Result<Tensor> {
    let (sq, h, d) = (out.shape[0], out.shape[1], out.shape[2]);
    let y = cl.empty(out)?;
    let half = d / 2;
    // Pairs along dim 0 of the range (a wave covers one head's pairs);
    // groups of up to 64 pairs by 1 row.
    let lx = half.clamp(1, 64);
    cl.ctx.launch(
        PROGRAM,
        "norm_rope",
        &[half, sq * h],
        Some(&[lx, 1]),
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::Mem(OpenClBackend::mem(c)?),
            Arg::I32(off(c)),
            Arg::Mem(OpenClBackend::mem(s)?),
            Arg::I32(off(s)),
            Arg::Mem(OpenClBackend::mem(&y)?),
            Arg::I32(h as i32),
            Arg::I32(d as i32),
            Arg::I32((sq * h) as i32),
        ],
    )?;
    Ok(y)
}
