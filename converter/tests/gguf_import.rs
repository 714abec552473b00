//! GGUF tensors of the ggml types mllm imports (TQ1_0, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S, IQ1_M; backends/src/quant/import.rs) through the real loader:
//! tests/fixtures/quants/import.gguf (make_quant_fixture.py) holds one
//! tensor per type whose blocks are that type's `.blocks` fixture, so every
//! loaded value must equal gguf-py's `.dequant` bit for bit, and a linear
//! on the loaded weight must match the f32 linear on those values.
//! Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, MXFP4 and TQ2_0, which have
//! kernels of their own, are in the file too
//! and load as their own blocks (`own_types_load_as_their_blocks`).

use std::path::PathBuf;

use mllm_backends::quant::{ImportType, QuantType};
use mllm_backends::weights::WeightSource;
use mllm_backends::{Backend, CpuBackend, DType, FloatSlice, Op, Tensor};
use mllm_converter::gguf::{GgmlType, GgufWeights};
use mllm_converter::ConvertError;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/quants")
        .join(name)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// (type, GGUF tensor, rows) as make_quant_fixture.py writes them.
const TENSORS: [(ImportType, &str, usize); 8] = [
    (ImportType::TQ1_0, "blk.0.ffn_down.weight", 5),
    (ImportType::IQ2_XXS, "blk.1.attn_v.weight", 5),
    (ImportType::IQ2_XS, "blk.1.attn_output.weight", 5),
    (ImportType::IQ2_S, "blk.1.ffn_gate.weight", 5),
    (ImportType::IQ3_XXS, "blk.1.ffn_up.weight", 5),
    (ImportType::IQ3_S, "blk.1.ffn_down.weight", 5),
    (ImportType::IQ1_S, "blk.2.attn_q.weight", 5),
    (ImportType::IQ1_M, "blk.2.attn_k.weight", 5),
];

fn hf_name(w: &GgufWeights, gguf: &str) -> String {
    w.names()
        .into_iter()
        .find(|n| w.gguf_name(n) == Some(gguf))
        .unwrap_or_else(|| panic!("no tensor `{gguf}`"))
}

fn splitmix(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
fn the_table_names_every_imported_type() {
    for ty in ImportType::ALL {
        let g = GgmlType::from_id(ty.ggml_type_id()).unwrap();
        assert_eq!(g.name, ty.name());
        assert_eq!(
            (g.block_size, g.type_size),
            (ty.block_size(), ty.type_size())
        );
        assert_eq!(g.import(), Some(ty));
        assert!(g.is_loadable() && g.quant().is_none() && g.dtype().is_none());
    }
    assert!(!GgmlType::from_id(40).unwrap().is_loadable(), "NVFP4");
    assert!(!GgmlType::from_id(15).unwrap().is_loadable(), "Q8_K");
}

#[test]
fn imported_tensors_load_with_gguf_py_values() {
    for dequantize in [false, true] {
        let mut w = GgufWeights::open(&fixture("import.gguf")).unwrap();
        w.set_dequantize(dequantize);
        for (ty, gguf, rows) in TENSORS {
            let want = f32s(&std::fs::read(fixture(&format!("{ty}.dequant"))).unwrap());
            let name = hf_name(&w, gguf);
            let info = w.info(&name).unwrap();
            let cols = want.len() / rows;
            assert_eq!(info.shape, [rows, cols], "{ty}");
            let dtype = match ty.runs_as() {
                Some(q) if !dequantize => DType::Quant(q),
                _ => DType::F32,
            };
            assert_eq!(info.dtype, dtype, "{ty}");
            let got = w.load(&name).unwrap();
            assert_eq!(
                (got.dtype(), got.shape()),
                (dtype, &[rows, cols][..]),
                "{ty}"
            );
            let vals = got.to_f32_vec().unwrap();
            for (i, (g, e)) in vals.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), e.to_bits(), "{ty}[{i}]: {g}, gguf-py {e}");
            }
            // Conversion to .mllm copies the repacked blocks.
            let blocks = w.blocks(&name);
            match (w.block_type(&name), ty.runs_as()) {
                (Some(q), Some(r)) if !dequantize => {
                    assert_eq!(q, r);
                    let file = std::fs::read(fixture(&format!("{ty}.blocks"))).unwrap();
                    assert_eq!(blocks, Some(ty.repack(&file).unwrap()), "{ty}");
                }
                (Some(q), _) => assert!(dequantize, "{ty} copies as {q}"),
                (None, r) => assert!(r.is_none() && blocks.is_none(), "{ty}"),
            }
        }
    }
}

