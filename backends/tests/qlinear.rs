//! Quantized linear (backends/src/cpu/qlinear) and quantized tensors:
//! - every SIMD path this CPU has against the scalar integer twin: bit for
//!   bit for the K-quants (same integers, same float finish per
//!   super-block), within 1e-5 of the magnitude of the products for the
//!   32-value types (only the float summation order differs);
//! - the twin against the oracle (dequantize, f32 dot) within the error of
//!   quantizing the activations, which is computed per case;
//! - `Op::Linear` / `Op::Embedding` with quantized weights on the CPU
//!   backend, and clean dtype errors for every other use.

mod common;
use common::{assert_finite, vals};

use std::sync::Arc;

use half::f16;
use mllm_backends::cpu::qlinear::{self, Isa};
use mllm_backends::quant::{self, QuantType};
use mllm_backends::{Backend, BackendError, BinaryOp, ByteOwner, CpuBackend, DType, Op, Tensor};
use mllm_backends::{ReduceOp, UnaryOp};
use proptest::prelude::*;

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    vals(seed, n)
        .iter()
        .map(|v| ((v + 1.0) * 128.0) as u8)
        .collect()
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// A weight `[n, k]` of `ty`: the reference quantizer on random values for
/// the 32-value types (with every fourth row random bytes, so extreme codes
/// like Q8_0's -128 appear), random codes with sane scales for K-quants
/// (which have no quantizer yet).
fn weight(ty: QuantType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let row_bytes = ty.bytes_for(k).unwrap();
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut w = Vec::with_capacity(n * row_bytes);
    for j in 0..n {
        let s = seed ^ (j as u64).wrapping_mul(0x1234_5678_9ABC);
        if ty.can_quantize() && j % 4 != 3 {
            w.extend(quant::quantize(ty, &vals(s, k)).unwrap());
            continue;
        }
        let mut row = bytes(s, row_bytes);
        let scales = vals(s ^ 0xABCD, 2 * k / bs);
        for (b, blk) in row.chunks_exact_mut(ts).enumerate() {
            let (d, m) = (scales[2 * b] * 0.02, scales[2 * b + 1] * 0.02);
            match ty {
                QuantType::Q4_0 | QuantType::Q8_0 | QuantType::Q5_0 => put_f16(blk, 0, d),
                QuantType::IQ4_NL => put_f16(blk, 0, d * 0.1),
                // e8m0: `2^(e - 128)`, here 2^-12..2^-5 (|w| up to 0.375).
                QuantType::MXFP4 => blk[0] = 116 + (b % 8) as u8,
                QuantType::Q5_1 => {
                    put_f16(blk, 0, d * 0.5);
                    put_f16(blk, 2, m);
                }
                QuantType::Q4_1 => {
                    put_f16(blk, 0, d);
                    put_f16(blk, 2, m);
                }
                QuantType::Q4_K | QuantType::Q5_K => {
                    put_f16(blk, 0, d.abs());
                    put_f16(blk, 2, m.abs());
                }
                QuantType::Q6_K | QuantType::Q6KScaled { .. } => put_f16(blk, 208, d),
                // Codes are 7 bits (-64..=63 plus 64).
                QuantType::Q8KS { .. } => {
                    blk[..256].iter_mut().for_each(|q| *q &= 0x7F);
                    put_f16(blk, 272, d * 0.1)
                }
                QuantType::IQ4_XS => put_f16(blk, 0, d * 0.01),
                QuantType::Q3_K => put_f16(blk, 108, d * 0.1),
                QuantType::TQ2_0 => put_f16(blk, 64, d * 0.1),
                QuantType::Q2_K => {
                    put_f16(blk, 80, d);
                    put_f16(blk, 82, m.abs());
                }
                QuantType::W4A16 { .. } => put_f16(blk, 0, d),
                QuantType::W8A8 { .. } => blk[..4].copy_from_slice(&d.to_le_bytes()),
                // Interleaved layouts are made by packing (tests/packed.rs).
                QuantType::Q4_0x16
                | QuantType::Q4_1x16
                | QuantType::Q8_0x16
                | QuantType::IQ4_NLx16
                | QuantType::Q5_0x16
                | QuantType::Q5_1x16
                | QuantType::MXFP4x16 => {
                    unreachable!("not a file type")
                }
            }
        }
        w.extend(row);
    }
    w
}

