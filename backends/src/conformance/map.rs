//! Conformance cases of the `map` family: unary maps (every op, inputs in
//! each op's domain, every input dtype), binary ops (equal shapes, scalar,
//! row, column, 4-D and 6-D broadcasts, i32 pairs, mixed dtypes), `where`,
//! casts between every pair of plain dtypes, `full`, `arange` (the device
//! path for integral steps, the host path for fractional ones) and
//! `gated_act`. Shapes include 0-d, one-element and odd sizes, so the
//! kernels' four-wide bodies and their scalar tails both run.

use half::{bf16, f16};

use super::{Case, Gen, NMSE_EXACT, NMSE_F32};
use crate::dtype::DType;
use crate::op::{BinaryOp, Op, UnaryOp};
use crate::tensor::Tensor;

const PLAIN: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::I32];

fn f32_of(v: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_f32(v, shape.to_vec()).expect("conformance shapes are small")
}

/// `t`'s values mapped by `f` (an f32 host tensor).
fn mapped(t: Tensor, f: impl Fn(f32) -> f32) -> Tensor {
    let v = t.f32s().expect("f32").iter().map(|&x| f(x)).collect();
    f32_of(v, t.shape())
}

/// f32 values as `dtype` (rounded to it; i32 truncates).
fn as_dtype(t: &Tensor, dtype: DType) -> Tensor {
    let v = t.to_f32_vec().expect("host");
    let shape = t.shape().to_vec();
    match dtype {
        DType::F16 => Tensor::from_f16(v.iter().map(|&x| f16::from_f32(x)).collect(), shape),
        DType::BF16 => Tensor::from_bf16(v.iter().map(|&x| bf16::from_f32(x)).collect(), shape),
        DType::I32 => Tensor::from_i32(v.iter().map(|&x| x as i32).collect(), shape),
        _ => Ok(t.clone()),
    }
    .expect("conformance shapes are small")
}

/// Inputs of unary op `u` drawn from its domain (the op table's).
fn unary_input(g: &mut Gen, u: UnaryOp, shape: &[usize]) -> Tensor {
    let (lo, hi) = u.domain();
    let (mid, half) = (((lo + hi) / 2.0) as f32, ((hi - lo) / 2.0) as f32);
    mapped(g.f32(shape, 1.0), |x| mid + half * x)
}

/// The inputs of binary op `b` over `(shape_a, shape_b)`: positive bases
/// for pow, divisors away from zero, and small integers for comparisons
/// (so that ties occur).
fn binary_inputs(g: &mut Gen, b: BinaryOp, sa: &[usize], sb: &[usize]) -> (Tensor, Tensor) {
    let small = |g: &mut Gen, s: &[usize]| mapped(g.f32(s, 3.0), |x| x.round());
    match b {
        BinaryOp::Pow => (mapped(g.f32(sa, 3.0), |x| x.abs() + 0.1), g.f32(sb, 2.5)),
        BinaryOp::Div => (
            g.f32(sa, 4.0),
            mapped(g.f32(sb, 3.0), |x| x + 0.5_f32.copysign(x)),
        ),
        BinaryOp::Eq
        | BinaryOp::Ne
        | BinaryOp::Lt
        | BinaryOp::Le
        | BinaryOp::Gt
        | BinaryOp::Ge
        | BinaryOp::Max
        | BinaryOp::Min => (small(g, sa), small(g, sb)),
        _ => (g.f32(sa, 4.0), g.f32(sb, 4.0)),
    }
}

/// Results that are exact on any IEEE device (no rounding choice).
fn binary_nmse(b: BinaryOp) -> f64 {
    match b {
        BinaryOp::Pow | BinaryOp::Div => NMSE_F32,
        _ => NMSE_EXACT,
    }
}

fn ints(g: &mut Gen, shape: &[usize], lo: i32, hi: i32) -> Tensor {
    let n = shape.iter().product();
    let span = (hi as i64 - lo as i64) as usize;
    let v = (0..n)
        .map(|_| (lo as i64 + g.below(span) as i64) as i32)
        .collect();
    Tensor::from_i32(v, shape.to_vec()).expect("conformance shapes are small")
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x3a9);
    let mut all = vec![];
    unary_cases(&mut g, &mut all);
    gated_cases(&mut g, &mut all);
    binary_cases(&mut g, &mut all);
    where_cases(&mut g, &mut all);
    cast_cases(&mut g, &mut all);
    full_cases(&mut all);
    arange_cases(&mut all);
    all
}