/// The loaded weight on the CPU backend (after its load-time preparation)
/// against the f32 linear on gguf-py's values: exact products for the f32
/// loads, and within the int8 activation rounding (half a step of
/// `max|x| / 127` per 32 or 256 values, times the weights there) for the
/// repacked Q3_K / Q6_K kernels; 1e-5 of `sum |x w|` float slack for all.
#[test]
fn linear_on_loaded_weights_matches_the_reference() {
    let w = GgufWeights::open(&fixture("import.gguf")).unwrap();
    let cpu = CpuBackend;
    for (ty, gguf, rows) in TENSORS {
        let want_w = f32s(&std::fs::read(fixture(&format!("{ty}.dequant"))).unwrap());
        let (n, k) = (rows, want_w.len() / rows);
        let m = 3;
        let x = splitmix(k as u64, m * k);
        let weight = cpu
            .prepare_weight("w", w.load(&hf_name(&w, gguf)).unwrap())
            .unwrap();
        let xt = Tensor::from_f32(x.clone(), vec![m, k]).unwrap();
        let got = cpu.run(&Op::Linear, &[&xt, &weight]).unwrap();
        let got = got.f32s().unwrap();
        let want =
            mllm_backends::cpu::linear::linear_ref(&x, m, k, FloatSlice::F32(&want_w), n, None);
        let ab = match ty.runs_as() {
            Some(q) if q.has_super_blocks() => Some(256),
            Some(_) => Some(32),
            None => None,
        };
        for i in 0..m {
            for j in 0..n {
                let (xs, ws) = (&x[i * k..(i + 1) * k], &want_w[j * k..(j + 1) * k]);
                let mag: f64 = xs.iter().zip(ws).map(|(a, b)| (a * b).abs() as f64).sum();
                let mut e = 1e-5 * mag + 1e-6;
                if let Some(ab) = ab {
                    for (xb, wb) in xs.chunks(ab).zip(ws.chunks(ab)) {
                        let step = xb.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                        e += 0.5 * 1.001 * step * wb.iter().map(|v| v.abs() as f64).sum::<f64>();
                    }
                }
                let (g, r) = (got[i * n + j], want[i * n + j]);
                assert!(
                    ((g - r).abs() as f64) <= e,
                    "{ty} out[{i}, {j}] = {g}, reference {r}, bound {e}"
                );
            }
        }
    }
}

/// Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, MXFP4 and TQ2_0 have kernels of their own:
/// each tensor loads as its
/// blocks (the file's bytes, which conversion to .mllm copies), with
/// gguf-py's values, and the CPU linear on it stays within the int8
/// activation rounding.
#[test]
fn own_types_load_as_their_blocks() {
    let w = GgufWeights::open(&fixture("import.gguf")).unwrap();
    for (q, gguf, n) in [
        (QuantType::Q5_0, "blk.0.attn_q.weight", 3),
        (QuantType::Q5_1, "blk.0.attn_k.weight", 3),
        (QuantType::IQ4_NL, "blk.0.attn_v.weight", 3),
        (QuantType::IQ4_XS, "blk.0.attn_output.weight", 5),
        (QuantType::Q2_K, "blk.0.ffn_up.weight", 5),
        (QuantType::Q3_K, "blk.0.ffn_gate.weight", 5),
        (QuantType::MXFP4, "blk.1.attn_k.weight", 5),
        (QuantType::TQ2_0, "blk.1.attn_q.weight", 5),
    ] {
        let name = hf_name(&w, gguf);
        let want = f32s(&std::fs::read(fixture(&format!("{q}.dequant"))).unwrap());
        let file = std::fs::read(fixture(&format!("{q}.blocks"))).unwrap();
        let k = want.len() / n;
        let ty = DType::Quant(q);
        assert_eq!(w.info(&name).unwrap().dtype, ty);
        assert_eq!(w.block_type(&name), Some(q));
        assert_eq!(w.blocks(&name), Some(file));
        let got = w.load(&name).unwrap();
        assert_eq!((got.dtype(), got.shape()), (ty, &[n, k][..]));
        let vals = got.to_f32_vec().unwrap();
        for (i, (g, e)) in vals.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), e.to_bits(), "{q}[{i}]: {g}, gguf-py {e}");
        }
        let m = 9;
        let x = splitmix(7, m * k);
        let weight = CpuBackend.prepare_weight("w", got).unwrap();
        let xt = Tensor::from_f32(x.clone(), vec![m, k]).unwrap();
        let out = CpuBackend.run(&Op::Linear, &[&xt, &weight]).unwrap();
        let out = out.f32s().unwrap();
        let reference =
            mllm_backends::cpu::linear::linear_ref(&x, m, k, FloatSlice::F32(&want), n, None);
        for i in 0..m {
            for j in 0..n {
                let (xs, ws) = (&x[i * k..(i + 1) * k], &want[j * k..(j + 1) * k]);
                let mag: f64 = xs.iter().zip(ws).map(|(a, b)| (a * b).abs() as f64).sum();
                let mut e = 1e-5 * mag + 1e-6;
                for (xb, wb) in xs.chunks(256).zip(ws.chunks(256)) {
                    let step = xb.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                    e += 0.5 * 1.001 * step * wb.iter().map(|v| v.abs() as f64).sum::<f64>();
                }
                let (g, r) = (out[i * n + j], reference[i * n + j]);
                assert!(
                    g.is_finite() && ((g - r).abs() as f64) <= e,
                    "{q} out[{i}, {j}] = {g}, reference {r}, bound {e}"
                );
            }
        }
    }
}