/// The most the activation quantization can move each output: per
/// activation block of `ab` values, half a step (`max|x| / 127 / 2`) times
/// the weights' absolute sum there. Plus float slack on the products.
fn act_error_bound(x: &[f32], wf: &[f32], m: usize, k: usize, n: usize, ab: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut e = 0.0f64;
            let mut mag = 0.0f64;
            for b in 0..k / ab {
                let xs = &x[i * k + b * ab..i * k + (b + 1) * ab];
                let ws = &wf[j * k + b * ab..j * k + (b + 1) * ab];
                let step = xs.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                let wsum: f64 = ws.iter().map(|w| w.abs() as f64).sum();
                e += 0.5 * step * wsum;
                mag += xs
                    .iter()
                    .zip(ws)
                    .map(|(a, w)| (a * w).abs() as f64)
                    .sum::<f64>();
            }
            out[i * n + j] = (e * 1.001 + 1e-5 * mag + 1e-6) as f32;
        }
    }
    out
}

/// `sum |x * w|` per output, the scale of float rounding differences.
fn magnitudes(x: &[f32], wf: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = x[i * k..(i + 1) * k]
                .iter()
                .zip(&wf[j * k..(j + 1) * k])
                .map(|(a, w)| (a * w).abs())
                .sum();
        }
    }
    out
}

/// The 256-value types computed against `ActQ8K` activations.
fn is_k_quant(ty: QuantType) -> bool {
    ty.has_super_blocks()
}

/// Every kind of type: ggml's, W4A16 at each group, Q6_K and Q8_KS scaled
/// by each power of two, and W8A8 (whose block is the row, so the type
/// depends on `k`).
const KINDS: usize = QuantType::ALL.len() + 11;

fn type_of(kind: usize, k: usize) -> QuantType {
    let n = QuantType::ALL.len();
    match kind {
        i if i < n => QuantType::ALL[i],
        i if i < n + 3 => QuantType::w4a16(quant::W4A16_GROUPS[i - n]).unwrap(),
        i if i < n + 6 => QuantType::q6k_scaled((i - n - 2) as u8).unwrap(),
        i if i < n + 10 => QuantType::q8ks((i - n - 6) as u8).unwrap(),
        _ => QuantType::w8a8(k).unwrap(),
    }
}

/// A `k` for `kind` from a block count: whole blocks (any `k` for W8A8).
fn k_for(kind: usize, blocks: usize, odd: usize) -> usize {
    match type_of(kind, 1) {
        QuantType::W8A8 { .. } => 32 * (blocks - 1) + odd.max(1),
        t if is_k_quant(t) => 256 * (1 + blocks % 8),
        t => t.block_size() * blocks.div_ceil(t.block_size() / 32),
    }
}

/// Whether the fast paths must equal the twin bit for bit (the same
/// integers and the same float finish).
fn bit_exact(ty: QuantType) -> bool {
    is_k_quant(ty) || matches!(ty, QuantType::W8A8 { .. })
}

/// Values per activation scale: the unit of the activation rounding error.
fn act_block(ty: QuantType, k: usize) -> Option<usize> {
    match ty {
        QuantType::W4A16 { .. } => None,
        QuantType::W8A8 { .. } => Some(k),
        t if is_k_quant(t) => Some(256),
        _ => Some(32),
    }
}

