//! Every weight type a GGUF file can hold runs on the OpenCL backend (issue
//! #26 item 1): each type's blocks as llama.cpp's tools wrote them (the
//! committed fixtures of `tests/fixtures/quants` and `gguf/quant`), loaded
//! as the model loader loads them (imported types repacked or widened),
//! prepared for the device (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K kept as they are;
//! Q5_0, IQ4_NL and TQ2_0 repacked exactly into Q8_0, MXFP4 too where its
//! scales are f16s; every other type widened to f16 or f32), and multiplied
//! there: the result equals the f32 reference of
//! gguf-py's values within the rounding of f16 weights. Needs an OpenCL device (PoCL in CI); `MLLM_SKIP_OPENCL=1`
//! skips knowingly.

#![cfg(feature = "opencl")]

mod common;

use mllm_backends::cpu::linear::linear_ref;
use mllm_backends::opencl::OpenClBackend;
use mllm_backends::quant::{ImportType, QuantType};
use mllm_backends::{Backend, DType, FloatSlice, Op, Tensor};

fn backend() -> Option<OpenClBackend> {
    if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
        eprintln!("MLLM_SKIP_OPENCL is set: weight types on OpenCL were NOT tested");
        return None;
    }
    match OpenClBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => panic!("{e} (set MLLM_SKIP_OPENCL=1 to skip these tests knowingly)"),
    }
}

/// A weight of one type: its blocks, as rows of one block each, the
/// tensor the loader makes of them, and gguf-py's values.
struct Case {
    name: &'static str,
    tensor: Tensor,
    values: Vec<f32>,
    n: usize,
    k: usize,
}

/// The native types (read as they are) from their fixtures.
fn native(q: QuantType) -> Case {
    let dir = match q {
        QuantType::Q4_0
        | QuantType::Q4_1
        | QuantType::Q8_0
        | QuantType::Q4_K
        | QuantType::Q5_K
        | QuantType::Q6_K => "gguf/quant",
        _ => "quants",
    };
    let name = q.name().to_uppercase();
    let blocks = common::fixture(dir, &format!("{name}.blocks"));
    let values = common::f32s(&common::fixture(dir, &format!("{name}.dequant")));
    let (k, n) = (q.block_size(), blocks.len() / q.type_size());
    assert_eq!(values.len(), n * k, "{name}: fixture lengths");
    let tensor = Tensor::from_quant(blocks, q, vec![n, k]).expect("tensor");
    Case {
        name: q.name(),
        tensor,
        values,
        n,
        k,
    }
}

/// The imported types, as the loader holds them (repacked or f32).
fn imported(ty: ImportType) -> Case {
    let blocks = common::fixture("quants", &format!("{}.blocks", ty.name().to_uppercase()));
    let values = common::f32s(&common::fixture(
        "quants",
        &format!("{}.dequant", ty.name().to_uppercase()),
    ));
    let (k, n) = (ty.block_size(), blocks.len() / ty.type_size());
    assert_eq!(values.len(), n * k, "{}: fixture lengths", ty.name());
    let tensor = match ty.runs_as() {
        Some(to) => Tensor::from_quant(ty.repack(&blocks).expect("repack"), to, vec![n, k]),
        None => Tensor::from_f32(ty.dequantize(&blocks, n * k).expect("values"), vec![n, k]),
    }
    .expect("tensor");
    Case {
        name: ty.name(),
        tensor,
        values,
        n,
        k,
    }
}

/// MXFP4 whose scales are all f16s, as real models' are (the fixture's
/// blocks with their exponents moved into 2^-24..2^15): the device keeps
/// it as the Q8_0 blocks of the same values, not as f32.
const MXFP4_F16: &str = "mxfp4 (f16 scales)";

fn mxfp4_f16_scales() -> Case {
    let mut blocks = common::fixture("quants", "MXFP4.blocks");
    for (i, b) in blocks.chunks_exact_mut(17).enumerate() {
        b[0] = 104 + (i % 40) as u8;
    }
    let n = blocks.len() / 17;
    let mut values = vec![0f32; n * 32];
    mllm_backends::quant::dequantize_row_mxfp4(&blocks, &mut values).expect("values");
    let tensor = Tensor::from_quant(blocks, QuantType::MXFP4, vec![n, 32]).expect("tensor");
    Case {
        name: MXFP4_F16,
        tensor,
        values,
        n,
        k: 32,
    }
}

/// Per output, how far the device may be from the f32 reference: f16
/// weights round each product by at most 2^-11 of it; the device kernels
/// take f32 activations; plus f32 summation slack. A wrong scale or code
/// in one block moves an output by far more.
fn bound(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let (xs, ws) = (&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
            let mag: f64 = xs.iter().zip(ws).map(|(a, b)| (a * b).abs() as f64).sum();
            out.push((6e-4 * mag + 1e-6) as f32);
        }
    }
    out
}

#[test]
fn every_gguf_weight_type_multiplies_on_opencl() {
    let Some(cl) = backend() else { return };
    let mut cases: Vec<Case> = QuantType::ALL.into_iter().map(native).collect();
    cases.extend(ImportType::ALL.into_iter().map(imported));
    cases.push(mxfp4_f16_scales());
    let mut failed = vec![];
    for case in &cases {
        let (n, k) = (case.n, case.k);
        let w = cl
            .prepare_weight("w", case.tensor.clone())
            .unwrap_or_else(|e| panic!("{}: preparing for the device: {e}", case.name));
        if case.name == MXFP4_F16 {
            assert_eq!(w.dtype(), DType::Quant(QuantType::Q8_0), "{}", case.name);
        }
        for m in [1, 3] {
            let x = common::vals(0x5EED + m as u64, m * k);
            let want = linear_ref(&x, m, k, FloatSlice::F32(&case.values), n, None);
            let xt = Tensor::from_f32(x.clone(), vec![m, k]).expect("x");
            let got = cl
                .run(&Op::Linear, &[&xt, &w])
                .and_then(|t| cl.download(&t))
                .and_then(|t| t.to_f32_vec())
                .unwrap_or_else(|e| panic!("{} m={m}: {e}", case.name));
            assert_eq!(got.len(), m * n, "{}", case.name);
            let e = bound(&x, &case.values, m, k, n);
            let worst = (0..m * n)
                .map(|i| ((got[i] - want[i]).abs() / e[i], i))
                .fold((0.0f32, 0), |a, b| if b.0 > a.0 { b } else { a });
            eprintln!(
                "{:>8} m={m} [{n} x {k}] stored as {}: worst error {:.3} of its bound",
                case.name,
                w.dtype(),
                worst.0
            );
            if worst.0 > 1.0 || worst.0.is_nan() {
                let i = worst.1;
                failed.push(format!(
                    "{} m={m}: out[{i}] = {}, reference {}, bound {}",
                    case.name, got[i], want[i], e[i]
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
