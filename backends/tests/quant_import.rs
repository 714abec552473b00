//! The ggml types mllm imports (backends/src/quant/import.rs: TQ1_0,
//! IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M):
//! - the reference dequantizers equal gguf-py's `gguf.quants.dequantize`
//!   bit for bit on committed fixtures (tests/fixtures/quants, made by
//!   make_quant_fixture.py);
//! - the lossless repacks (TQ1_0 -> TQ2_0; IQ3_S -> Q6_K; Q5_0, IQ4_NL,
//!   TQ2_0 -> Q8_0 for the OpenCL backend)
//!   hold the very same f32 values;
//! - whatever runs the linear at load (the repacked type's kernels on the
//!   CPU backend, or f32 values) agrees with the reference on random shapes;
//! - bad lengths are errors, never panics.

mod common;

use common::{assert_bits_eq, f32s};

use half::f16;
use mllm_backends::quant::{self, ImportType, QuantType};
use mllm_backends::{Backend, CpuBackend, Op, Tensor};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    common::fixture("quants", name)
}

#[test]
fn type_table_matches_ggml() {
    // (type, block size, bytes per block, ggml id, bits per weight)
    let want = [
        (ImportType::TQ1_0, 256, 54, 34, 1.6875),
        (ImportType::IQ2_XXS, 256, 66, 16, 2.0625),
        (ImportType::IQ2_XS, 256, 74, 17, 2.3125),
        (ImportType::IQ2_S, 256, 82, 22, 2.5625),
        (ImportType::IQ3_XXS, 256, 98, 18, 3.0625),
        (ImportType::IQ3_S, 256, 110, 21, 3.4375),
        (ImportType::IQ1_S, 256, 50, 19, 1.5625),
        (ImportType::IQ1_M, 256, 56, 29, 1.75),
    ];
    for (ty, bs, ts, id, bpw) in want {
        assert_eq!((ty.block_size(), ty.type_size()), (bs, ts), "{ty}");
        assert_eq!(ty.ggml_type_id(), id, "{ty}");
        assert_eq!(ImportType::from_ggml_type_id(id), Some(ty));
        assert_eq!(
            QuantType::from_ggml_type_id(id),
            None,
            "{ty} has no kernels"
        );
        assert_eq!(ty.bits_per_weight(), bpw, "{ty}");
    }
    assert_eq!(ImportType::from_ggml_type_id(8), None);
    // IQ4_XS, Q2_K, Q3_K, Q5_0, Q5_1, IQ4_NL, MXFP4 and TQ2_0 have
    // kernels of their own (tests/quant.rs): no longer imported.
    for id in [23, 10, 11, 6, 7, 20, 39, 35] {
        assert_eq!(ImportType::from_ggml_type_id(id), None);
    }
}

fn row_fn(ty: ImportType) -> fn(&[u8], &mut [f32]) -> Result<(), String> {
    match ty {
        ImportType::TQ1_0 => quant::dequantize_row_tq1_0,
        ImportType::IQ2_XXS => quant::dequantize_row_iq2_xxs,
        ImportType::IQ2_XS => quant::dequantize_row_iq2_xs,
        ImportType::IQ2_S => quant::dequantize_row_iq2_s,
        ImportType::IQ3_XXS => quant::dequantize_row_iq3_xxs,
        ImportType::IQ3_S => quant::dequantize_row_iq3_s,
        ImportType::IQ1_S => quant::dequantize_row_iq1_s,
        ImportType::IQ1_M => quant::dequantize_row_iq1_m,
    }
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for ty in ImportType::ALL {
        let blocks = fixture(&format!("{ty}.blocks"));
        let want = f32s(&fixture(&format!("{ty}.dequant")));
        assert!(want.len() >= 20 * 256, "{ty}: the fixture is too small");
        let got = ty.dequantize(&blocks, want.len()).unwrap();
        assert_bits_eq(ty.name(), &got, &want);
        let mut row = vec![0.0; want.len()];
        row_fn(ty)(&blocks, &mut row).unwrap();
        assert_bits_eq(&format!("dequantize_row of {ty}"), &row, &want);
    }
}

#[test]
fn repacks_hold_the_same_values_bit_for_bit() {
    for ty in ImportType::ALL {
        let blocks = fixture(&format!("{ty}.blocks"));
        let want = f32s(&fixture(&format!("{ty}.dequant")));
        let Some(to) = ty.runs_as() else {
            assert!(ty.repack(&blocks).is_err(), "{ty} has no exact home");
            continue;
        };
        let packed = ty.repack(&blocks).unwrap();
        assert_eq!(packed.len(), to.bytes_for(want.len()).unwrap(), "{ty}");
        let got = quant::dequantize(to, &packed, want.len()).unwrap();
        assert_bits_eq(&format!("{ty} as {to}"), &got, &want);
    }
}