fn check_case(
    ty: QuantType,
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
    with_bias: bool,
) -> Result<(), TestCaseError> {
    let w = weight(ty, n, k, seed);
    let x = vals(seed ^ 0x5555, m * k);
    let b = vals(seed ^ 0x7777, n);
    let bias = with_bias.then_some(&b[..]);
    let wf = quant::dequantize(ty, &w, n * k).unwrap();
    let oracle = qlinear::linear_ref(&x, m, k, &w, ty, n, bias).unwrap();
    let twin = qlinear::linear_with(Isa::Scalar, &x, m, k, &w, ty, n, bias).unwrap();
    // Inputs in [-1, 1): a non-finite oracle is a bug the checks below
    // (bounds scaled by it, bit equality) could pass.
    assert_finite("oracle", &oracle);
    let bound = match act_block(ty, k) {
        Some(ab) => act_error_bound(&x, &wf, m, k, n, ab),
        // f32 activations: float rounding only.
        None => magnitudes(&x, &wf, m, k, n)
            .iter()
            .map(|g| 1e-5 * g + 1e-6)
            .collect(),
    };
    for (idx, ((t, o), e)) in twin.iter().zip(&oracle).zip(&bound).enumerate() {
        prop_assert!(
            (t - o).abs() <= *e,
            "{ty} m={m} n={n} k={k}: twin[{idx}] = {t}, oracle {o}, bound {e}"
        );
    }
    let mag = magnitudes(&x, &wf, m, k, n);
    for isa in Isa::available() {
        // Into a buffer of NaN: a compiled graph's arena is not zeroed, so
        // every output must be written (none accumulated or skipped).
        let mut fast = vec![f32::NAN; m * n];
        qlinear::linear_into_with(isa, &x, m, k, &w, ty, n, bias, &mut fast).unwrap();
        for (idx, ((f, t), g)) in fast.iter().zip(&twin).zip(&mag).enumerate() {
            if bit_exact(ty) {
                prop_assert!(
                    f.to_bits() == t.to_bits(),
                    "{ty} {} m={m} n={n} k={k}: out[{idx}] = {f}, twin {t}",
                    isa.name()
                );
            } else {
                prop_assert!(
                    (f - t).abs() <= 1e-5 * (t.abs() + g),
                    "{ty} {} m={m} n={n} k={k}: out[{idx}] = {f}, twin {t}",
                    isa.name()
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// k from 32 to 2048 in whole blocks (any k for W8A8, odd ones
    /// included), odd row counts included, m = 1..9.
    #[test]
    fn fast_paths_match_twin_and_twin_matches_oracle(
        kind in 0..KINDS,
        m in 1usize..10,
        n in 1usize..38,
        blocks in 1usize..65,
        odd in 0usize..32,
        seed in any::<u64>(),
        with_bias in any::<bool>(),
    ) {
        let k = k_for(kind, blocks, odd);
        check_case(type_of(kind, k), m, n, k, seed, with_bias)?;
    }
}

#[test]
fn every_type_on_the_parallel_path() {
    // m * n * k well above the serial threshold, n not a multiple of the
    // per-task rows or of the 4-row tiles.
    for kind in 0..KINDS {
        for m in [1, 4, 9] {
            check_case(type_of(kind, 2048), m, 203, 2048, 42 + m as u64, true).unwrap();
        }
    }
}

#[test]
fn k_quant_prefill_tiles_match_the_twin() {
    // x86 unpacks four weight rows into a panel per block of 64 activation
    // rows, two rows per tile (AVX-512 VNNI: sixteen rows per block of 128,
    // four per tile): m past a block with an odd remainder, n with rows
    // left over from the panels, on the serial and the parallel path.
    for ty in [
        QuantType::Q2_K,
        QuantType::Q3_K,
        QuantType::Q4_K,
        QuantType::Q5_K,
        QuantType::Q6_K,
        QuantType::Q6KScaled { shift: 3 },
        QuantType::Q8KS { shift: 0 },
        QuantType::Q8KS { shift: 3 },
        QuantType::IQ4_XS,
        QuantType::TQ2_0,
    ] {
        for (m, n, k) in [
            (8, 4, 256),
            (67, 9, 768),
            (10, 16, 512),
            (131, 70, 1024),
            (259, 35, 256),
        ] {
            check_case(ty, m, n, k, 7 + m as u64, m % 2 == 1).unwrap();
        }
    }
}

#[test]
fn scaled_q6_k_is_the_q6_k_product_times_its_power_of_two() {
    // The same blocks read as Q6_K and as Q6_K/2^s: every path's output
    // is the plain one times 2^-s, bit for bit (decode, prompt chunks and
    // the parallel path), as kernels reading `d * 2^-s` would give.
    let m0 = mllm_backends::cpu::ROW_INVARIANT_STEP + 1;
    for (m, n, k) in [(1, 7, 256), (3, 40, 512), (m0, 9, 768), (4, 203, 2048)] {
        let w = weight(QuantType::Q6_K, n, k, 5 + m as u64);
        let x = vals(m as u64, m * k);
        for isa in Isa::available() {
            let plain = qlinear::linear_with(isa, &x, m, k, &w, QuantType::Q6_K, n, None).unwrap();
            for shift in quant::Q6K_SHIFTS {
                let ty = QuantType::q6k_scaled(shift).unwrap();
                let got = qlinear::linear_with(isa, &x, m, k, &w, ty, n, None).unwrap();
                let f = 0.5f32.powi(shift as i32);
                for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        (p * f).to_bits(),
                        "{ty} {} m={m} n={n} k={k}: out[{i}]",
                        isa.name()
                    );
                }
            }
        }
    }
}

#[test]
fn scaled_q8_ks_is_the_plain_product_times_its_power_of_two() {
    // As for Q6_K/2^s: the same Q8_KS blocks read with each shift give the
    // plain output times 2^-s on every path, bit for bit.
    let m0 = mllm_backends::cpu::ROW_INVARIANT_STEP + 1;
    let plain_ty = QuantType::q8ks(0).unwrap();
    for (m, n, k) in [(1, 7, 256), (3, 40, 512), (m0, 9, 768), (4, 203, 2048)] {
        let w = weight(plain_ty, n, k, 9 + m as u64);
        let x = vals(m as u64 ^ 0x99, m * k);
        for isa in Isa::available() {
            let plain = qlinear::linear_with(isa, &x, m, k, &w, plain_ty, n, None).unwrap();
            for shift in quant::Q8KS_SHIFTS.skip(1) {
                let ty = QuantType::q8ks(shift).unwrap();
                let got = qlinear::linear_with(isa, &x, m, k, &w, ty, n, None).unwrap();
                let f = 0.5f32.powi(shift as i32);
                for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        (p * f).to_bits(),
                        "{ty} {} m={m} n={n} k={k}: out[{i}]",
                        isa.name()
                    );
                }
            }
        }
    }
}

