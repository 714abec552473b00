//! The mixture-of-experts ops: `topk` is ONNX TopK (largest, sorted: equal
//! values keep the lower index first, as ours) with its int64 indices cast
//! to int32; `gather` is GatherElements; `moe_linear` gathers each (token,
//! slot)'s expert weight (`Gather` over the stacked `[e, n, k]` experts:
//! `[t, s, n, k]`) and multiplies it by the row (MatMul against
//! `[t, s or 1, k, 1]`). That materializes one weight copy per row: exact
//! and runnable anywhere, sized for the small graphs exports are checked
//! with, not for serving a large MoE model.

use super::super::proto::{attr_int, DataType};
use super::Ctx;
use crate::ir::ValueId;
use crate::Result;

pub fn topk(c: &mut Ctx, x: ValueId, k: usize) -> Result<String> {
    let last = c.meta(x).rank() as i64 - 1;
    let xf = c.float(x)?;
    let kk = c.b.i64s(&[k as i64]);
    let outs = c.b.node_multi(
        "TopK",
        &[&xf, &kk],
        2,
        vec![
            attr_int("axis", last),
            attr_int("largest", 1),
            attr_int("sorted", 1),
        ],
    );
    Ok(c.b.cast(&outs[1], DataType::Int32))
}

/// int32 when `x` is (the result's dtype), else float32.
pub fn gather(c: &mut Ctx, id: ValueId, ins: &[ValueId], dim: usize) -> Result<String> {
    let x = if c.is_int(id) {
        c.value(ins[0])?
    } else {
        c.float(ins[0])?
    };
    let idx = c.value(ins[1])?;
    Ok(c.b.node(
        "GatherElements",
        &[&x, &idx],
        vec![attr_int("axis", dim as i64)],
    ))
}

pub fn moe_linear(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let (xm, im) = (c.meta(ins[0]), c.meta(ins[1]));
    let (t, s, k) = (im.shape[0], im.shape[1], xm.shape[xm.rank() - 1]);
    let shared = xm.rank() == 2;
    let ws = &ins[2..];
    let (stacked, n) = match ws {
        [w] if c.meta(*w).rank() == 3 => (c.float(*w)?, c.meta(*w).shape[1]),
        _ => {
            let mut parts = vec![];
            let n = c.meta(ws[0]).shape[0];
            for &w in ws {
                let f = c.float(w)?;
                parts.push(c.b.reshape(&f, &[1, n, k]));
            }
            let refs: Vec<&str> = parts.iter().map(|p| p.as_str()).collect();
            (c.b.concat(&refs, 0), n)
        }
    };
    let ids = c.value(ins[1])?;
    let picked =
        c.b.node("Gather", &[&stacked, &ids], vec![attr_int("axis", 0)]);
    let x = c.float(ins[0])?;
    let col = c.b.reshape(&x, &[t, if shared { 1 } else { s }, k, 1]);
    let y = c.b.binary("MatMul", &picked, &col);
    Ok(c.b.reshape(&y, &[t, s, n]))
}
