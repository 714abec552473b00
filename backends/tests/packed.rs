//! Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 weights with 16 rows interleaved (`quant::packed`, what the
//! CPU backend repacks linear weights into for its AVX-512 VNNI kernels):
//! - the packed scalar twin equals the plain type's scalar twin bit for bit
//!   (the same integers, the same float steps);
//! - every SIMD path this CPU has equals the twin within 1e-5 of the
//!   products' magnitude (only the float summation order differs), on the
//!   serial and the parallel path, odd activation row counts included;
//! - rows read back (embedding, dequantization) equal the plain ones, and
//!   slicing inside a 16-row group is refused.

mod common;
use common::{assert_finite, vals};

use mllm_backends::cpu::qlinear::{self, Isa};
use mllm_backends::quant::{self, packed, QuantType};
use mllm_backends::{Backend, CpuBackend, Op, Tensor};
use proptest::prelude::*;

/// The plain types with a packed layout.
const PLAIN: [QuantType; 7] = [
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::IQ4_NL,
    QuantType::MXFP4,
];

/// `[n, k]` weights of `plain`: quantized values, or (Q5_0, Q5_1, IQ4_NL, MXFP4, which
/// mllm does not quantize to) random codes under a small scale (an f16
/// of |d| <= 0.01, an e8m0 exponent of 2^-12..2^-5; Q5_1's minimum above
/// -0.1).
fn weight(plain: QuantType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    if plain.can_quantize() {
        return quant::quantize(plain, &vals(seed, n * k)).expect("quantize");
    }
    let ts = plain.type_size();
    let scales = vals(seed ^ 0xD00D, n * k / 32);
    let mut w: Vec<u8> = vals(seed, n * k / 32 * ts)
        .iter()
        .map(|v| (v * 128.0 + 128.0) as u8)
        .collect();
    for (blk, s) in w.chunks_exact_mut(ts).zip(scales) {
        if plain == QuantType::MXFP4 {
            blk[0] = 116 + ((s + 1.0) * 4.0) as u8 % 8;
        } else {
            blk[..2].copy_from_slice(&half::f16::from_f32(0.01 * s).to_le_bytes());
        }
        if plain == QuantType::Q5_1 {
            // Its minimum, the f16 after the scale.
            blk[2..4].copy_from_slice(&half::f16::from_f32(-0.1 * s.abs()).to_le_bytes());
        }
    }
    w
}