/// The OpenCL backend keeps Q5_0, IQ4_NL and TQ2_0 on the device as Q8_0
/// blocks (it has Q8_0 kernels): the very same f32 values as gguf-py's.
#[test]
fn q5_0_iq4_nl_and_tq2_0_repack_into_q8_0_exactly() {
    type Repack = fn(&[u8], &mut [u8]) -> Result<(), String>;
    let cases: [(QuantType, Repack); 3] = [
        (QuantType::Q5_0, quant::q5::repack_q5_0_to_q8_0),
        (QuantType::IQ4_NL, quant::iq4::repack_iq4_nl_to_q8_0),
        (QuantType::TQ2_0, quant::tq::repack_tq2_0_to_q8_0),
    ];
    for (ty, repack) in cases {
        let blocks = fixture(&format!("{ty}.blocks"));
        let want = f32s(&fixture(&format!("{ty}.dequant")));
        let mut packed = vec![0u8; QuantType::Q8_0.bytes_for(want.len()).unwrap()];
        repack(&blocks, &mut packed).unwrap();
        let got = quant::dequantize(QuantType::Q8_0, &packed, want.len()).unwrap();
        assert_bits_eq(&format!("{ty} as Q8_0"), &got, &want);
        assert!(
            repack(&blocks[1..], &mut packed).is_err(),
            "{ty}: a cut block"
        );
    }
}

/// MXFP4 blocks whose scales an f16 holds (the fixture's blocks with their
/// exponents moved into 2^-24..2^15) repack into Q8_0 blocks of exactly
/// their values, which is how the OpenCL backend keeps them, as do blocks
/// of zeros under any scale; the fixture itself (exponents 2^-128..2^32)
/// is refused, naming a block.
#[test]
fn mxfp4_repacks_into_q8_0_exactly_where_its_scales_are_f16s() {
    let mut blocks = fixture("MXFP4.blocks");
    let n = blocks.len() / 17 * 32;
    let mut out = vec![0u8; QuantType::Q8_0.bytes_for(n).unwrap()];
    let err = quant::mxfp4::repack_mxfp4_to_q8_0(&blocks, &mut out).unwrap_err();
    assert!(err.contains("block 0") && err.contains("f16"), "{err}");
    for (i, b) in blocks.chunks_exact_mut(17).enumerate() {
        b[0] = 104 + (i % 40) as u8;
    }
    // Both ends of the range.
    (blocks[0], blocks[17]) = (104, 143);
    quant::mxfp4::repack_mxfp4_to_q8_0(&blocks, &mut out).unwrap();
    let mut want = vec![0f32; n];
    quant::dequantize_row_mxfp4(&blocks, &mut want).unwrap();
    let got = quant::dequantize(QuantType::Q8_0, &out, n).unwrap();
    assert_bits_eq("MXFP4 as Q8_0", &got, &want);
    // A block of zeros (codes 0 and -0) repacks under any scale.
    blocks[17 * 2] = 0;
    blocks[17 * 2 + 1..17 * 3].fill(0x80);
    quant::mxfp4::repack_mxfp4_to_q8_0(&blocks, &mut out).unwrap();
    quant::dequantize_row_mxfp4(&blocks, &mut want).unwrap();
    let got = quant::dequantize(QuantType::Q8_0, &out, n).unwrap();
    assert_bits_eq("MXFP4 with a zero block as Q8_0", &got, &want);
    for e in [103, 144] {
        blocks[17] = e;
        assert!(
            quant::mxfp4::repack_mxfp4_to_q8_0(&blocks, &mut out).is_err(),
            "a scale of 2^{} passed",
            e as i32 - 128
        );
    }
}

