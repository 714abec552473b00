//! Conformance cases of the `linear` family: `linear` over every weight
//! dtype a device keeps (f32, f16, q4_0, q4_1, q8_0, q6_K), two it keeps as
//! q8_0 (q5_0, iq4_nl) and three that are widened at upload (bf16, w4a16,
//! q5_1), at decode and prefill row counts (1 to
//! 70: both the GEMV and the tiled GEMM, one and two tiles), odd k for
//! float weights, odd n, with and without (f32 / f16) bias, batched
//! inputs; `matmul` with shared and batched b, f16 and i32 operands;
//! `merged_linear` with 2 and 3 parts, mixed dtypes, with and without the
//! norm; `embedding` over every table dtype.
//!
//! Quantized weights are compared at `NMSE_QUANT`: the CPU quantizes the
//! activations to int8 for them, the device computes in f32.

use super::{Case, Gen, NMSE_EXACT, NMSE_F16, NMSE_F32, NMSE_QUANT};
use crate::dtype::DType;
use crate::op::Op;
use crate::quant::QuantType;
use crate::tensor::Tensor;

const Q4_0: DType = DType::Quant(QuantType::Q4_0);
const Q4_1: DType = DType::Quant(QuantType::Q4_1);
const Q8_0: DType = DType::Quant(QuantType::Q8_0);
const Q6_K: DType = DType::Quant(QuantType::Q6_K);
const Q4_K: DType = DType::Quant(QuantType::Q4_K);
const Q5_K: DType = DType::Quant(QuantType::Q5_K);
const W4A16: DType = DType::Quant(QuantType::W4A16 { group: 32 });
const Q5_0: DType = DType::Quant(QuantType::Q5_0);
const Q5_1: DType = DType::Quant(QuantType::Q5_1);
const IQ4_NL: DType = DType::Quant(QuantType::IQ4_NL);

/// Row counts: decode (GEMV up to 4 rows), then prefill (GEMM: ragged,
/// one full 64-row tile, two tiles).
const ROWS: [usize; 8] = [1, 2, 3, 4, 5, 17, 64, 70];
/// Output features: one, odd, just past a 32 / 64 / 128 boundary.
const NS: [usize; 5] = [1, 7, 33, 65, 129];

/// Values of a `dtype` weight `[rows, cols]`; q6_K, q4_K, q5_K, q5_0, q5_1
/// and iq4_nl (which the quantizer cannot make yet) are random blocks with
/// a small scale.
pub(super) fn weight(g: &mut Gen, dtype: DType, shape: &[usize]) -> Tensor {
    if let DType::Quant(q @ (QuantType::Q5_0 | QuantType::Q5_1 | QuantType::IQ4_NL)) = dtype {
        return random_block32(g, q, shape);
    }
    if let DType::Quant(q @ (QuantType::Q4_K | QuantType::Q5_K)) = dtype {
        return random_k45(g, q, shape);
    }
    if dtype != Q6_K {
        return g.typed(dtype, shape, 1.0);
    }
    let blocks = shape.iter().product::<usize>() / 256;
    let mut bytes = Vec::with_capacity(blocks * 210);
    for _ in 0..blocks {
        // ql[128], qh[64]: any bits; scales[16]: int8 in -32..32; d: f16.
        bytes.extend((0..192).map(|_| g.below(256) as u8));
        bytes.extend((0..16).map(|_| (g.below(64) as i32 - 32) as i8 as u8));
        let d = half::f16::from_f32(0.0005 + 0.001 * g.unit().abs());
        bytes.extend(d.to_le_bytes());
    }
    Tensor::from_quant(bytes, QuantType::Q6_K, shape.to_vec()).expect("whole q6_K blocks")
}

/// Random q4_K / q5_K super-blocks (no quantizer makes them yet): f16 d
/// and dmin sized so weights stay near 1 (6-bit scales reach 63, codes 15
/// or 31), any bits for the packed scales and mins and the codes.
fn random_k45(g: &mut Gen, q: QuantType, shape: &[usize]) -> Tensor {
    let blocks = shape.iter().product::<usize>() / 256;
    let top = if q == QuantType::Q5_K { 31.0 } else { 15.0 };
    let mut bytes = Vec::with_capacity(blocks * q.type_size());
    for _ in 0..blocks {
        let d = half::f16::from_f32((0.2 + g.unit().abs()) / (63.0 * top));
        let dmin = half::f16::from_f32(0.5 * g.unit().abs() / 63.0);
        bytes.extend(d.to_le_bytes());
        bytes.extend(dmin.to_le_bytes());
        bytes.extend((4..q.type_size()).map(|_| g.below(256) as u8));
    }
    Tensor::from_quant(bytes, q, shape.to_vec()).expect("whole super-blocks")
}