fn check(plain: QuantType, m: usize, n: usize, k: usize, seed: u64) -> Result<(), TestCaseError> {
    let w = weight(plain, n, k, seed);
    let ty = packed::packed_of(plain).expect("packed type");
    let p = packed::pack(plain, &w, n, k).expect("pack");
    let x = vals(seed ^ 0x55, m * k);
    let twin = qlinear::linear_with(Isa::Scalar, &x, m, k, &w, plain, n, None).expect("twin");
    let ptwin = qlinear::linear_with(Isa::Scalar, &x, m, k, &p, ty, n, None).expect("packed twin");
    // Inputs in [-1, 1): a non-finite twin is a bug the bit and bound
    // checks below would pass.
    assert_finite("twin", &twin);
    for (i, (a, b)) in ptwin.iter().zip(&twin).enumerate() {
        prop_assert!(
            a.to_bits() == b.to_bits(),
            "{ty} m={m} n={n} k={k}: [{i}] {a} vs plain twin {b}"
        );
    }
    let wf = quant::dequantize(plain, &w, n * k).expect("dequantize");
    for isa in Isa::available() {
        let fast = qlinear::linear_with(isa, &x, m, k, &p, ty, n, None).expect("fast");
        for (idx, (f, t)) in fast.iter().zip(&ptwin).enumerate() {
            let (i, j) = (idx / n, idx % n);
            let mag: f32 = (0..k).map(|e| (x[i * k + e] * wf[j * k + e]).abs()).sum();
            prop_assert!(
                (f - t).abs() <= 1e-5 * (t.abs() + mag) + 1e-6,
                "{ty} {} m={m} n={n} k={k}: [{idx}] {f} vs twin {t}",
                isa.name()
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn packed_paths_match_the_twins(
        kind in 0usize..PLAIN.len(),
        m in 1usize..10,
        groups in 1usize..6,
        blocks in 1usize..20,
        seed in any::<u64>(),
    ) {
        let plain = PLAIN[kind];
        check(plain, m, 16 * groups, 32 * blocks, seed)?;
    }
}

#[test]
fn the_parallel_path_splits_on_groups() {
    for plain in PLAIN {
        for m in [1, 5] {
            check(plain, m, 16 * 13, 1024, 7 + m as u64).unwrap();
        }
    }
}

#[test]
fn rows_read_back_and_groups_stay_whole() {
    let (n, k) = (48, 96);
    for plain in PLAIN {
        let w = weight(plain, n, k, 3);
        let ty = packed::packed_of(plain).expect("packed type");
        let pt = Tensor::from_quant(packed::pack(plain, &w, n, k).expect("pack"), ty, vec![n, k])
            .expect("tensor");
        let t = Tensor::from_quant(w, plain, vec![n, k]).expect("tensor");
        assert_eq!(pt.to_f32_vec().expect("f32"), t.to_f32_vec().expect("f32"));
        let ids = Tensor::from_i32(vec![0, 17, 47, 5], vec![4]).expect("ids");
        let a = CpuBackend
            .run(&Op::Embedding, &[&pt, &ids])
            .expect("embedding");
        let b = CpuBackend
            .run(&Op::Embedding, &[&t, &ids])
            .expect("embedding");
        assert_eq!(a.f32s().expect("f32"), b.f32s().expect("f32"));
        assert!(pt.narrow0(16, 32).is_ok());
        let err = pt.narrow0(3, 20).expect_err("inside a group");
        assert!(err.to_string().contains("group of 16"), "{err}");
        // A linear of 8 rows cannot be packed; a packed one of 8 is refused.
        let x = vals(9, k);
        let e = qlinear::linear(
            &x,
            1,
            k,
            &pt.quant_bytes().expect("bytes").0[..8 * k / 32 * plain.type_size()],
            ty,
            8,
            None,
        );
        assert!(e.is_err());
    }
}

#[test]
fn the_backend_repacks_what_its_kernels_want() {
    let (n, k) = (32, 64);
    let w = quant::quantize(QuantType::Q4_0, &vals(4, n * k)).expect("quantize");
    let t = Tensor::from_quant(w, QuantType::Q4_0, vec![n, k]).expect("tensor");
    let p = CpuBackend.prepare_weight("w", t.clone()).expect("prepare");
    let want = if mllm_backends::cpu::repacks() {
        QuantType::Q4_0x16
    } else {
        QuantType::Q4_0
    };
    assert_eq!(p.dtype().quant(), Some(want));
    // Rows not in whole groups stay as they are.
    let odd = Tensor::from_quant(
        quant::quantize(QuantType::Q4_0, &vals(5, 8 * k)).expect("q"),
        QuantType::Q4_0,
        vec![8, k],
    )
    .expect("tensor");
    let q = CpuBackend.prepare_weight("odd", odd).expect("prepare");
    assert_eq!(q.dtype().quant(), Some(QuantType::Q4_0));
    let x = Tensor::from_f32(vals(6, 3 * k), vec![3, k]).expect("x");
    let a = CpuBackend.run(&Op::Linear, &[&x, &p]).expect("linear");
    let b = CpuBackend.run(&Op::Linear, &[&x, &t]).expect("linear");
    for (u, v) in a.f32s().expect("f32").iter().zip(b.f32s().expect("f32")) {
        assert!((u - v).abs() <= 1e-4 * (1.0 + v.abs()), "{u} vs {v}");
    }
}
