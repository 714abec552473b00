//! Tests of the ggml-compatible quant blocks (backends/src/quant): bit-exact
//! agreement with gguf-py's numpy reference on committed fixtures
//! (tests/fixtures/gguf/quant, made by make_gguf_fixtures.py), error bounds
//! of quantize -> dequantize on random shapes, and clean errors (never
//! panics) on bad lengths.

mod common;

use common::{assert_bits_eq, f32s};

use half::f16;
use mllm_backends::quant::{
    self, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ6K, BlockQ8_0, QuantType,
};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    common::fixture("gguf/quant", name)
}

#[test]
fn type_table_matches_ggml() {
    let want = [
        (QuantType::Q4_0, 32, 18, 2, 4.5),
        (QuantType::Q4_1, 32, 20, 3, 5.0),
        (QuantType::Q8_0, 32, 34, 8, 8.5),
        (QuantType::Q4_K, 256, 144, 12, 4.5),
        (QuantType::Q5_K, 256, 176, 13, 5.5),
        (QuantType::Q6_K, 256, 210, 14, 6.5625),
        (QuantType::IQ4_XS, 256, 136, 23, 4.25),
        (QuantType::Q2_K, 256, 84, 10, 2.625),
        (QuantType::Q3_K, 256, 110, 11, 3.4375),
        (QuantType::Q5_0, 32, 22, 6, 5.5),
        (QuantType::Q5_1, 32, 24, 7, 6.0),
        (QuantType::IQ4_NL, 32, 18, 20, 4.5),
        (QuantType::MXFP4, 32, 17, 39, 4.25),
        (QuantType::TQ2_0, 256, 66, 35, 2.0625),
    ];
    for (ty, bs, ts, id, bpw) in want {
        assert_eq!((ty.block_size(), ty.type_size()), (bs, ts), "{ty}");
        assert_eq!(ty.ggml_type_id(), id, "{ty}");
        assert_eq!(QuantType::from_ggml_type_id(id), Some(ty));
        assert_eq!(ty.bits_per_weight(), bpw, "{ty}");
    }
    assert_eq!(QuantType::from_ggml_type_id(0), None);
    assert_eq!(
        QuantType::from_ggml_type_id(16),
        None,
        "IQ2_XXS is imported, not computed in its blocks"
    );
}

#[test]
fn dequantize_matches_gguf_py_for_every_type() {
    for ty in QuantType::ALL {
        // The fixtures of the types that used to be imported sit with the
        // imported types'.
        let fixture = |name: &str| match ty {
            QuantType::IQ4_XS
            | QuantType::Q2_K
            | QuantType::Q3_K
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::IQ4_NL
            | QuantType::MXFP4
            | QuantType::TQ2_0 => common::fixture("quants", name),
            _ => fixture(name),
        };
        let blocks = fixture(&format!("{}.blocks", ty.name()));
        let want = f32s(&fixture(&format!("{}.dequant", ty.name())));
        let got = quant::dequantize(ty, &blocks, want.len()).unwrap();
        assert_bits_eq(ty.name(), &got, &want);
        // The per-type row function is the same oracle.
        let mut row = vec![0.0; want.len()];
        let f = match ty {
            QuantType::Q4_0 => quant::dequantize_row_q4_0,
            QuantType::Q4_1 => quant::dequantize_row_q4_1,
            QuantType::Q8_0 => quant::dequantize_row_q8_0,
            QuantType::Q4_K => quant::dequantize_row_q4_k,
            QuantType::Q5_K => quant::dequantize_row_q5_k,
            QuantType::Q6_K => quant::dequantize_row_q6_k,
            QuantType::IQ4_XS => quant::dequantize_row_iq4_xs,
            QuantType::Q2_K => quant::dequantize_row_q2_k,
            QuantType::Q3_K => quant::dequantize_row_q3_k,
            QuantType::Q5_0 => quant::dequantize_row_q5_0,
            QuantType::Q5_1 => quant::dequantize_row_q5_1,
            QuantType::IQ4_NL => quant::dequantize_row_iq4_nl,
            QuantType::MXFP4 => quant::dequantize_row_mxfp4,
            QuantType::TQ2_0 => quant::dequantize_row_tq2_0,
            QuantType::W4A16 { .. }
            | QuantType::W8A8 { .. }
            | QuantType::Q4_0x16
            | QuantType::Q4_1x16
            | QuantType::Q8_0x16
            | QuantType::IQ4_NLx16
            | QuantType::Q5_0x16
            | QuantType::Q5_1x16
            | QuantType::MXFP4x16
            | QuantType::Q6KScaled { .. }
            | QuantType::Q8KS { .. } => unreachable!("not in ggml"),
        };
        f(&blocks, &mut row).unwrap();
        assert_bits_eq(ty.name(), &row, &want);
    }
}