/// Random 32-value blocks of `q`: an f16 scale at byte 0 sized so weights
/// stay near 1 (iq4_nl's values reach 127, q5's codes 31), q5_1's minimum
/// at byte 2, any bits for the codes.
fn random_block32(g: &mut Gen, q: QuantType, shape: &[usize]) -> Tensor {
    let blocks = shape.iter().product::<usize>() / 32;
    let (size, top) = (
        q.type_size(),
        if q == QuantType::IQ4_NL { 127.0 } else { 31.0 },
    );
    let mut bytes = Vec::with_capacity(blocks * size);
    for _ in 0..blocks {
        let d = half::f16::from_f32((0.2 + g.unit().abs()) / top);
        bytes.extend(d.to_le_bytes());
        let mut head = 2;
        if q == QuantType::Q5_1 {
            bytes.extend(half::f16::from_f32(-0.5 * g.unit().abs()).to_le_bytes());
            head = 4;
        }
        bytes.extend((head..size).map(|_| g.below(256) as u8));
    }
    Tensor::from_quant(bytes, q, shape.to_vec()).expect("whole 32-value blocks")
}

/// Row lengths each weight dtype takes: odd ones for floats, whole blocks
/// (one, odd counts, many per GEMV thread) for ggml types.
fn ks(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => &[33, 65, 1, 256, 100],
        Q6_K | Q4_K | Q5_K => &[256, 512, 768],
        _ => &[32, 96, 256, 64],
    }
}

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 | DType::BF16 => NMSE_F32,
        DType::F16 => NMSE_F16,
        _ => NMSE_QUANT,
    }
}

fn shape(lead: &[usize], last: usize) -> Vec<usize> {
    let mut s = lead.to_vec();
    s.push(last);
    s
}

fn linear_cases(g: &mut Gen, v: &mut Vec<Case>) {
    let dtypes = [
        DType::F32,
        DType::F16,
        Q4_0,
        Q4_1,
        Q8_0,
        Q6_K,
        DType::BF16,
        W4A16,
        Q5_0,
        Q5_1,
        IQ4_NL,
        Q4_K,
        Q5_K,
    ];
    for (d, &wt) in dtypes.iter().enumerate() {
        let ks = ks(wt);
        for (i, &rows) in ROWS.iter().enumerate() {
            let (k, mut n) = (ks[(i + d) % ks.len()], NS[(i + d) % NS.len()]);
            // A single output of a quantized weight would be judged against
            // itself: the CPU's int8 activation rounding is an absolute
            // error (about sum |w x| / 254), so a dot that happens to cancel
            // to near 0 fails the relative NMSE by chance (iq4_nl's did).
            if matches!(wt, DType::Quant(_)) && rows == 1 {
                n = n.max(7);
            }
            let bias = (i + d) % 2 == 0;
            push_linear(g, v, wt, &[rows], k, n, bias.then_some(DType::F32));
        }
        // Batched input, long rows (several units per GEMV thread), and an
        // f16 bias.
        let k_long = if matches!(wt, Q6_K | Q4_K | Q5_K) {
            4096
        } else {
            4096 + ks[0] % 32
        };
        push_linear(g, v, wt, &[2, 3], ks[0], 33, Some(DType::F32));
        push_linear(g, v, wt, &[1], k_long, 7, Some(DType::F16));
        push_linear(g, v, wt, &[9], k_long, 70, None);
    }
}

fn push_linear(
    g: &mut Gen,
    v: &mut Vec<Case>,
    wt: DType,
    lead: &[usize],
    k: usize,
    n: usize,
    bias: Option<DType>,
) {
    let xs = shape(lead, k);
    let mut inputs = vec![g.f32(&xs, 1.0), weight(g, wt, &[n, k])];
    let mut name = format!("linear {wt} x{xs:?} w[{n},{k}]");
    if let Some(bt) = bias {
        inputs.push(g.typed(bt, &[n], 1.0));
        name.push_str(&format!(" bias {bt}"));
    }
    v.push(Case::new(name, Op::Linear, inputs, tol(wt)));
}

