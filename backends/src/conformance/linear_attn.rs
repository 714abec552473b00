//! Conformance cases of Gated DeltaNet's ops: `causal_conv1d` (kernels 1
//! to 4, odd channel counts, one token and a prefill, f32 / f16 / bf16
//! taps) and `gated_delta_rule` (decode and prefill lengths across the
//! CPU's chunk of 64, grouped heads, odd head sizes). q and k have unit
//! rows and g, beta the ranges a model gives them, so the recurrence stays
//! bounded as it does in a model.

use super::{Case, Gen, NMSE_F32};
use crate::dtype::DType;
use crate::op::Op;
use crate::tensor::Tensor;

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0xde17a);
    let mut v = vec![];
    for (t, c, kernel, wt) in [
        (1, 24, 4, DType::F32),
        (9, 37, 4, DType::BF16),
        (70, 16, 3, DType::F16),
        (5, 8, 1, DType::F32),
    ] {
        v.push(Case::new(
            format!("causal_conv1d x[{t}, {c}] w {wt}[{c}, {kernel}]"),
            Op::CausalConv1d,
            vec![
                g.f32(&[t, c], 2.0),
                g.typed(wt, &[c, kernel], 1.0),
                g.f32(&[kernel - 1, c], 2.0),
            ],
            NMSE_F32,
        ));
    }
    for (t, hk, hv, dk, dv) in [
        (1, 2, 4, 16, 8),
        (11, 1, 3, 7, 5),
        (70, 2, 2, 8, 12),
        (130, 1, 1, 4, 4),
    ] {
        v.push(Case::new(
            format!("gated_delta_rule t {t} heads {hk}/{hv} dims {dk}/{dv}"),
            Op::GatedDeltaRule,
            vec![
                unit_rows(&mut g, &[t, hk, dk]),
                unit_rows(&mut g, &[t, hk, dk]),
                g.f32(&[t, hv, dv], 1.0),
                map(g.f32(&[t, hv], 1.0), |x| -x.abs()),
                map(g.f32(&[t, hv], 1.0), |x| x.abs().min(1.0)),
                g.f32(&[hv, dk, dv], 0.5),
            ],
            NMSE_F32,
        ));
    }
    v
}

fn map(t: Tensor, f: impl Fn(f32) -> f32) -> Tensor {
    let shape = t.shape().to_vec();
    let data = t.f32s().expect("f32").iter().map(|&x| f(x)).collect();
    Tensor::from_f32(data, shape).expect("same shape")
}

/// Random rows of unit length along the last dim.
fn unit_rows(g: &mut Gen, shape: &[usize]) -> Tensor {
    let t = g.f32(shape, 1.0);
    let n = shape[shape.len() - 1];
    let mut data = t.f32s().expect("f32").to_vec();
    for r in data.chunks_mut(n) {
        let norm = r.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-3);
        r.iter_mut().for_each(|a| *a /= norm);
    }
    Tensor::from_f32(data, shape.to_vec()).expect("same shape")
}
