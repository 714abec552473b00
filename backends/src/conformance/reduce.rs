//! Conformance cases of the `reduce` family: softmax, reductions and argmax
//! over every dimension of rank 1-4 tensors with odd sizes (so work-group
//! tiles are partly empty), both `keepdim`s, f16 and i32 inputs where the
//! op widens them, and argmax over repeated values (first index on ties).

use super::{Case, Gen, NMSE_EXACT, NMSE_F32};
use crate::dtype::DType;
use crate::op::{Op, ReduceOp};
use crate::tensor::Tensor;

const SHAPES: &[&[usize]] = &[
    &[1],
    &[7],
    &[1000],
    &[3, 5],
    &[1, 129],
    &[65, 1],
    &[2, 3, 7],
    &[5, 33, 3],
    &[2, 3, 5, 7],
    &[3, 1, 65, 2],
];

/// Values drawn from a handful of levels, so maxima repeat.
fn ties(g: &mut Gen, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n).map(|_| g.below(4) as f32 - 1.5).collect();
    Tensor::from_f32(v, shape.to_vec()).expect("conformance shapes are small")
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x5edce);
    let mut out = vec![];
    for shape in SHAPES {
        for dim in 0..shape.len() {
            let x = g.f32(shape, 4.0);
            out.push(Case::new(
                format!("softmax x{shape:?} dim {dim}"),
                Op::Softmax { dim },
                vec![x.clone()],
                NMSE_F32,
            ));
            for (op, name) in [
                (ReduceOp::Sum, "sum"),
                (ReduceOp::Mean, "mean"),
                (ReduceOp::Max, "max"),
                (ReduceOp::Min, "min"),
            ] {
                for keepdim in [false, true] {
                    let exact = matches!(op, ReduceOp::Max | ReduceOp::Min);
                    out.push(Case::new(
                        format!("reduce {name} x{shape:?} dim {dim} keepdim {keepdim}"),
                        Op::Reduce { op, dim, keepdim },
                        vec![x.clone()],
                        if exact { NMSE_EXACT } else { NMSE_F32 },
                    ));
                }
            }
            out.push(Case::new(
                format!("argmax x{shape:?} dim {dim}"),
                Op::Argmax { dim },
                vec![x],
                NMSE_EXACT,
            ));
            out.push(Case::new(
                format!("argmax ties x{shape:?} dim {dim}"),
                Op::Argmax { dim },
                vec![ties(&mut g, shape)],
                NMSE_EXACT,
            ));
        }
    }
    // Widened inputs: f16 and i32 (reduce and argmax read any float or int).
    for dtype in [DType::F16, DType::I32] {
        for (shape, dim) in [
            (&[5usize, 33, 3][..], 1usize),
            (&[7, 65][..], 1),
            (&[65, 7][..], 0),
        ] {
            let x = g.typed(dtype, shape, 3.0);
            out.push(Case::new(
                format!("reduce sum {dtype} x{shape:?} dim {dim}"),
                Op::Reduce {
                    op: ReduceOp::Sum,
                    dim,
                    keepdim: false,
                },
                vec![x.clone()],
                NMSE_F32,
            ));
            out.push(Case::new(
                format!("reduce max {dtype} x{shape:?} dim {dim}"),
                Op::Reduce {
                    op: ReduceOp::Max,
                    dim,
                    keepdim: true,
                },
                vec![x.clone()],
                NMSE_EXACT,
            ));
            out.push(Case::new(
                format!("argmax {dtype} x{shape:?} dim {dim}"),
                Op::Argmax { dim },
                vec![x],
                NMSE_EXACT,
            ));
        }
    }
    // Large magnitudes: softmax must subtract the max first.
    out.push(Case::new(
        "softmax x[4,300]*80 dim 1",
        Op::Softmax { dim: 1 },
        vec![g.f32(&[4, 300], 80.0)],
        NMSE_F32,
    ));
    out
}
