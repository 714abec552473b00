//! Linears, matmuls and embeddings: `linear` is MatMul against the weight
//! stored transposed (`[in, out]`) plus Add for a bias; `merged_linear`
//! (q/k/v or gate/up merged by the passes) is its parts side by side;
//! `embedding` is Gather over the table's rows.

use mllm_backends::quant::QuantType;
use mllm_backends::DType;

use super::super::quant;
use super::norm::rms_norm;
use super::Ctx;
use crate::ir::ValueId;
use crate::Result;

/// The activation a linear over weight `w` reads: a w8a8 weight kept
/// quantized gets `x` rounded to int8 per token, as the CPU kernel does.
fn activation(c: &mut Ctx, x: ValueId, w: ValueId) -> Result<String> {
    let xs = c.float(x)?;
    match c.kept(w) {
        Some((_, DType::Quant(QuantType::W8A8 { .. }))) => {
            let shape = c.meta(x).shape.clone();
            Ok(quant::fake_quant_rows(&mut c.b, &xs, &shape))
        }
        _ => Ok(xs),
    }
}

pub fn linear(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let x = activation(c, ins[0], ins[1])?;
    let w = c.weight_t(ins[1])?;
    let y = c.b.binary("MatMul", &x, &w);
    match ins.get(2) {
        Some(&bias) => {
            let b = c.float(bias)?;
            Ok(c.b.binary("Add", &y, &b))
        }
        None => Ok(y),
    }
}

/// `a [.., m, k] @ b [.., k, n]`; a `b` whose batch dimensions are all 1 is
/// shared by every batch (made 2-D so broadcasting cannot add dimensions).
pub fn matmul(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let a = c.float(ins[0])?;
    let mut b = c.float(ins[1])?;
    let bm = c.meta(ins[1]);
    let r = bm.rank();
    if r > 2 && bm.shape[..r - 2].iter().all(|&d| d == 1) {
        let (k, n) = (bm.shape[r - 2], bm.shape[r - 1]);
        b = c.b.reshape(&b, &[k, n]);
    }
    Ok(c.b.binary("MatMul", &a, &b))
}

pub fn embedding(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let ids = c.value(ins[1])?;
    if let Some((name, dtype)) = c.kept(ins[0]) {
        let shape = c.meta(ins[0]).shape.clone();
        let ids_shape = c.meta(ins[1]).shape.clone();
        return quant::gather_rows(&mut c.w, &mut c.b, name, dtype, &shape, &ids, &ids_shape);
    }
    let table = c.float(ins[0])?;
    Ok(c.b.node(
        "Gather",
        &[&table, &ids],
        vec![super::super::proto::attr_int("axis", 0)],
    ))
}

/// `x [.., k]`, optional RMSNorm weight, then weights `w_i [n_i, k]` ->
/// the results `[rows * n_i]` back to back (1-D), as the fused CPU op
/// lays them out.
pub fn merged(c: &mut Ctx, ins: &[ValueId], norm_eps: Option<f32>) -> Result<String> {
    let mut x = c.float(ins[0])?;
    let mut first = 1;
    if let Some(eps) = norm_eps {
        let g = c.float(ins[1])?;
        x = rms_norm(&mut c.b, &x, &g, eps);
        first = 2;
    }
    let xm = c.meta(ins[0]);
    let rows = xm.numel() / xm.shape.last().copied().unwrap_or(1).max(1);
    let shape = xm.shape.clone();
    let mut parts = vec![];
    for &w in &ins[first..] {
        let n = c.meta(w).shape[0];
        let xw = match c.kept(w) {
            Some((_, DType::Quant(QuantType::W8A8 { .. }))) => {
                quant::fake_quant_rows(&mut c.b, &x, &shape)
            }
            _ => x.clone(),
        };
        let wt = c.weight_t(w)?;
        let y = c.b.binary("MatMul", &xw, &wt);
        parts.push(c.b.reshape(&y, &[rows * n]));
    }
    let refs: Vec<&str> = parts.iter().map(|s| s.as_str()).collect();
    Ok(c.b.concat(&refs, 0))
}
