//! Op launchers by family, each beside its `.cl` program. Inputs arrive in
//! device memory and checked by `Op::infer` (`out` is the result's
//! metadata); each family allocates its output and queues its kernels.

pub mod attention;
pub mod host;
pub mod kv;
pub mod linear;
pub mod map;
pub mod norm;
pub mod reduce;
pub mod shape;

use super::{invalid, OpenClBackend};
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::tensor::Tensor;

pub fn supports(op: &Op) -> bool {
    map::supports(op)
        || reduce::supports(op)
        || norm::supports(op)
        || shape::supports(op)
        || linear::supports(op)
        || attention::supports(op)
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    if map::supports(op) {
        map::run(cl, op, x, out)
    } else if reduce::supports(op) {
        reduce::run(cl, op, x, out)
    } else if norm::supports(op) {
        norm::run(cl, op, x, out)
    } else if shape::supports(op) {
        shape::run(cl, op, x, out)
    } else if linear::supports(op) {
        linear::run(cl, op, x, out)
    } else if attention::supports(op) {
        attention::run(cl, op, x, out)
    } else {
        Err(invalid(
            "opencl",
            format!("no OpenCL kernel for `{}`", op.name()),
        ))
    }
}

/// Element offset of `t` in its buffer, as a kernel argument.
pub fn off(t: &Tensor) -> i32 {
    t.offset() as i32
}
