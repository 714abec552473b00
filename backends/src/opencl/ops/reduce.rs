//! OpenCL launchers for the `reduce` family (program `kernels/reduce.cl`):
//! `softmax`, `reduce` (sum, mean, max, min) and `argmax` along any one
//! dimension, the input viewed as `[outer, n, inner]` around it as the CPU
//! (`cpu::reduce::split_dims`) views it.

use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::{Op, ReduceOp};
use crate::opencl::{invalid, Arg, OpenClBackend};
use crate::tensor::Tensor;

use super::off;

const PROGRAM: &str = "reduce";

/// Work-items per group: 64 fits every GPU's wave / warp size and the
/// smallest `CL_DEVICE_MAX_WORK_GROUP_SIZE` we expect.
const GROUP: usize = 64;

pub fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::Softmax { .. } | Op::Reduce { .. } | Op::Argmax { .. }
    )
}

/// The kernels' input dtype code (widened at load).
fn dtype_code(op: &'static str, t: &Tensor) -> Result<i32> {
    match t.dtype() {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::I32 => Ok(2),
        other => Err(invalid(op, format!("cannot reduce a {other} tensor"))),
    }
}

/// `(LX, LY)`: columns side by side and work-items along the reduced
/// dimension, powers of two with `LX * LY` the group size.
fn tile(cl: &OpenClBackend, n: usize, inner: usize) -> (usize, usize) {
    let mut group = GROUP;
    while group > cl.ctx.info.max_work_group.max(1) {
        group /= 2;
    }
    let lx = inner.next_power_of_two().min(group);
    let mut ly = group / lx;
    // No more work-items along n than values to share (a short dim).
    while ly > 1 && ly / 2 >= n {
        ly /= 2;
    }
    (lx, ly)
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    let t = x[0];
    let dim = match op {
        Op::Softmax { dim } | Op::Reduce { dim, .. } | Op::Argmax { dim } => *dim,
        _ => return Err(invalid("opencl", format!("no kernel for {}", op.name()))),
    };
    let shape = t.shape();
    let outer: usize = shape[..dim].iter().product();
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let y = cl.empty(out)?;
    if out.numel() == 0 {
        return Ok(y);
    }
    let too_big = |v: usize| i32::try_from(v).is_err();
    if too_big(t.numel()) || too_big(t.offset() + t.numel()) {
        return Err(invalid(
            op.name(),
            format!("{:?} is too large for 32-bit indices", shape),
        ));
    }
    let (lx, ly) = tile(cl, n, inner);
    let global = [inner, ly, outer];
    let local = [lx, ly, 1];
    let (xm, ym) = (OpenClBackend::mem(t)?, OpenClBackend::mem(&y)?);
    let dims = [
        Arg::I32(outer as i32),
        Arg::I32(n as i32),
        Arg::I32(inner as i32),
    ];
    match op {
        Op::Softmax { .. } => {
            let mut args = vec![Arg::Mem(xm), Arg::I32(off(t))];
            args.extend(dims);
            args.extend([Arg::Mem(ym), Arg::Local(lx * ly * 4)]);
            cl.ctx
                .launch(PROGRAM, "reduce_softmax", &global, Some(&local), &args)?;
        }
        Op::Reduce { op: r, .. } => {
            let code = match r {
                ReduceOp::Sum => 0,
                ReduceOp::Mean => 1,
                ReduceOp::Max => 2,
                ReduceOp::Min => 3,
            };
            let mut args = vec![
                Arg::Mem(xm),
                Arg::I32(off(t)),
                Arg::I32(dtype_code("reduce", t)?),
            ];
            args.extend(dims);
            args.extend([Arg::I32(code), Arg::Mem(ym), Arg::Local(lx * ly * 4)]);
            cl.ctx
                .launch(PROGRAM, "reduce_reduce", &global, Some(&local), &args)?;
        }
        _ => {
            let mut args = vec![
                Arg::Mem(xm),
                Arg::I32(off(t)),
                Arg::I32(dtype_code("argmax", t)?),
            ];
            args.extend(dims);
            args.extend([
                Arg::Mem(ym),
                Arg::Local(lx * ly * 4),
                Arg::Local(lx * ly * 4),
            ]);
            cl.ctx
                .launch(PROGRAM, "reduce_argmax", &global, Some(&local), &args)?;
        }
    }
    Ok(y)
}
