//! Normalisations. RMSNorm is decomposed as the CPU computes it (opset 17
//! has no RMSNormalization): `x * (1 / sqrt(mean(x²) + eps)) * w`;
//! LayerNorm is LayerNormalization (opset 17); the fused residual add +
//! RMSNorm stacks the sum on its norm, as the fused op returns them.

use super::super::builder::Builder;
use super::super::proto::{attr_float, attr_int};
use super::Ctx;
use crate::ir::ValueId;
use crate::Result;

/// RMSNorm over the last dimension of `x` with weight `w`.
pub fn rms_norm(b: &mut Builder, x: &str, w: &str, eps: f32) -> String {
    let sq = b.binary("Mul", x, x);
    let ms = b.reduce("ReduceMean", &sq, &[-1], true);
    let e = b.f32_scalar(eps);
    let var = b.binary("Add", &ms, &e);
    let root = b.node("Sqrt", &[&var], vec![]);
    let inv = b.node("Reciprocal", &[&root], vec![]);
    let xn = b.binary("Mul", x, &inv);
    b.binary("Mul", &xn, w)
}

pub fn layer_norm(c: &mut Ctx, ins: &[ValueId], eps: f32) -> Result<String> {
    let (x, w, bias) = (c.float(ins[0])?, c.float(ins[1])?, c.float(ins[2])?);
    Ok(c.b.node(
        "LayerNormalization",
        &[&x, &w, &bias],
        vec![attr_int("axis", -1), attr_float("epsilon", eps)],
    ))
}

/// `x + y` stacked on `rms_norm(x + y, w)`: `[2, ..]`.
pub fn add_rms_norm(c: &mut Ctx, ins: &[ValueId], eps: f32) -> Result<String> {
    let (x, y, w) = (c.float(ins[0])?, c.float(ins[1])?, c.float(ins[2])?);
    let sum = c.b.binary("Add", &x, &y);
    let normed = rms_norm(&mut c.b, &sum, &w, eps);
    let mut one = vec![1];
    one.extend(&c.meta(ins[0]).shape);
    let a = c.b.reshape(&sum, &one);
    let n = c.b.reshape(&normed, &one);
    Ok(c.b.concat(&[&a, &n], 0))
}
