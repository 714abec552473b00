//! OpenCL launchers for the `linear` family (program `kernels/linear.cl`):
//! `linear` and `merged_linear` (here), `matmul` and `embedding`
//! (`linear_gather.rs`). A linear picks, per weight dtype, the GEMV kernel
//! for decode-sized inputs (at most `GEMV_ROWS` rows: the weights are
//! streamed once for all rows) or the tiled GEMM for prefill; both write at
//! an element offset of their output buffer, which is how every part of a
//! merged linear lands in its slice of the one output.

#[path = "linear_gather.rs"]
mod gather;

use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::opencl::{invalid, Arg, ClMem, OpenClBackend};
use crate::quant::QuantType;
use crate::tensor::Tensor;

const PROGRAM: &str = "linear";

/// Rows up to which a linear runs the GEMV kernels (`GEMV_R` in the .cl).
const GEMV_ROWS: usize = 4;
/// Threads of a GEMV / row-norm work-group (`GEMV_WG`).
const GEMV_WG: usize = 64;
/// Output tile edge of the GEMM (`TILE`) and its work-group edge (`GEMM_T`).
const TILE: usize = 64;
const GEMM_T: usize = 16;

pub fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::Linear | Op::Matmul | Op::MergedLinear { .. } | Op::Embedding
    )
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    match op {
        Op::Linear => linear(cl, x, out),
        Op::MergedLinear { norm_eps, .. } => merged(cl, x, *norm_eps, out),
        Op::Matmul => gather::matmul(cl, x, out),
        Op::Embedding => gather::embedding(cl, x, out),
        _ => Err(invalid(
            "opencl",
            format!("no linear-family kernel for `{}`", op.name()),
        )),
    }
}

/// The kernels stamped out for one weight dtype.
struct Kernels {
    gemv: &'static str,
    gemm: &'static str,
    embed: &'static str,
}

/// The kernels for weights (or an embedding table) of `dtype`, or an error
/// naming the dtype (the device keeps only these; others are widened at
/// upload).
fn kernels_for(op: &'static str, dtype: DType) -> Result<Kernels> {
    let k = |gemv, gemm, embed| Kernels { gemv, gemm, embed };
    Ok(match dtype {
        DType::F32 => k("linear_gemv_f32", "linear_gemm_f32", "linear_embed_f32"),
        DType::F16 => k("linear_gemv_f16", "linear_gemm_f16", "linear_embed_f16"),
        DType::Quant(QuantType::Q4_0) => {
            k("linear_gemv_q4_0", "linear_gemm_q4_0", "linear_embed_q4_0")
        }
        DType::Quant(QuantType::Q4_1) => {
            k("linear_gemv_q4_1", "linear_gemm_q4_1", "linear_embed_q4_1")
        }
        DType::Quant(QuantType::Q8_0) => {
            k("linear_gemv_q8_0", "linear_gemm_q8_0", "linear_embed_q8_0")
        }
        DType::Quant(QuantType::Q6_K) => {
            k("linear_gemv_q6_k", "linear_gemm_q6_k", "linear_embed_q6_k")
        }
        DType::Quant(QuantType::Q4_K) => {
            k("linear_gemv_q4_k", "linear_gemm_q4_k", "linear_embed_q4_k")
        }
        DType::Quant(QuantType::Q5_K) => {
            k("linear_gemv_q5_k", "linear_gemm_q5_k", "linear_embed_q5_k")
        }
        other => {
            return Err(invalid(
                op,
                format!("the OpenCL kernels do not read {other} weights"),
            ))
        }
    })
}

/// `v` as a `uint` kernel argument.
fn u32_arg(op: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| invalid(op, format!("{v} exceeds the kernels' 32-bit indexing")))
}

/// `v` as an `int` kernel argument.
fn i32_arg(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid(op, format!("{v} exceeds the kernels' 32-bit indexing")))
}

/// The offset of `t` in units of its dtype (elements; blocks for ggml
/// types), as the kernels take it.
fn unit_offset(op: &'static str, t: &Tensor) -> Result<u32> {
    let bs = t.dtype().block_size();
    if !t.offset().is_multiple_of(bs) {
        return Err(invalid(
            op,
            format!("a {} view starts inside a block", t.dtype()),
        ));
    }
    u32_arg(op, t.offset() / bs)
}

/// The kind code of an f32 / f16 vector read once per output (a bias or a
/// norm gain): 1 for f32, 2 for f16.
fn vec_kind(op: &'static str, t: &Tensor) -> Result<i32> {
    match t.dtype() {
        DType::F32 => Ok(1),
        DType::F16 => Ok(2),
        other => Err(invalid(op, format!("a {other} bias or norm weight"))),
    }
}