fn matmul_cases(g: &mut Gen, v: &mut Vec<Case>) {
    // (a shape, b shape)
    let shapes: [(&[usize], &[usize]); 10] = [
        (&[1, 33], &[33, 7]),
        (&[5, 64], &[64, 65]),
        (&[70, 33], &[33, 129]),
        (&[3, 1], &[1, 3]),
        (&[2, 3, 16], &[16, 5]),
        (&[2, 17, 40], &[2, 40, 9]),
        (&[2, 3, 4, 33], &[2, 3, 33, 7]),
        (&[2, 3, 5, 8], &[1, 8, 6]),
        (&[3, 65, 70], &[3, 70, 66]),
        (&[4, 2, 100], &[1, 1, 100, 3]),
    ];
    for (a, b) in shapes {
        let inputs = vec![g.f32(a, 1.0), g.f32(b, 1.0)];
        v.push(Case::new(
            format!("matmul a{a:?} b{b:?}"),
            Op::Matmul,
            inputs,
            NMSE_F32,
        ));
    }
    for (at, bt) in [
        (DType::F16, DType::F32),
        (DType::F32, DType::F16),
        (DType::I32, DType::F32),
    ] {
        let (a, b): (&[usize], &[usize]) = (&[2, 6, 33], &[2, 33, 10]);
        let inputs = vec![g.typed(at, a, 1.0), g.typed(bt, b, 1.0)];
        v.push(Case::new(
            format!("matmul a{a:?} {at} b{b:?} {bt}"),
            Op::Matmul,
            inputs,
            NMSE_F32,
        ));
    }
}

/// A merged linear's parts' dtypes, x's leading shape, k, and the norm
/// gain's dtype (none: no norm).
type MergedSet = (&'static [DType], &'static [usize], usize, Option<DType>);

fn merged_cases(g: &mut Gen, v: &mut Vec<Case>) {
    let sets: [MergedSet; 10] = [
        (&[DType::F32, DType::F32], &[1], 33, None),
        (&[DType::F32, DType::F16], &[3], 65, Some(DType::F32)),
        (&[Q4_0, Q4_0, Q4_0], &[1], 64, Some(DType::F32)),
        (&[Q4_0, Q4_0, Q4_0], &[17], 64, None),
        (&[Q8_0, Q4_1], &[2, 3], 96, Some(DType::F16)),
        (&[Q6_K, Q8_0, Q4_0], &[2], 256, Some(DType::F32)),
        (&[Q6_K, Q6_K], &[70], 256, None),
        (&[DType::F16, Q4_0, DType::F32], &[5], 128, Some(DType::F32)),
        (&[Q4_1, DType::F16], &[64], 32, Some(DType::F16)),
        (&[Q8_0, Q8_0, Q8_0], &[4], 4096, Some(DType::F32)),
    ];
    for (s, (dts, lead, k, norm)) in sets.into_iter().enumerate() {
        let xs = shape(lead, k);
        let mut inputs = vec![g.f32(&xs, 2.0)];
        if let Some(gt) = norm {
            inputs.push(g.typed(gt, &[k], 1.5));
        }
        let mut name = format!("merged_linear x{xs:?}");
        let mut worst = NMSE_F32;
        for (p, &wt) in dts.iter().enumerate() {
            let n = NS[(s + p) % NS.len()];
            inputs.push(weight(g, wt, &[n, k]));
            name.push_str(&format!(" {wt}[{n},{k}]"));
            worst = worst.max(tol(wt));
        }
        if let Some(gt) = norm {
            name.push_str(&format!(" norm {gt}"));
        }
        let op = Op::MergedLinear {
            parts: dts.len(),
            norm_eps: norm.map(|_| 1e-6),
        };
        v.push(Case::new(name, op, inputs, worst));
    }
}

fn embedding_cases(g: &mut Gen, v: &mut Vec<Case>) {
    let tables = [
        (DType::F32, 7, NMSE_EXACT),
        (DType::F32, 33, NMSE_EXACT),
        (DType::F16, 65, NMSE_EXACT),
        (DType::BF16, 16, NMSE_EXACT),
        (Q4_0, 64, NMSE_F32),
        (Q4_1, 32, NMSE_F32),
        (Q8_0, 96, NMSE_F32),
        (Q6_K, 256, NMSE_F32),
        (Q4_K, 256, NMSE_F32),
        (Q5_K, 512, NMSE_F32),
        (W4A16, 64, NMSE_F16),
    ];
    let id_shapes: [&[usize]; 3] = [&[1], &[5], &[2, 3]];
    for (t, (wt, d, tol)) in tables.into_iter().enumerate() {
        for (i, ids) in id_shapes.iter().enumerate() {
            let vocab = [1, 11, 50][(t + i) % 3];
            let inputs = vec![weight(g, wt, &[vocab, d]), g.ids(ids, vocab)];
            v.push(Case::new(
                format!("embedding {wt} w[{vocab},{d}] ids{ids:?}"),
                Op::Embedding,
                inputs,
                tol,
            ));
        }
    }
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x11ea);
    let mut v = vec![];
    linear_cases(&mut g, &mut v);
    matmul_cases(&mut g, &mut v);
    merged_cases(&mut g, &mut v);
    embedding_cases(&mut g, &mut v);
    v
}