fn unary_cases(g: &mut Gen, all: &mut Vec<Case>) {
    let shapes: [&[usize]; 6] = [&[], &[1], &[7], &[33], &[4, 65], &[3, 5, 127]];
    for &u in UnaryOp::ALL {
        for s in shapes {
            let x = unary_input(g, u, s);
            all.push(Case::new(
                format!("unary {u:?} x{s:?}"),
                Op::Unary(u),
                vec![x],
                NMSE_F32,
            ));
        }
    }
    // Other input dtypes are widened to f32 first.
    for (u, dtype) in [
        (UnaryOp::Exp, DType::F16),
        (UnaryOp::Silu, DType::F16),
        (UnaryOp::Sqrt, DType::F16),
        (UnaryOp::Tanh, DType::BF16),
        (UnaryOp::Neg, DType::I32),
        (UnaryOp::Sqrt, DType::I32),
        (UnaryOp::Sigmoid, DType::I32),
    ] {
        for s in [&[5usize, 9][..], &[130]] {
            let x = as_dtype(&unary_input(g, u, s), dtype);
            all.push(Case::new(
                format!("unary {u:?} {dtype} x{s:?}"),
                Op::Unary(u),
                vec![x],
                NMSE_F32,
            ));
        }
    }
}

fn gated_cases(g: &mut Gen, all: &mut Vec<Case>) {
    let shapes: [&[usize]; 4] = [&[1], &[7], &[3, 65], &[2, 5, 127]];
    for act in [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
    ] {
        for s in shapes {
            let (gate, up) = (g.f32(s, 6.0), g.f32(s, 2.0));
            all.push(Case::new(
                format!("gated_act {act:?} x{s:?}"),
                Op::GatedAct { act },
                vec![gate, up],
                NMSE_F32,
            ));
        }
    }
}

fn binary_cases(g: &mut Gen, all: &mut Vec<Case>) {
    let pairs: [(&[usize], &[usize]); 12] = [
        (&[], &[]),
        (&[7], &[7]),
        (&[4, 33], &[4, 33]),
        (&[5, 9], &[]),
        (&[1], &[17]),
        (&[6, 33], &[33]),
        (&[6, 33], &[6, 1]),
        (&[3, 1], &[1, 4]),
        (&[2, 1, 5, 7], &[3, 1, 7]),
        (&[2, 3, 4, 5], &[1, 3, 1, 5]),
        (&[2, 1, 3, 1, 2, 3], &[1, 2, 1, 4, 1, 3]),
        (&[2, 1, 2, 1, 2, 1, 3], &[1, 2, 1, 2, 1, 2, 1]),
    ];
    for &b in BinaryOp::ALL {
        for (sa, sb) in pairs {
            let (x, y) = binary_inputs(g, b, sa, sb);
            all.push(Case::new(
                format!("binary {b:?} {sa:?} {sb:?}"),
                Op::Binary(b),
                vec![x, y],
                binary_nmse(b),
            ));
        }
    }
    // i32 pairs: wrapping arithmetic, floor division with negative
    // operands, integer pow.
    let int_pairs: [(&[usize], &[usize]); 3] = [(&[37], &[37]), (&[4, 9], &[9]), (&[3, 1, 5], &[])];
    for &b in BinaryOp::ALL {
        for (sa, sb) in int_pairs {
            let (x, y) = match b {
                BinaryOp::Div => (ints(g, sa, -50, 50), {
                    let t = ints(g, sb, 1, 9);
                    let v = t.i32s().expect("i32").iter().enumerate();
                    let v = v.map(|(i, &d)| if i % 2 == 0 { d } else { -d }).collect();
                    Tensor::from_i32(v, sb.to_vec()).expect("small")
                }),
                BinaryOp::Pow => (ints(g, sa, -6, 7), ints(g, sb, -2, 9)),
                BinaryOp::Mul => (
                    ints(g, sa, -2_000_000_000, 2_000_000_000),
                    ints(g, sb, -9, 9),
                ),
                _ => (ints(g, sa, -5, 6), ints(g, sb, -5, 6)),
            };
            all.push(Case::new(
                format!("binary {b:?} i32 {sa:?} {sb:?}"),
                Op::Binary(b),
                vec![x, y],
                NMSE_EXACT,
            ));
        }
    }
    // Mixed dtypes: everything is widened to f32.
    let mixed = [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::I32),
        (DType::I32, DType::F16),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F16),
    ];
    for (da, db) in mixed {
        for b in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Lt] {
            for (sa, sb) in [
                (&[5usize, 33][..], &[5usize, 33][..]),
                (&[5, 33], &[33]),
                (&[6, 1], &[]),
            ] {
                let x = as_dtype(&g.f32(sa, 8.0), da);
                let y = as_dtype(&g.f32(sb, 8.0), db);
                all.push(Case::new(
                    format!("binary {b:?} {da}{sa:?} {db}{sb:?}"),
                    Op::Binary(b),
                    vec![x, y],
                    NMSE_EXACT,
                ));
            }
        }
    }
}