#[test]
fn quantize_matches_gguf_py_byte_for_byte() {
    for ty in QuantType::ALL.into_iter().filter(|t| t.can_quantize()) {
        let input = f32s(&fixture(&format!("{}.input", ty.name())));
        let want = fixture(&format!("{}.blocks", ty.name()));
        let got = quant::quantize(ty, &input).unwrap();
        assert_eq!(got.len(), want.len(), "{ty}");
        let ts = ty.type_size();
        for (b, (g, w)) in got.chunks(ts).zip(want.chunks(ts)).enumerate() {
            assert_eq!(g, w, "{ty} block {b} differs from gguf-py");
        }
    }
}

#[test]
fn block_structs_round_trip_their_bytes() {
    fn check<const N: usize, B>(ty: QuantType, from: fn(&[u8; N]) -> B, to: fn(&B) -> [u8; N]) {
        let bytes = fixture(&format!("{}.blocks", ty.name()));
        let (blocks, rest) = bytes.as_chunks::<N>();
        assert!(rest.is_empty() && !blocks.is_empty());
        for b in blocks {
            assert_eq!(&to(&from(b)), b, "{ty}");
        }
    }
    check(QuantType::Q4_0, BlockQ4_0::from_bytes, BlockQ4_0::to_bytes);
    check(QuantType::Q4_1, BlockQ4_1::from_bytes, BlockQ4_1::to_bytes);
    check(QuantType::Q8_0, BlockQ8_0::from_bytes, BlockQ8_0::to_bytes);
    check(QuantType::Q4_K, BlockQ4K::from_bytes, BlockQ4K::to_bytes);
    check(QuantType::Q5_K, BlockQ5K::from_bytes, BlockQ5K::to_bytes);
    check(QuantType::Q6_K, BlockQ6K::from_bytes, BlockQ6K::to_bytes);
}

