//! Conformance cases of the mixture-of-experts ops: `topk` (router
//! choices: k from 1 to the whole row, odd rows, ties, ranks 1 to 3),
//! `gather` (every dim of ranks 1 to 3, fewer and more indexes than the
//! dim holds, f32 / i32 / f16 inputs) and `moe_linear` over every weight
//! dtype `linear` takes, shared (`[t, k]`) and per-slot (`[t, s, k]`)
//! activations, stacked (`[e, n, k]`) and listed expert weights, with
//! experts no token picks. Quantized weights are compared at `NMSE_QUANT`
//! for the reason `linear`'s are.

use super::linear::weight;
use super::{Case, Gen, NMSE_EXACT, NMSE_F16, NMSE_F32, NMSE_QUANT};
use crate::dtype::DType;
use crate::op::Op;
use crate::quant::QuantType;
use crate::tensor::Tensor;

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x30e);
    let mut v = vec![];
    topk(&mut g, &mut v);
    gather(&mut g, &mut v);
    moe_linear(&mut g, &mut v);
    v
}

fn topk(g: &mut Gen, v: &mut Vec<Case>) {
    let sets: [(&[usize], usize); 7] = [
        (&[8], 1),
        (&[5, 128], 8),
        (&[2, 3, 33], 5),
        (&[7, 1], 1),
        (&[1, 60], 60),
        (&[70, 9], 2),
        (&[3, 64], 64),
    ];
    for (shape, k) in sets {
        v.push(Case::new(
            format!("topk x{shape:?} k {k}"),
            Op::TopK { k },
            vec![g.f32(shape, 2.0)],
            NMSE_EXACT,
        ));
    }
    // Ties (values rounded to halves): the lower index first.
    let t = g.f32(&[6, 40], 2.0);
    let tied = t
        .f32s()
        .expect("f32")
        .iter()
        .map(|x| (x * 2.0).round() / 2.0);
    let tied = Tensor::from_f32(tied.collect(), vec![6, 40]).expect("ties");
    v.push(Case::new(
        "topk ties x[6, 40] k 7",
        Op::TopK { k: 7 },
        vec![tied],
        NMSE_EXACT,
    ));
}

fn gather(g: &mut Gen, v: &mut Vec<Case>) {
    // (x shape, dim, index count along dim)
    let sets: [(&[usize], usize, usize); 8] = [
        (&[7], 0, 12),
        (&[5, 7], 1, 3),
        (&[5, 7], 0, 9),
        (&[2, 3, 4], 2, 6),
        (&[3, 1, 5], 1, 4),
        (&[4, 6, 2], 0, 1),
        (&[33, 65], 1, 65),
        (&[2, 0, 3], 2, 2),
    ];
    for (s, (shape, dim, count)) in sets.into_iter().enumerate() {
        let dt = [DType::F32, DType::I32, DType::F16][s % 3];
        let mut is = shape.to_vec();
        is[dim] = count;
        let inputs = vec![g.typed(dt, shape, 4.0), g.ids(&is, shape[dim])];
        v.push(Case::new(
            format!("gather {dt}{shape:?} dim {dim} idx{is:?}"),
            Op::Gather { dim },
            inputs,
            NMSE_EXACT,
        ));
    }
}

const Q4_0: DType = DType::Quant(QuantType::Q4_0);
const Q4_1: DType = DType::Quant(QuantType::Q4_1);
const Q8_0: DType = DType::Quant(QuantType::Q8_0);
const Q6_K: DType = DType::Quant(QuantType::Q6_K);

/// One `moe_linear` case: weight dtype, tokens, slots, experts, out and in
/// features, per-slot activations, one stacked weight.
type MoeSet = (DType, usize, usize, usize, usize, usize, bool, bool);

fn moe_linear(g: &mut Gen, v: &mut Vec<Case>) {
    let sets: [MoeSet; 12] = [
        (DType::F32, 1, 1, 1, 7, 33, false, true),
        (DType::F32, 5, 2, 9, 16, 65, false, false),
        (DType::F32, 17, 4, 6, 33, 100, true, true),
        (DType::F16, 3, 2, 4, 65, 33, true, false),
        (DType::BF16, 9, 3, 5, 16, 64, false, true),
        (Q4_0, 1, 4, 9, 32, 64, false, true),
        (Q4_0, 40, 4, 8, 48, 96, false, true),
        (Q4_1, 7, 2, 3, 33, 32, true, false),
        (Q8_0, 12, 3, 7, 64, 128, true, true),
        (Q8_0, 2, 1, 9, 16, 32, false, false),
        (Q6_K, 6, 2, 5, 16, 256, false, true),
        (Q4_0, 70, 8, 64, 16, 64, false, true),
    ];
    for (wt, t, s, e, n, k, per_slot, stacked) in sets {
        let xs: Vec<usize> = if per_slot { vec![t, s, k] } else { vec![t, k] };
        let mut inputs = vec![g.f32(&xs, 1.0), g.ids(&[t, s], e)];
        if stacked {
            inputs.push(weight(g, wt, &[e, n, k]));
        } else {
            inputs.extend((0..e).map(|_| weight(g, wt, &[n, k])));
        }
        let layout = if stacked { "stacked" } else { "listed" };
        let tol = match wt {
            DType::F32 | DType::BF16 => NMSE_F32,
            DType::F16 => NMSE_F16,
            _ => NMSE_QUANT,
        };
        v.push(Case::new(
            format!("moe_linear {wt} x{xs:?} ids[{t}, {s}] {e} {layout} experts [{n}, {k}]"),
            Op::MoeLinear,
            inputs,
            tol,
        ));
    }
}