fn where_cases(g: &mut Gen, all: &mut Vec<Case>) {
    let triples: [(&[usize], &[usize], &[usize]); 6] = [
        (&[7], &[7], &[7]),
        (&[4, 33], &[4, 33], &[]),
        (&[4, 1], &[1, 9], &[4, 9]),
        (&[1, 5, 1], &[3, 1, 6], &[6]),
        (&[], &[2, 3], &[2, 3]),
        (&[2, 1, 3, 1], &[1, 4, 1, 5], &[2, 4, 3, 1]),
    ];
    for (sc, sa, sb) in triples {
        let c = mapped(g.f32(sc, 1.0), |x| if x > 0.0 { 1.0 } else { 0.0 });
        let (a, b) = (g.f32(sa, 5.0), g.f32(sb, 5.0));
        all.push(Case::new(
            format!("where {sc:?} {sa:?} {sb:?}"),
            Op::Where,
            vec![c, a, b],
            NMSE_EXACT,
        ));
    }
    // An i32 condition and f16 / i32 values.
    let c = ints(g, &[3, 17], -1, 2);
    let a = as_dtype(&g.f32(&[3, 17], 5.0), DType::F16);
    let b = ints(g, &[17], -9, 9);
    all.push(Case::new(
        "where i32[3, 17] f16[3, 17] i32[17]",
        Op::Where,
        vec![c, a, b],
        NMSE_EXACT,
    ));
}

fn cast_cases(g: &mut Gen, all: &mut Vec<Case>) {
    for from in PLAIN {
        for to in PLAIN {
            for s in [&[][..], &[7], &[3, 65]] {
                // Fractions and negatives (i32 truncates toward zero), some
                // past f16's and bf16's exact integers.
                let x = as_dtype(&g.f32(s, 3000.0), from);
                all.push(Case::new(
                    format!("cast {from}->{to} x{s:?}"),
                    Op::Cast { dtype: to },
                    vec![x],
                    NMSE_EXACT,
                ));
            }
        }
    }
    // Out of i32's range: saturation, and NaN to 0.
    let x = f32_of(
        vec![3e9, -3e9, 2.5, -2.5, 0.99, -0.99, 1e30, f32::NAN],
        &[8],
    );
    all.push(Case::new(
        "cast f32->i32 saturating",
        Op::Cast { dtype: DType::I32 },
        vec![x],
        NMSE_EXACT,
    ));
    // Rounding ties (to even), values just past a tie, f16 subnormals and
    // overflow, and i32 values that f32 rounds.
    let bits = [
        0x3f80_8000u32, // bf16 tie, even: down
        0x3f81_8000,    // bf16 tie, odd: up
        0x3f80_8001,    // past the tie: up
        0xbf81_8000,    // negative tie, odd: up in magnitude
        0x3f80_1000,    // f16 tie, even: down
        0x3f80_3000,    // f16 tie, odd: up
        0x3f80_1001,    // past the f16 tie
        0x3580_0000,    // 2^-20: an f16 subnormal
        0x3300_0000,    // 2^-25: f16 underflows to 0 (a tie with 0)
        0x3300_0001,    // just above: the smallest subnormal
        0x477f_f000,    // 65520: f16 overflows to infinity
        0x477f_e000,    // 65504: f16's largest
    ];
    let edge = f32_of(
        bits.iter().map(|&b| f32::from_bits(b)).collect(),
        &[bits.len()],
    );
    for to in [DType::F16, DType::BF16, DType::I32] {
        all.push(Case::new(
            format!("cast f32->{to} rounding edges"),
            Op::Cast { dtype: to },
            vec![edge.clone()],
            NMSE_EXACT,
        ));
    }
    let big = Tensor::from_i32(
        vec![16_777_217, -16_777_219, i32::MAX, i32::MIN, 65_519, 300_001],
        vec![6],
    )
    .expect("small");
    for to in [DType::F32, DType::F16, DType::BF16] {
        all.push(Case::new(
            format!("cast i32->{to} rounding"),
            Op::Cast { dtype: to },
            vec![big.clone()],
            NMSE_EXACT,
        ));
    }
}

fn full_cases(all: &mut Vec<Case>) {
    let shapes: [&[usize]; 5] = [&[], &[1], &[7], &[7, 33], &[2, 3, 5, 7]];
    let values = [
        (DType::F32, 3.3),
        (DType::F32, f64::NEG_INFINITY),
        (DType::I32, -7.9),
        (DType::I32, 1e12),
        (DType::F16, 0.1),
        (DType::BF16, -1234.567),
    ];
    for (dtype, value) in values {
        for shape in shapes {
            all.push(Case::new(
                format!("full {dtype} {value} x{shape:?}"),
                Op::Full {
                    shape: shape.to_vec(),
                    value,
                    dtype,
                },
                vec![],
                NMSE_EXACT,
            ));
        }
    }
}

fn arange_cases(all: &mut Vec<Case>) {
    let ranges = [
        (0.0, 10.0, 1.0),
        (0.0, 1.0, 1.0),
        (5.0, -3.0, -2.0),
        (-3.0, 5000.0, 7.0),
        (0.0, 3000.0, 1.0),
        // Fractional: computed in f64 on the host.
        (0.5, 7.3, 0.7),
        (0.0, 0.95, 0.1),
        (-1.0, 1.0, 0.013),
        // Integral but past 2^24: f32 rounds, so the host computes it.
        (16_777_200.0, 16_777_230.0, 3.0),
    ];
    for (start, end, step) in ranges {
        for dtype in PLAIN {
            all.push(Case::new(
                format!("arange {dtype} {start}..{end} by {step}"),
                Op::Arange {
                    start,
                    end,
                    step,
                    dtype,
                },
                vec![],
                NMSE_EXACT,
            ));
        }
    }
}