#[test]
fn block32_prefill_tiles_match_the_twin() {
    // Prompt chunks (more rows than a row-invariant step) take other tiles
    // than decode: 4-row tiles on x86, Arm's i8mm 2x2 tiles (activation
    // rows paired at quantization, the minimum's term from `ActQ8::dsum`)
    // with dotprod tiles for an odd last row and weight row.
    let m0 = mllm_backends::cpu::ROW_INVARIANT_STEP + 1;
    for ty in [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::IQ4_NL,
        QuantType::MXFP4,
    ] {
        for (m, n, k) in [(m0, 5, 64), (m0 + 7, 8, 96), (2 * m0 + 2, 9, 256)] {
            check_case(ty, m, n, k, 11 + m as u64, m % 2 == 0).unwrap();
        }
    }
}

#[test]
fn merged_parts_write_their_own_columns() {
    // K-quant parts of a merged linear write their columns of the whole
    // output in place (the output's width apart); the others stage and
    // copy. Each part's block must equal its own linear, from a NaN
    // buffer, on the serial and the parallel path, with m on both sides
    // of the 16-row panels' minimum.
    let k = 512;
    let tys = [
        QuantType::Q4_K,
        QuantType::Q8_0,
        QuantType::Q6_K,
        QuantType::IQ4_XS,
    ];
    let ns = [203, 77, 130, 48];
    let ws: Vec<Vec<u8>> = tys
        .iter()
        .zip(ns)
        .enumerate()
        .map(|(i, (&ty, n))| weight(ty, n, k, 90 + i as u64))
        .collect();
    for m in [1, 3, 9, 20, 130] {
        let x = vals(m as u64, m * k);
        let parts: Vec<qlinear::Part> = tys
            .iter()
            .zip(ns)
            .zip(&ws)
            .map(|((&ty, n), w)| qlinear::Part { w, ty, n })
            .collect();
        let total: usize = ns.iter().sum();
        let mut out = vec![f32::NAN; m * total];
        qlinear::linear_parts_into(&x, m, k, &parts, &mut out).unwrap();
        let mut at = 0;
        for p in &parts {
            let mut alone = vec![f32::NAN; m * p.n];
            qlinear::linear_into_with(Isa::best(), &x, m, k, p.w, p.ty, p.n, None, &mut alone)
                .unwrap();
            let twin = qlinear::linear_with(Isa::Scalar, &x, m, k, p.w, p.ty, p.n, None).unwrap();
            for (idx, ((a, b), t)) in out[at..at + m * p.n]
                .iter()
                .zip(&alone)
                .zip(&twin)
                .enumerate()
            {
                assert!(
                    a.to_bits() == b.to_bits(),
                    "{} m={m}: merged[{idx}] = {a}, alone {b}",
                    p.ty
                );
                assert!(
                    a.is_finite() && (!bit_exact(p.ty) || a.to_bits() == t.to_bits()),
                    "{} m={m}: merged[{idx}] = {a}, twin {t}",
                    p.ty
                );
            }
            at += m * p.n;
        }
    }
}

#[test]
fn reports_the_paths_this_cpu_runs() {
    let avail = Isa::available();
    assert_eq!(avail[0], Isa::Scalar);
    assert!(avail.contains(&Isa::best()));
    #[cfg(target_arch = "aarch64")]
    assert!(avail.contains(&Isa::Neon));
    eprintln!(
        "qlinear paths: {:?}, best {:?}",
        avail.iter().map(|i| i.name()).collect::<Vec<_>>(),
        Isa::best()
    );
}