/// Where a linear reads its input and writes its result: `rows` rows of
/// `k` f32 values at element `x_off` of `x`, and `rows x n` outputs at
/// element `out_off` of `out`.
struct Io<'a> {
    x: &'a ClMem,
    x_off: u32,
    rows: usize,
    out: &'a ClMem,
    out_off: u32,
}

/// Queues `io.out[io.out_off..][.. rows * n] = x @ w^T (+ bias)`.
fn linear_into(
    cl: &OpenClBackend,
    op: &'static str,
    io: &Io,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> Result<()> {
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let kern = kernels_for(op, w.dtype())?;
    if !k.is_multiple_of(w.dtype().block_size()) {
        return Err(invalid(
            op,
            format!("{} rows of {k} values are not whole blocks", w.dtype()),
        ));
    }
    let wm = OpenClBackend::mem(w)?;
    let (bm, b_off, b_kind) = match bias {
        Some(b) => (
            OpenClBackend::mem(b)?,
            unit_offset(op, b)?,
            vec_kind(op, b)?,
        ),
        // No bias: any buffer fills the argument; kind 0 never reads it.
        None => (wm, 0, 0),
    };
    let args = [
        Arg::Mem(io.x),
        Arg::U32(io.x_off),
        Arg::Mem(wm),
        Arg::U32(unit_offset(op, w)?),
        Arg::Mem(bm),
        Arg::U32(b_off),
        Arg::I32(b_kind),
        Arg::Mem(io.out),
        Arg::U32(io.out_off),
        Arg::I32(i32_arg(op, io.rows)?),
        Arg::I32(i32_arg(op, k)?),
        Arg::I32(i32_arg(op, n)?),
    ];
    // The kernels index rows of x and of the output with 32-bit products.
    i32_arg(op, io.rows.saturating_mul(k.max(n)))?;
    if io.rows <= GEMV_ROWS {
        cl.ctx
            .launch(PROGRAM, kern.gemv, &[n * GEMV_WG], Some(&[GEMV_WG]), &args)
    } else {
        let global = [n.div_ceil(TILE) * GEMM_T, io.rows.div_ceil(TILE) * GEMM_T];
        cl.ctx
            .launch(PROGRAM, kern.gemm, &global, Some(&[GEMM_T, GEMM_T]), &args)
    }
}

fn linear(cl: &OpenClBackend, inputs: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    let (x, w) = (inputs[0], inputs[1]);
    let k = w.shape()[1];
    let y = cl.empty(out)?;
    let io = Io {
        x: OpenClBackend::mem(x)?,
        x_off: unit_offset("linear", x)?,
        rows: x.numel() / k.max(1),
        out: OpenClBackend::mem(&y)?,
        out_off: 0,
    };
    linear_into(cl, "linear", &io, w, inputs.get(2).copied())?;
    Ok(y)
}

/// `merged_linear`: the optional RMSNorm into a scratch buffer (one
/// work-group per row), then each part's linear at its offset of the one
/// output (parts back to back, each `[rows, n_i]`).
fn merged(
    cl: &OpenClBackend,
    inputs: &[&Tensor],
    norm_eps: Option<f32>,
    out: &TensorMeta,
) -> Result<Tensor> {
    const OP: &str = "merged_linear";
    let x = inputs[0];
    let k = x.shape().last().copied().unwrap_or(0);
    let rows = x.numel() / k.max(1);
    let y = cl.empty(out)?;
    let ym = OpenClBackend::mem(&y)?;
    let (scratch, weights) = match norm_eps {
        Some(eps) => {
            let g = inputs[1];
            let tmp = cl.ctx.alloc(rows * k * 4)?;
            let args = [
                Arg::Mem(OpenClBackend::mem(x)?),
                Arg::U32(unit_offset(OP, x)?),
                Arg::Mem(OpenClBackend::mem(g)?),
                Arg::U32(unit_offset(OP, g)?),
                Arg::I32(vec_kind(OP, g)?),
                Arg::Mem(&tmp),
                Arg::I32(i32_arg(OP, k)?),
                Arg::F32(eps),
            ];
            let global = [rows * GEMV_WG];
            cl.ctx
                .launch(PROGRAM, "linear_rms_rows", &global, Some(&[GEMV_WG]), &args)?;
            (Some(tmp), &inputs[2..])
        }
        None => (None, &inputs[1..]),
    };
    let (xm, x_off) = match &scratch {
        Some(tmp) => (&**tmp, 0),
        None => (OpenClBackend::mem(x)?, unit_offset(OP, x)?),
    };
    let mut at = 0usize;
    for w in weights {
        let io = Io {
            x: xm,
            x_off,
            rows,
            out: ym,
            out_off: u32_arg(OP, at)?,
        };
        linear_into(cl, OP, &io, w, None)?;
        at += rows * w.shape()[0];
    }
    Ok(y)
}
