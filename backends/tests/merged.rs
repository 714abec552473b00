//! `Op::MergedLinear` (several weights reading one input, optionally after
//! its RMSNorm) against its decomposition on the CPU backend: every part
//! equals, bit for bit, `rms_norm` then its own `linear` (the same kernels,
//! the same activation quantization), over random shapes, mixed weight
//! dtypes, odd row counts, one and several activation rows, on the serial
//! and the parallel path; and the decomposition against the reference twin
//! (dequantized f32) within the activation rounding.

mod common;
use common::{assert_finite, vals};

use mllm_backends::cpu::merged::merged_linear_ref;
use mllm_backends::quant::{self, QuantType};
use mllm_backends::{Backend, CpuBackend, Op, Tensor};
use proptest::prelude::*;

/// Weight kinds a part may have: the quantizable types, W8A8, f32, f16.
const KINDS: usize = 6;

fn weight(kind: usize, n: usize, k: usize, seed: u64) -> Tensor {
    let v = vals(seed, n * k);
    let q = |ty: QuantType| {
        Tensor::from_quant(quant::quantize(ty, &v).expect("quantize"), ty, vec![n, k])
            .expect("tensor")
    };
    match kind {
        0 => q(QuantType::Q4_0),
        1 => q(QuantType::Q4_1),
        2 => q(QuantType::Q8_0),
        3 => q(QuantType::w8a8(k).expect("w8a8")),
        4 => Tensor::from_f32(v, vec![n, k]).expect("f32"),
        _ => Tensor::from_f16(
            v.iter().map(|&x| half::f16::from_f32(x)).collect(),
            vec![n, k],
        )
        .expect("f16"),
    }
}

fn check(
    kinds: &[usize],
    rows: &[usize],
    m: usize,
    k: usize,
    norm: bool,
    seed: u64,
) -> Result<(), TestCaseError> {
    let cpu = CpuBackend;
    let x = Tensor::from_f32(vals(seed, m * k), vec![m, k]).expect("x");
    let g = Tensor::from_f32(vals(seed ^ 9, k), vec![k]).expect("g");
    let ws: Vec<Tensor> = kinds
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(i, (&kind, &n))| weight(kind, n, k, seed ^ ((i as u64 + 1) * 77)))
        .collect();
    let eps = 1e-6;
    let mut inputs = vec![&x];
    if norm {
        inputs.push(&g);
    }
    inputs.extend(ws.iter());
    let op = Op::MergedLinear {
        parts: ws.len(),
        norm_eps: norm.then_some(eps),
    };
    let fused = cpu.run(&op, &inputs).expect("merged");
    let fused = fused.f32s().expect("f32");
    // The decomposition, through the backend's own ops.
    let xn = if norm {
        cpu.run(&Op::RmsNorm { eps }, &[&x, &g]).expect("norm")
    } else {
        x.clone()
    };
    let mut want = Vec::new();
    for w in &ws {
        let y = cpu.run(&Op::Linear, &[&xn, w]).expect("linear");
        want.extend_from_slice(y.f32s().expect("f32"));
    }
    prop_assert_eq!(fused.len(), want.len());
    for (i, (a, b)) in fused.iter().zip(&want).enumerate() {
        prop_assert!(
            a.to_bits() == b.to_bits(),
            "kinds {kinds:?} rows {rows:?} m={m} k={k} norm={norm}: out[{i}] = {a}, decomposed {b}"
        );
    }
    // The reference twin, within the activation rounding: at most half a
    // step of the row's largest value (the coarsest scale any type uses)
    // per weight magnitude.
    let gv = g.f32s().expect("g").to_vec();
    let wrefs: Vec<&Tensor> = ws.iter().collect();
    let reference = merged_linear_ref(
        x.f32s().expect("x"),
        k,
        norm.then_some((&gv[..], eps)),
        &wrefs,
    )
    .expect("ref");
    assert_finite("merged reference", &reference);
    let xs = xn.f32s().expect("xn");
    let mut at = 0;
    for (w, &n) in ws.iter().zip(rows) {
        let wf = w.to_f32_vec().expect("w");
        for i in 0..m {
            let amax = xs[i * k..(i + 1) * k]
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()));
            for j in 0..n {
                let wsum: f32 = wf[j * k..(j + 1) * k].iter().map(|v| v.abs()).sum();
                let bound = wsum * amax / 254.0 + 1e-4;
                let (f, r) = (fused[at + i * n + j], reference[at + i * n + j]);
                prop_assert!(
                    (f - r).abs() <= bound,
                    "part row {j}: {f} vs reference {r}, bound {bound}"
                );
            }
        }
        at += m * n;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merged_parts_equal_their_own_linears(
        kinds in prop::collection::vec(0..KINDS, 1..4),
        rows in prop::collection::vec(1usize..90, 3),
        m in 1usize..7,
        blocks in 1usize..24,
        norm in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let k = 32 * blocks;
        check(&kinds, &rows[..kinds.len()], m, k, norm, seed)?;
    }
}

#[test]
fn the_parallel_path_splits_across_parts() {
    // m * rows * k well above the serial threshold, rows not multiples of
    // the tasks' row counts.
    for m in [1, 3] {
        check(&[0, 2, 0], &[203, 77, 131], m, 1024, true, 5).unwrap();
        check(&[1, 3], &[150, 99], m, 512, false, 6).unwrap();
    }
}