#[test]
fn bad_arguments_are_errors() {
    let w = weight(QuantType::Q4_0, 3, 64, 1);
    let x = vals(2, 64);
    assert!(qlinear::linear(&x, 1, 64, &w[..w.len() - 1], QuantType::Q4_0, 3, None).is_err());
    assert!(qlinear::linear(&x[..48], 1, 48, &w, QuantType::Q4_0, 3, None).is_err());
    assert!(qlinear::linear(&x, 1, 64, &w, QuantType::Q4_0, 3, Some(&[0.0; 2])).is_err());
    assert!(qlinear::linear(&x, 1, 64, &w, QuantType::Q4_K, 3, None).is_err());
    // No rows or no inputs: empty results, no panic.
    assert_eq!(
        qlinear::linear(&[], 0, 64, &w, QuantType::Q4_0, 3, None).unwrap(),
        Vec::<f32>::new()
    );
    assert_eq!(
        qlinear::linear(&x, 1, 64, &[], QuantType::Q4_0, 0, None).unwrap(),
        Vec::<f32>::new()
    );
}

struct Bytes(Vec<u8>);

impl ByteOwner for Bytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

fn quant_tensor(ty: QuantType, n: usize, k: usize, seed: u64) -> Tensor {
    Tensor::from_quant(weight(ty, n, k, seed), ty, vec![n, k]).unwrap()
}

#[test]
fn quantized_tensors_keep_their_blocks() {
    let ty = QuantType::Q4_K;
    let w = weight(ty, 5, 512, 3);
    // Borrowed at an odd offset: no copy, no alignment needed.
    let mut file = vec![7u8; 3];
    file.extend(&w);
    let t = Tensor::from_bytes(
        Arc::new(Bytes(file)),
        3,
        w.len(),
        DType::Quant(ty),
        vec![5, 512],
    )
    .unwrap();
    assert_eq!(t.dtype(), DType::Quant(ty));
    assert_eq!((t.shape(), t.numel()), (&[5, 512][..], 2560));
    let (b, got_ty) = t.quant_bytes().unwrap();
    assert_eq!((b, got_ty), (&w[..], ty));
    // Row views and reshapes stay on whole blocks.
    let rows = t.narrow0(1, 3).unwrap();
    assert_eq!(rows.quant_bytes().unwrap().0, &w[288..864]);
    assert_eq!(
        rows.to_f32_vec().unwrap(),
        quant::dequantize(ty, &w[288..864], 1024).unwrap()
    );
    assert!(t.reshaped(vec![10, 256]).is_ok());
    assert!(t.reshaped(vec![20, 128]).is_err());
    assert!(t.reshaped(vec![2560]).unwrap().narrow0(0, 100).is_err());
    // Wrong lengths and shapes are refused.
    let owner: Arc<dyn ByteOwner> = Arc::new(Bytes(w.clone()));
    let q = DType::Quant(ty);
    assert!(Tensor::from_bytes(owner.clone(), 0, w.len() - 1, q, vec![5, 512]).is_err());
    assert!(Tensor::from_bytes(owner.clone(), 0, w.len(), q, vec![10, 256]).is_ok());
    assert!(Tensor::from_bytes(owner.clone(), 0, w.len(), q, vec![5, 500]).is_err());
    assert!(Tensor::from_bytes(owner.clone(), 0, w.len(), q, vec![]).is_err());
    assert!(Tensor::from_quant(vec![0; 17], QuantType::Q4_0, vec![1, 32]).is_err());
    // Float views are dtype errors, not panics.
    assert!(matches!(t.floats(), Err(BackendError::DType { .. })));
    assert!(matches!(t.f32s(), Err(BackendError::DType { .. })));
    let f = Tensor::from_f32(vec![1.0; 4], vec![4]).unwrap();
    assert!(matches!(f.quant_bytes(), Err(BackendError::DType { .. })));
}

