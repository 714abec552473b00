//! Layout ops that need more than one ONNX node, and ops without inputs.
//! (Reshape, Permute and Slice are one node each, in `lower_op`.)

use mllm_backends::{Backend, CpuBackend, Op};

use super::super::proto::attr_int;
use super::Ctx;
use crate::ir::ValueId;
use crate::Result;

/// Joins along `dim`; int32 only when every input is (else all as floats).
pub fn concat(c: &mut Ctx, id: ValueId, ins: &[ValueId], dim: usize) -> Result<String> {
    let int = c.is_int(id);
    let mut xs = vec![];
    for &i in ins {
        xs.push(if int { c.value(i)? } else { c.float(i)? });
    }
    let refs: Vec<&str> = xs.iter().map(|s| s.as_str()).collect();
    Ok(c.b.concat(&refs, dim))
}

/// Rows of `x` along `dim` picked by the (flattened) indexes.
pub fn index_select(c: &mut Ctx, ins: &[ValueId], dim: usize) -> Result<String> {
    let x = c.value(ins[0])?;
    let mut idx = c.value(ins[1])?;
    let im = c.meta(ins[1]);
    if im.rank() != 1 {
        idx = c.b.reshape(&idx, &[im.numel()]);
    }
    Ok(c.b.node("Gather", &[&x, &idx], vec![attr_int("axis", dim as i64)]))
}

/// `arange` and `full` have no inputs: their values are known at export,
/// computed by the CPU backend (so they are exactly what eager computes)
/// and stored as constants.
pub fn constant_op(c: &mut Ctx, op: &Op) -> Result<String> {
    let t = CpuBackend.run(op, &[])?;
    c.w.constant(&mut c.b, &t)
}