/// A type mllm cannot read is refused with a message naming the tensor,
/// its type and what mllm reads (NVFP4 takes 36 bytes per 64 values, as
/// IQ4_NL takes 18 per 32, so patching the type id of the IQ4_NL tensor,
/// 2048 values a row, keeps the file's sizes valid).
#[test]
fn an_unreadable_type_is_refused_by_name() {
    let mut bytes = std::fs::read(fixture("import.gguf")).unwrap();
    let name = b"blk.0.attn_v.weight";
    let at = bytes
        .windows(name.len())
        .position(|win| win == name)
        .expect("tensor info");
    // name, then n_dims (u32), two u64 dims, then the u32 type.
    let ty_at = at + name.len() + 4 + 16;
    assert_eq!(&bytes[ty_at..ty_at + 4], &20u32.to_le_bytes(), "IQ4_NL");
    bytes[ty_at..ty_at + 4].copy_from_slice(&40u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvfp4.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let err = GgufWeights::open(&path).unwrap_err();
    assert!(matches!(err, ConvertError::Unsupported(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("blk.0.attn_v.weight") && msg.contains("NVFP4") && msg.contains("IQ1_M"),
        "{msg}"
    );
}

/// `mllm convert` keeps an imported tensor as the blocks it runs as
/// (`block_type` / `blocks`): written to a .mllm table under that type's
/// id and read back, every value is still gguf-py's, bit for bit (the
/// scaled Q6_K and Q8_KS ids included).
#[test]
fn repacked_blocks_round_trip_through_a_mllm_file() {
    use mllm_converter::mllm_format::{MllmFile, MllmWriter, PlannedTensor, Recipe, StoredType};
    let w = GgufWeights::open(&fixture("import.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("import.mllm");
    let mut planned = vec![];
    let mut data = vec![];
    for (ty, gguf, rows) in TENSORS {
        let name = hf_name(&w, gguf);
        let Some(q) = w.block_type(&name) else {
            assert!(ty.runs_as().is_none(), "{ty}");
            continue;
        };
        let info = w.info(&name).unwrap();
        assert_eq!(info.shape[0], rows, "{ty}");
        planned.push(PlannedTensor {
            name: ty.name().into(),
            ty: StoredType::Quant(q),
            requested: StoredType::Quant(q),
            shape: info.shape.clone(),
        });
        data.push((ty, w.blocks(&name).unwrap()));
    }
    assert!(planned.len() >= 6, "the repacked types");
    let meta = serde_json::json!({
        "config": {"model_type": "x"},
        "recipe": Recipe::default_for(StoredType::F16).to_json(),
        "source": {"format": "test"},
        "tokenizer_json": "{}",
    });
    let mut wr = MllmWriter::create(&out, &meta, &planned).unwrap();
    for (ty, bytes) in &data {
        wr.write_next(ty.name(), bytes).unwrap();
    }
    wr.finish().unwrap();
    let f = MllmFile::open(&out).unwrap();
    for (ty, _) in &data {
        let want = f32s(&std::fs::read(fixture(&format!("{ty}.dequant"))).unwrap());
        let t = f.load(ty.name()).unwrap();
        assert_eq!(t.dtype(), DType::Quant(ty.runs_as().unwrap()), "{ty}");
        let got = t.to_f32_vec().unwrap();
        assert_eq!(got.len(), want.len(), "{ty}");
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), e.to_bits(), "{ty}[{i}]");
        }
    }
}