#[test]
fn q4_k_scale_packing() {
    // Scales 0..8 = 1, 2, ..., 8 + 56 (needs the top bits), mins = 63 - j.
    let sc: Vec<u8> = (0..8)
        .map(|j| if j < 4 { j + 1 } else { j + 1 + 48 })
        .collect();
    let mn: Vec<u8> = (0..8).map(|j| 63 - j).collect();
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        q[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        q[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    for j in 0..8 {
        assert_eq!(
            quant::k_quants::scale_min_k4(j, &q),
            (sc[j], mn[j]),
            "sub-block {j}"
        );
    }
}

#[test]
fn parallel_path_equals_row_function() {
    // More blocks than one parallel task takes, with arbitrary (even NaN) scales.
    let n_blocks = 2500;
    let bytes: Vec<u8> = (0..n_blocks * 20).map(|i| (i * 7919 % 251) as u8).collect();
    let par = quant::dequantize(QuantType::Q4_1, &bytes, n_blocks * 32).unwrap();
    let mut row = vec![0.0; n_blocks * 32];
    quant::dequantize_row_q4_1(&bytes, &mut row).unwrap();
    assert!(par
        .iter()
        .zip(&row)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn bad_lengths_are_errors() {
    for ty in QuantType::ALL {
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let bytes = vec![0u8; 2 * ts];
        assert!(quant::dequantize(ty, &bytes, 2 * bs).is_ok());
        let e = quant::dequantize(ty, &bytes[1..], 2 * bs).unwrap_err();
        assert!(e.contains(ty.name()), "{e}");
        assert!(quant::dequantize(ty, &bytes, 2 * bs + 1).is_err());
        assert!(quant::dequantize(ty, &bytes, bs).is_err());
        assert!(quant::dequantize_into(ty, &bytes, &mut vec![0.0; 3 * bs]).is_err());
        assert!(quant::dequantize(ty, &[], 0).unwrap().is_empty());
        assert!(quant::dequantize(ty, &[], usize::MAX / 2 * 2).is_err());
    }
    assert!(quant::quantize(QuantType::Q8_0, &[1.0; 31]).is_err());
    assert!(quant::quantize(QuantType::Q4_K, &[1.0; 256]).is_err());
    assert!(quant::quantize_row_q4_0_ref(&[1.0; 32], &mut [0u8; 17]).is_err());
}

/// Largest |x - dequantize(quantize(x))| allowed in one block, from ggml's
/// rounding rule plus the f16 rounding of the stored scale (and min).
fn tolerance(ty: QuantType, x: &[f32]) -> f32 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let min = x.iter().fold(f32::MAX, |a, &v| a.min(v));
    let max = x.iter().fold(-f32::MAX, |a, &v| a.max(v));
    let r16 = |v: f32| (v - f16::from_f32(v).to_f32()).abs();
    let slack = 1e-6 * amax + 1e-30;
    match ty {
        // Half a step, except that the extreme opposite the chosen max
        // clips from code 16 to 15: a whole step.
        QuantType::Q4_0 => {
            let d = amax / 8.0;
            d + 8.0 * r16(d) + slack
        }
        QuantType::Q4_1 => {
            let d = (max - min) / 15.0;
            0.5 * d + 15.0 * r16(d) + r16(min) + slack
        }
        QuantType::Q8_0 => {
            let d = amax / 127.0;
            0.5 * d + 127.0 * r16(d) + slack
        }
        _ => unreachable!("no K-quant quantizer yet"),
    }
}

fn blocks_strategy() -> impl Strategy<Value = Vec<f32>> {
    // 1..=9 blocks (odd counts included), magnitudes from 1e-3 to 1e3 so
    // the f16 scales neither overflow nor vanish, some constant blocks.
    (1usize..=9, -3.0f32..3.0, any::<bool>()).prop_flat_map(|(n, log_scale, constant)| {
        let scale = 10f32.powf(log_scale);
        proptest::collection::vec(-1.0f32..1.0, n * 32).prop_map(move |mut v| {
            if constant {
                let c = v[0];
                v[..32].iter_mut().for_each(|x| *x = c);
            }
            v.iter().map(|x| x * scale).collect()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn quantize_dequantize_error_is_bounded(x in blocks_strategy()) {
        for ty in [QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0] {
            let bytes = quant::quantize(ty, &x).unwrap();
            prop_assert_eq!(bytes.len(), x.len() / 32 * ty.type_size());
            let y = quant::dequantize(ty, &bytes, x.len()).unwrap();
            for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let tol = tolerance(ty, xb);
                for (i, (a, c)) in xb.iter().zip(yb).enumerate() {
                    prop_assert!((a - c).abs() <= tol,
                        "{} block {} [{}]: {} -> {} (tolerance {})", ty, b, i, a, c, tol);
                }
            }
        }
    }

    #[test]
    fn dequantize_never_panics_on_random_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..700),
        n in 0usize..1200,
    ) {
        for ty in QuantType::ALL {
            let ok = quant::dequantize(ty, &bytes, n);
            let fits = n % ty.block_size() == 0 && bytes.len() == n / ty.block_size() * ty.type_size();
            prop_assert_eq!(ok.is_ok(), fits, "{} with {} bytes, {} values", ty, bytes.len(), n);
        }
    }
}

/// mllm's own types: W4A16 with groups of 32 is Q4_0 byte for byte; every
/// group size and W8A8 reconstruct within half a quantization step.
#[test]
fn w4a16_and_w8a8_round_trip() {
    let x: Vec<f32> = (0..4 * 384)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1.0 + (i % 13) as f32))
        .collect();
    let g32 = QuantType::w4a16(32).unwrap();
    assert_eq!(
        quant::quantize(g32, &x).unwrap(),
        quant::quantize(QuantType::Q4_0, &x).unwrap()
    );
    for g in quant::W4A16_GROUPS {
        let ty = QuantType::w4a16(g).unwrap();
        assert_eq!(ty.bits_per_weight(), 4.0 + 16.0 / g as f64);
        let back = quant::dequantize(ty, &quant::quantize(ty, &x).unwrap(), x.len()).unwrap();
        for (grp, (a, b)) in x.chunks(g).zip(back.chunks(g)).enumerate() {
            let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            // d = amax / 8 in f16; the opposite extreme may clip at 7 * d.
            let step = amax / 8.0 * 1.001;
            for (p, q) in a.iter().zip(b) {
                assert!((p - q).abs() <= step, "g{g} group {grp}: {p} -> {q}");
            }
        }
        assert_eq!(QuantType::from_type_id(ty.ggml_type_id(), 384), Some(ty));
    }
    let ty = QuantType::w8a8(384).unwrap();
    assert_eq!(ty.type_size(), 388);
    let q = quant::quantize(ty, &x).unwrap();
    assert_eq!(q.len(), 4 * 388);
    let back = quant::dequantize(ty, &q, x.len()).unwrap();
    for (a, b) in x.chunks(384).zip(back.chunks(384)) {
        let half_step = a.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0 / 2.0 * 1.001;
        for (p, q) in a.iter().zip(b) {
            assert!((p - q).abs() <= half_step, "{p} -> {q}");
        }
    }
    assert_eq!(QuantType::from_type_id(ty.ggml_type_id(), 384), Some(ty));
    assert_eq!(QuantType::from_type_id(ty.ggml_type_id(), 0), None);
    assert!(QuantType::w4a16(48).is_none());
    // Lengths that are not whole rows are errors, not panics.
    assert!(quant::dequantize(ty, &q[..q.len() - 1], x.len()).is_err());
    assert!(quant::quantize(ty, &x[..383]).is_err());
}

/// `Cast` to f32 dequantizes blocks (what a script's `.float()` does to a
/// quantized table); casting to another float type or into blocks is
/// refused by shape inference.
#[test]
fn cast_to_f32_dequantizes_blocks() {
    use mllm_backends::{Backend, CpuBackend, DType, Op, Tensor, TensorMeta};
    let vals: Vec<f32> = (0..3 * 64)
        .map(|i| ((i * 37) % 23) as f32 * 0.1 - 1.1)
        .collect();
    for ty in [QuantType::Q8_0, QuantType::Q4_0] {
        let bytes = quant::quantize(ty, &vals).expect("quantize");
        let want = quant::dequantize(ty, &bytes, vals.len()).expect("dequantize");
        let t = Tensor::from_quant(bytes, ty, vec![3, 64]).expect("tensor");
        let op = Op::Cast { dtype: DType::F32 };
        let m = TensorMeta::new(vec![3, 64], DType::Quant(ty));
        let meta = op.infer(std::slice::from_ref(&m)).expect("infer");
        assert_eq!((meta.dtype, meta.shape.clone()), (DType::F32, vec![3, 64]));
        let out = CpuBackend.run(&op, &[&t]).expect("cast");
        assert_bits_eq(&format!("{ty:?}"), &out.to_f32_vec().expect("f32"), &want);
        let to_f16 = Op::Cast { dtype: DType::F16 };
        assert!(to_f16.infer(&[m]).is_err(), "{ty:?} -> f16");
    }
}

#[test]
fn scaled_q6_k_is_q6_k_times_its_power_of_two() {
    // Random Q6_K blocks (a finite d at byte 208) read as Q6_K/2^s: each
    // value is the Q6_K one times 2^-s, bit for bit; the .mllm table id
    // names the type and no other; it is read, never written, by mllm.
    let mut bytes: Vec<u8> = (0..3 * 210).map(|i| (i * 73 + 5) as u8).collect();
    for (b, blk) in bytes.chunks_exact_mut(210).enumerate() {
        let d = half::f16::from_f32(0.003 * (b as f32 - 1.2));
        blk[208..].copy_from_slice(&d.to_le_bytes());
    }
    let plain = quant::dequantize(QuantType::Q6_K, &bytes, 768).unwrap();
    for shift in quant::Q6K_SHIFTS {
        let ty = QuantType::q6k_scaled(shift).unwrap();
        assert_eq!((ty.block_size(), ty.type_size()), (256, 210));
        let got = quant::dequantize(ty, &bytes, 768).unwrap();
        for (g, p) in got.iter().zip(&plain) {
            assert_eq!(g.to_bits(), (p / (1 << shift) as f32).to_bits(), "{ty}");
        }
        assert_eq!(QuantType::from_type_id(ty.ggml_type_id(), 256), Some(ty));
        assert!(quant::quantize(ty, &plain).is_err());
    }
    for bad in [0, 4, 99] {
        assert_eq!(QuantType::q6k_scaled(bad), None);
        let id = quant::Q6K_SCALED_ID_BASE + bad as u32;
        assert_eq!(QuantType::from_type_id(id, 256), None, "id {id}");
    }
}

#[test]
fn q8_ks_values_are_d_times_scale_times_code_over_its_power_of_two() {
    // Blocks built from codes (-64..=63 plus 64), i8 scales and a finite
    // d: each value is `((d * scale) * code) * 2^-s`, bit for bit; the
    // bytes round trip; each shift has its own table id; never written.
    let blocks: Vec<quant::BlockQ8KS> = (0..3)
        .map(|b| {
            let d = half::f16::from_f32(0.004 * (b as f32 - 1.3));
            let scales = std::array::from_fn(|k| (k as i32 * 17 - 128 + 9 * b) as i8);
            quant::BlockQ8KS::from_codes(d, scales, |e| ((e * 37 + b as usize) % 128) as i8 - 64)
        })
        .collect();
    let bytes: Vec<u8> = blocks.iter().flat_map(|b| b.to_bytes()).collect();
    for (b, blk) in blocks.iter().enumerate() {
        let raw: &[u8; 274] = bytes[274 * b..274 * (b + 1)].try_into().unwrap();
        assert_eq!(&quant::BlockQ8KS::from_bytes(raw), blk);
    }
    for shift in quant::Q8KS_SHIFTS {
        let ty = QuantType::q8ks(shift).unwrap();
        assert_eq!((ty.block_size(), ty.type_size()), (256, 274));
        let got = quant::dequantize(ty, &bytes, 768).unwrap();
        for (i, g) in got.iter().enumerate() {
            let blk = &blocks[i / 256];
            let code = ((i % 256) * 37 + i / 256) % 128;
            let want = (blk.d.to_f32() * blk.scales[(i % 256) / 16] as f32) * (code as f32 - 64.0);
            let want = want / (1 << shift) as f32;
            assert_eq!(g.to_bits(), want.to_bits(), "{ty} value {i}");
        }
        assert_eq!(QuantType::from_type_id(ty.ggml_type_id(), 256), Some(ty));
        assert!(quant::quantize(ty, &got).is_err());
    }
    assert_eq!(QuantType::q8ks(4), None);
    let id = quant::Q8KS_ID_BASE + 4;
    assert_eq!(QuantType::from_type_id(id, 256), None, "id {id}");
}