#[test]
fn block_structs_round_trip() {
    let b = fixture("Q5_0.blocks");
    let b: &[u8; 22] = b[..22].try_into().unwrap();
    assert_eq!(&quant::BlockQ5_0::from_bytes(b).to_bytes(), b);
    let b = fixture("Q5_1.blocks");
    let b: &[u8; 24] = b[..24].try_into().unwrap();
    assert_eq!(&quant::BlockQ5_1::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ4_NL.blocks");
    let b: &[u8; 18] = b[..18].try_into().unwrap();
    assert_eq!(&quant::BlockIQ4NL::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ4_XS.blocks");
    let b: &[u8; 136] = b[..136].try_into().unwrap();
    assert_eq!(&quant::BlockIQ4XS::from_bytes(b).to_bytes(), b);
    let b = fixture("Q3_K.blocks");
    let b: &[u8; 110] = b[..110].try_into().unwrap();
    assert_eq!(&quant::BlockQ3K::from_bytes(b).to_bytes(), b);
    let b = fixture("Q2_K.blocks");
    let b: &[u8; 84] = b[..84].try_into().unwrap();
    assert_eq!(&quant::BlockQ2K::from_bytes(b).to_bytes(), b);
    let b = fixture("TQ1_0.blocks");
    let b: &[u8; 54] = b[..54].try_into().unwrap();
    assert_eq!(&quant::BlockTQ1_0::from_bytes(b).to_bytes(), b);
    let b = fixture("TQ2_0.blocks");
    let b: &[u8; 66] = b[..66].try_into().unwrap();
    assert_eq!(&quant::BlockTQ2_0::from_bytes(b).to_bytes(), b);
    let b = fixture("MXFP4.blocks");
    let b: &[u8; 17] = b[..17].try_into().unwrap();
    assert_eq!(&quant::BlockMXFP4::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ2_XXS.blocks");
    let b: &[u8; 66] = b[..66].try_into().unwrap();
    assert_eq!(&quant::BlockIQ2XXS::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ2_XS.blocks");
    let b: &[u8; 74] = b[..74].try_into().unwrap();
    assert_eq!(&quant::BlockIQ2XS::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ2_S.blocks");
    let b: &[u8; 82] = b[..82].try_into().unwrap();
    assert_eq!(&quant::BlockIQ2S::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ3_XXS.blocks");
    let b: &[u8; 98] = b[..98].try_into().unwrap();
    assert_eq!(&quant::BlockIQ3XXS::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ3_S.blocks");
    let b: &[u8; 110] = b[..110].try_into().unwrap();
    assert_eq!(&quant::BlockIQ3S::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ1_S.blocks");
    let b: &[u8; 50] = b[..50].try_into().unwrap();
    assert_eq!(&quant::BlockIQ1S::from_bytes(b).to_bytes(), b);
    let b = fixture("IQ1_M.blocks");
    let b: &[u8; 56] = b[..56].try_into().unwrap();
    let m = quant::BlockIQ1M::from_bytes(b);
    assert_eq!(&m.to_bytes(), b);
    assert!(m.d().is_finite(), "the fixture's IQ1_M scale");
}

#[test]
fn bad_lengths_are_errors_not_panics() {
    for ty in ImportType::ALL {
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let blocks = vec![0u8; 3 * ts];
        let short = &blocks[..3 * ts - 1];
        let err = ty.dequantize(short, 3 * bs).unwrap_err();
        assert!(err.contains(ty.name()) && err.contains("bytes"), "{err}");
        assert!(ty.dequantize(&blocks, 3 * bs + 1).is_err(), "{ty}");
        assert!(ty.dequantize(&blocks, 2 * bs).is_err(), "{ty}");
        assert!(row_fn(ty)(short, &mut vec![0.0; 3 * bs]).is_err(), "{ty}");
        assert!(ty.dequantize(&[], 0).unwrap().is_empty(), "{ty}");
        if ty.runs_as().is_some() {
            let err = ty.repack(short).unwrap_err();
            assert!(err.contains(ty.name()) && err.contains("bytes"), "{err}");
            assert!(ty.repack(&[]).unwrap().is_empty(), "{ty}");
        }
    }
}

/// Every byte pattern is a valid block (the grids are indexed by whole
/// bit fields); garbage gives values (NaN where a scale is), never a panic.
#[test]
fn arbitrary_bytes_never_panic() {
    for ty in ImportType::ALL {
        for seed in 0..8 {
            let blocks = random_bytes(seed, 7 * ty.type_size());
            let v = ty.dequantize(&blocks, 7 * ty.block_size()).unwrap();
            assert_eq!(v.len(), 7 * ty.block_size(), "{ty}");
            if ty.runs_as().is_some() {
                ty.repack(&blocks).unwrap();
            }
        }
    }
}

/// splitmix64 bytes: reproducible random blocks without a RNG crate.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// `n` rows of `k` values of `ty`: random codes with finite scales whose
/// size is about what real weights have (|w| around 0.01..1).
fn random_weight(ty: ImportType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut w = random_bytes(seed, n * k / bs * ts);
    let scales = random_bytes(seed ^ 0xF00D, w.len() / ts * 2);
    // Keep the 32-value scales' sub-block scale budget in mind: Q3_K and
    // IQ4_XS multiply `d` by up to 32.
    let unit = match ty {
        // Grid values up to 43 (IQ2), 62 (IQ3_XXS), 15 * 31 (IQ3_S), 15
        // * 1.125 (IQ1) times the sub-block scale.
        ImportType::IQ2_XXS | ImportType::IQ2_XS | ImportType::IQ2_S => 1e-3,
        ImportType::IQ3_XXS => 1e-3,
        ImportType::IQ3_S => 1e-4,
        _ => 1e-2,
    };
    for (b, blk) in w.chunks_exact_mut(ts).enumerate() {
        for (i, &at) in ty.scale_offsets().iter().enumerate() {
            let r = scales[(2 * b + i) % scales.len()];
            let d =
                unit * (1.0 + (r & 0x7F) as f32 / 32.0) * if r & 0x80 != 0 { -1.0 } else { 1.0 };
            blk[at..at + 2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        }
        if ty == ImportType::IQ1_M {
            // The f16 `d` lives in the top nibbles of the four scale words.
            let r = scales[b % scales.len()];
            let d = f16::from_f32(unit * (1.0 + (r & 0x7F) as f32 / 32.0)).to_bits();
            for k in 0..4 {
                let at = 48 + 2 * k;
                let w = u16::from_le_bytes([blk[at], blk[at + 1]]);
                let w = (w & 0x0FFF) | ((d >> (4 * k)) & 0xF) << 12;
                blk[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
    w
}

fn random_x(seed: u64, n: usize) -> Vec<f32> {
    random_bytes(seed, n)
        .iter()
        .map(|&b| (b as f32 - 127.5) / 128.0)
        .collect()
}

/// How a weight of `ty` runs after load: the repacked type's kernels
/// through the CPU backend (with its load-time preparation), or f32 values.
fn loaded_weight(ty: ImportType, w: &[u8], n: usize, k: usize) -> Tensor {
    let t = match ty.runs_as() {
        Some(to) => Tensor::from_quant(ty.repack(w).unwrap(), to, vec![n, k]).unwrap(),
        None => Tensor::from_f32(ty.dequantize(w, n * k).unwrap(), vec![n, k]).unwrap(),
    };
    CpuBackend.prepare_weight("w", t).unwrap()
}

/// Per output, the most the kernel may differ from the f32 reference:
/// the repacked kernels quantize the activations to int8 per 32 (Q8_0) or
/// 256 (Q6_K, Q3_K, scaled Q6_K) values, moving each block's dot by at most half a step
/// (`max|x| / 127 / 2`) times the weights' absolute sum there; plus f32
/// summation slack (1e-5 of `sum |x w|`) for every path.
fn bound(ty: ImportType, x: &[f32], wf: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let ab = match ty.runs_as() {
        Some(q) if q.has_super_blocks() => Some(256),
        Some(_) => Some(32),
        None => None,
    };
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let (xs, ws) = (&x[i * k..(i + 1) * k], &wf[j * k..(j + 1) * k]);
            let mag: f64 = xs.iter().zip(ws).map(|(a, w)| (a * w).abs() as f64).sum();
            let mut e = 0.0f64;
            if let Some(ab) = ab {
                for (xb, wb) in xs.chunks(ab).zip(ws.chunks(ab)) {
                    let step = xb.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                    e += 0.5 * step * wb.iter().map(|w| w.abs() as f64).sum::<f64>();
                }
            }
            out[i * n + j] = (e * 1.001 + 1e-5 * mag + 1e-6) as f32;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Odd row counts included; k of 1..16 blocks; m = 1..6 activation
    /// rows (decode and small prefill tiles).
    #[test]
    fn loaded_linear_matches_the_reference(
        kind in 0..ImportType::ALL.len(),
        m in 1usize..7,
        n in 1usize..24,
        blocks in 1usize..17,
        seed in any::<u64>(),
    ) {
        let ty = ImportType::ALL[kind];
        let k = blocks * ty.block_size();
        let w = random_weight(ty, n, k, seed);
        let wf = ty.dequantize(&w, n * k).unwrap();
        let mut reference = vec![0.0; n * k];
        row_fn(ty)(&w, &mut reference).unwrap();
        prop_assert!(wf.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits()));
        let x = random_x(seed ^ 0x5555, m * k);
        let want = mllm_backends::cpu::linear::linear_ref(
            &x, m, k, mllm_backends::FloatSlice::F32(&reference), n, None,
        );
        let xt = Tensor::from_f32(x.clone(), vec![m, k]).unwrap();
        let wt = loaded_weight(ty, &w, n, k);
        let got = CpuBackend.run(&Op::Linear, &[&xt, &wt]).unwrap();
        prop_assert_eq!(got.shape(), &[m, n][..]);
        let got = got.f32s().unwrap();
        let e = bound(ty, &x, &reference, m, k, n);
        for idx in 0..m * n {
            prop_assert!(
                (got[idx] - want[idx]).abs() <= e[idx],
                "{} m={} n={} k={}: out[{}] = {}, reference {}, bound {}",
                ty, m, n, k, idx, got[idx], want[idx], e[idx]
            );
        }
    }
}