#[test]
fn cpu_linear_and_embedding_read_quantized_weights() {
    let cpu = CpuBackend;
    for kind in 0..KINDS {
        let (n, k) = (7, 512);
        let ty = type_of(kind, k);
        let w = quant_tensor(ty, n, k, 11);
        let x = Tensor::from_f32(vals(5, 2 * 3 * k), vec![2, 3, k]).unwrap();
        let bias = Tensor::from_f32(vals(6, n), vec![n]).unwrap();
        let got = cpu.run(&Op::Linear, &[&x, &w, &bias]).unwrap();
        assert_eq!(got.shape(), [2, 3, n]);
        let (wb, _) = w.quant_bytes().unwrap();
        let want = qlinear::linear(
            x.f32s().unwrap(),
            6,
            k,
            wb,
            ty,
            n,
            Some(bias.f32s().unwrap()),
        )
        .unwrap();
        assert_eq!(got.f32s().unwrap(), &want[..], "{ty}");

        let ids = Tensor::from_i32(vec![6, 0, 3, 3], vec![2, 2]).unwrap();
        let emb = cpu.run(&Op::Embedding, &[&w, &ids]).unwrap();
        assert_eq!(emb.shape(), [2, 2, k]);
        let table = w.to_f32_vec().unwrap();
        for (r, &id) in [6usize, 0, 3, 3].iter().enumerate() {
            assert_eq!(
                &emb.f32s().unwrap()[r * k..(r + 1) * k],
                &table[id * k..(id + 1) * k],
                "{ty}"
            );
        }
        let bad = Tensor::from_i32(vec![7], vec![1]).unwrap();
        assert!(matches!(
            cpu.run(&Op::Embedding, &[&w, &bad]),
            Err(BackendError::Invalid { .. })
        ));
        let wrong = Tensor::from_f32(vals(5, 256), vec![1, 256]).unwrap();
        assert!(matches!(
            cpu.run(&Op::Linear, &[&wrong, &w]),
            Err(BackendError::Shape { .. })
        ));
    }
}

#[test]
fn other_ops_refuse_quantized_tensors_with_dtype_errors() {
    let cpu = CpuBackend;
    let q = quant_tensor(QuantType::Q8_0, 4, 64, 1);
    let f = Tensor::from_f32(vals(1, 4 * 64), vec![4, 64]).unwrap();
    let v = Tensor::from_f32(vals(2, 64), vec![64]).unwrap();
    let ids = Tensor::from_i32(vec![0, 1], vec![2]).unwrap();
    let cases: Vec<(Op, Vec<&Tensor>)> = vec![
        (Op::Linear, vec![&q, &q]),
        (Op::Linear, vec![&f, &f, &q]),
        (Op::Embedding, vec![&f, &q]),
        (Op::Matmul, vec![&f, &q]),
        (Op::Unary(UnaryOp::Silu), vec![&q]),
        (Op::Binary(BinaryOp::Add), vec![&q, &f]),
        (Op::RmsNorm { eps: 1e-6 }, vec![&q, &v]),
        (Op::Softmax { dim: 1 }, vec![&q]),
        (
            Op::Reduce {
                op: ReduceOp::Sum,
                dim: 1,
                keepdim: false,
            },
            vec![&q],
        ),
        (Op::Argmax { dim: 1 }, vec![&q]),
        (Op::Reshape { shape: vec![256] }, vec![&q]),
        (Op::Permute { perm: vec![1, 0] }, vec![&q]),
        (Op::Concat { dim: 0 }, vec![&q, &f]),
        (
            Op::Slice {
                dim: 0,
                start: 0,
                end: 2,
                step: 1,
            },
            vec![&q],
        ),
        (Op::IndexSelect { dim: 0 }, vec![&q, &ids]),
        (Op::Where, vec![&f, &q, &f]),
        // Cast to f32 dequantizes (tests/quant.rs); to another float type
        // it is refused.
        (Op::Cast { dtype: DType::F16 }, vec![&q]),
        (
            Op::Cast {
                dtype: DType::Quant(QuantType::Q4_0),
            },
            vec![&f],
        ),
        (
            Op::Full {
                shape: vec![1, 32],
                value: 1.0,
                dtype: DType::Quant(QuantType::Q8_0),
            },
            vec![],
        ),
        (
            Op::Arange {
                start: 0.0,
                end: 32.0,
                step: 1.0,
                dtype: DType::Quant(QuantType::Q8_0),
            },
            vec![],
        ),
    ];
    for (op, inputs) in cases {
        let got = cpu.run(&op, &inputs);
        assert!(
            matches!(got, Err(BackendError::DType { .. })),
            "{}: {got:?}",
            op.name()
        );
    }
    // The ones with a quantized input name the op and the dtype.
    let msg = cpu
        .run(&Op::Unary(UnaryOp::Exp), &[&q])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unary") && msg.contains("q8_0"), "{msg}");
}
