//! The `.mllm` format (converter/FORMAT.md): conversion round trips from the
//! tiny Qwen3 safetensors fixtures and the tiny Llama GGUF at every type
//! (metadata included), recipes and fallbacks, and the K-quant quantizers.
//! The reader on damaged files is tested in mllm_format_reader.rs.

use std::path::{Path, PathBuf};

use half::{bf16, f16};
use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::WeightSource;
use mllm_backends::{Buffer, DType};
use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights};
use mllm_converter::mllm_format::{convert, glob_match, quantize, MllmFile, Recipe, StoredType};
use mllm_converter::tokenizer::{GgufVocab, Tokenizer};
use mllm_converter::SafetensorsDir;
use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn convert_to(src: &Path, ty: &str, recipe: Option<&Path>) -> (tempfile::TempDir, MllmFile) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("m.{ty}.mllm"));
    let mut calls = vec![];
    let s = convert(src, &out, ty, recipe, |d, t| calls.push((d, t))).unwrap();
    assert_eq!(
        calls.last().map(|c| c.0),
        Some(s.tensors),
        "progress ends at the total"
    );
    assert!(calls.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(!dir.path().join(format!("m.{ty}.mllm.tmp")).exists());
    let f = MllmFile::open(&out).unwrap();
    f.verify().unwrap();
    (dir, f)
}

/// Panics unless every value is finite: `f32::max` skips a NaN, so a
/// dequantizer that produced NaN would otherwise pass `max_err`'s bound
/// (the converter's tests cannot use tests/tests/common's twin).
#[track_caller]
fn assert_finite(name: &str, v: &[f32]) {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        panic!("{name}: value {i} of {} is {}: not finite", v.len(), v[i]);
    }
}

/// Largest |a - b|; both sides must be finite.
#[track_caller]
fn max_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    assert_finite("max_err: left side", a);
    assert_finite("max_err: right side", b);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Root mean squared |a - b|; both sides must be finite (an Inf in the
/// baseline would make any `rmse <= k * baseline` bound pass).
#[track_caller]
fn rmse(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    assert_finite("rmse: left side", a);
    assert_finite("rmse: right side", b);
    let s: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    (s / a.len() as f32).sqrt()
}

/// Checks a converted tensor against its source values, by stored type.
fn check_values(name: &str, ty: StoredType, src: &[f32], got: &[f32]) {
    match ty {
        StoredType::Plain(DType::F32) => assert_eq!(src, got, "{name}"),
        StoredType::Plain(DType::F16) => {
            let want: Vec<f32> = src.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            assert_eq!(want, got, "{name}");
        }
        StoredType::Plain(DType::BF16) => {
            let want: Vec<f32> = src.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            assert_eq!(want, got, "{name}");
        }
        StoredType::Quant(q) if q.can_quantize() => {
            // The 32-wide types use the backends' ggml-exact quantizers.
            let want = quant::dequantize(q, &quant::quantize(q, src).unwrap(), src.len()).unwrap();
            assert_eq!(want, got, "{name}");
        }
        StoredType::Quant(q) => check_k_bound(q, src, got),
        other => panic!("{name}: unexpected {other}"),
    }
}

/// K-quant error bound per 256-value super-block: one code step of its
/// widest sub-block plus a min step (6-bit scales cost up to that).
fn check_k_bound(q: QuantType, src: &[f32], got: &[f32]) {
    for (s, g) in src.chunks(256).zip(got.chunks(256)) {
        let bound = match q {
            QuantType::Q6_K => s.iter().fold(0.0f32, |m, x| m.max(x.abs())) / 32.0 * 1.05,
            _ => {
                let nmax = if q == QuantType::Q4_K { 15.0 } else { 31.0 };
                let widest = s
                    .chunks(32)
                    .map(|c| {
                        let hi = c.iter().fold(f32::MIN, |m, &x| m.max(x));
                        let lo = c.iter().fold(0.0f32, |m, &x| m.min(x));
                        hi - lo
                    })
                    .fold(0.0, f32::max);
                let deepest = s.iter().fold(0.0f32, |m, &x| m.max(-x));
                widest / nmax + deepest / 63.0
            }
        };
        let e = max_err(s, g);
        assert!(e <= bound + 1e-6, "{q}: error {e} over the bound {bound}");
    }
}

fn check_round_trip(src_dir: &Path, ty: &str) {
    let (_d, mut f) = convert_to(src_dir, ty, None);
    let st = SafetensorsDir::open(src_dir).unwrap();
    assert_eq!(f.names(), st.names());
    let requested = StoredType::parse(ty).unwrap();
    let recipe = Recipe::default_for(requested);
    assert_eq!(f.recipe(), &recipe);
    for name in st.names() {
        let e = f.tensor(&name).unwrap();
        assert_eq!(e.offset % 64, 0, "{name} is 64-byte aligned");
        let info = st.info(&name).unwrap();
        assert_eq!(e.shape, info.shape);
        let plan = recipe.plan(&name, StoredType::from(info.dtype), &info.shape);
        assert_eq!((e.ty, e.requested), (plan.stored, plan.requested), "{name}");
        if info.shape.len() < 2 {
            assert_eq!(e.ty, StoredType::F32, "{name}: 1-D tensors stay f32");
        }
        let src = st.load(&name).unwrap().to_f32_vec().unwrap();
        let t = f.load(&name).unwrap();
        // Quantized 2-D weights load as their blocks (the converter keeps
        // every other shape in a plain type).
        let want_dtype = e.ty.dtype();
        assert_eq!(t.dtype(), want_dtype);
        assert_eq!(f.info(&name).unwrap().dtype, want_dtype);
        check_values(&name, e.ty, &src, &t.to_f32_vec().unwrap());
        // The stored form: quantized blocks borrowed as they are.
        let raw = f.load_stored(&name).unwrap();
        assert_eq!((raw.dtype(), raw.shape()), (e.ty.dtype(), &e.shape[..]));
        assert!(matches!(**raw.buffer(), Buffer::Bytes { .. }));
    }
    // Dequantized on request: f32 with the same values.
    let blocks: Vec<Vec<f32>> = f
        .names()
        .iter()
        .map(|n| f.load(n).unwrap().to_f32_vec().unwrap())
        .collect();
    f.set_dequantize(true);
    for (name, want) in f.names().iter().zip(&blocks) {
        let t = f.load(name).unwrap();
        let e = f.tensor(name).unwrap();
        if e.ty.dtype().is_quantized() {
            assert_eq!(t.dtype(), DType::F32, "{name}");
            assert_eq!(f.info(name).unwrap().dtype, DType::F32, "{name}");
        }
        assert_eq!(&t.to_f32_vec().unwrap(), want, "{name}");
    }
    // Metadata round trip.
    assert_eq!(f.config(), &read_json(&src_dir.join("config.json")));
    assert_eq!(
        f.generation_config(),
        Some(&read_json(&src_dir.join("generation_config.json")))
    );
    assert_eq!(f.source()["format"], "safetensors");
    assert_eq!(f.source()["files"][0]["name"], "model.safetensors");
    let size = std::fs::metadata(src_dir.join("model.safetensors"))
        .unwrap()
        .len();
    assert_eq!(f.source()["files"][0]["bytes"], size);
    assert_eq!(f.tokenizer_json(), None);
}

const TYPES: [&str; 13] = [
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "q4_k",
    "q5_k",
    "q6_k",
    "w8a8",
    "w4a16_g32",
    "w4a16_g64",
    "w4a16",
];

#[test]
fn qwen3_f32_round_trips_at_every_type() {
    for ty in TYPES {
        check_round_trip(&fixture("qwen3/gqa_tied_f32"), ty);
    }
}

#[test]
fn qwen3_bf16_round_trips_at_every_type() {
    for ty in TYPES {
        check_round_trip(&fixture("qwen3/untied_bf16_ropeparams"), ty);
    }
}

#[test]
fn default_recipes_and_fallbacks() {
    let src = fixture("qwen3/gqa_tied_f32");
    let (_d, f) = convert_to(&src, "q4_0", None);
    let ty = |n: &str| f.tensor(n).unwrap().ty.name();
    assert_eq!(ty("model.embed_tokens.weight"), "q8_0");
    assert_eq!(ty("model.layers.0.mlp.up_proj.weight"), "q4_0");
    assert_eq!(ty("model.norm.weight"), "f32");
    // Rows of 64 are not whole 256-value K blocks: q4_k falls back to q4_1,
    // and the table says what was asked.
    let (_d, f) = convert_to(&src, "q4_k", None);
    let e = f.tensor("model.layers.0.mlp.up_proj.weight").unwrap();
    assert_eq!((e.requested.name(), e.ty.name()), ("q4_k", "q4_1"));
    let e = f.tensor("model.layers.0.self_attn.v_proj.weight").unwrap();
    assert_eq!((e.requested.name(), e.ty.name()), ("q6_k", "q8_0"));
    // bf16 rows of 48 fit no 32-wide block: they stay bf16.
    let (_d, f) = convert_to(&fixture("qwen3/untied_bf16_ropeparams"), "q8_0", None);
    let e = f.tensor("model.layers.0.mlp.up_proj.weight").unwrap();
    assert_eq!((e.requested.name(), e.ty.name()), ("q8_0", "bf16"));
    // Qwen3-VL at a 4-bit type: the vision tower stays at 8 bits (its 5-D
    // patch kernel, rows of 16, at f16), the text decoder goes to 4 bits.
    let (_d, f) = convert_to(&fixture("qwen3_vl/p16_m2_tied_published"), "q4_0", None);
    let ty = |n: &str| f.tensor(n).unwrap().ty.name();
    assert_eq!(ty("model.visual.blocks.0.attn.qkv.weight"), "q8_0");
    assert_eq!(ty("model.visual.merger.linear_fc1.weight"), "q8_0");
    assert_eq!(ty("model.visual.patch_embed.proj.weight"), "f16");
    assert_eq!(
        ty("model.language_model.layers.0.mlp.up_proj.weight"),
        "q4_0"
    );
    // DeepSeek-OCR 2: SAM, the second encoder and the projector too.
    let (_d, f) = convert_to(&fixture("deepseek_ocr2/e2e/model"), "q4_0", None);
    let asked = |n: &str| f.tensor(n).unwrap().requested.name();
    assert_eq!(asked("model.sam_model.blocks.0.attn.qkv.weight"), "q8_0");
    assert_eq!(
        asked("model.qwen2_model.model.model.layers.0.mlp.up_proj.weight"),
        "q8_0"
    );
    assert_eq!(asked("model.projector.layers.weight"), "q8_0");
    assert_eq!(asked("model.layers.0.mlp.up_proj.weight"), "q4_0");
}

#[test]
fn recipe_files_come_before_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.txt");
    std::fs::write(
        &r,
        "# comment\n*.o_proj.weight  F16\nmodel.layers.1.*   q8_0  # trailing\n",
    )
    .unwrap();
    let (_d, f) = convert_to(&fixture("qwen3/gqa_tied_f32"), "q4_0", Some(&r));
    let ty = |n: &str| f.tensor(n).unwrap().ty.name();
    assert_eq!(ty("model.layers.0.self_attn.o_proj.weight"), "f16");
    assert_eq!(ty("model.layers.1.mlp.up_proj.weight"), "q8_0");
    assert_eq!(ty("model.layers.0.mlp.up_proj.weight"), "q4_0");
    assert_eq!(ty("model.layers.1.input_layernorm.weight"), "f32");
    assert_eq!(f.recipe().rules[0].pattern, "*.o_proj.weight");
    assert!(f.recipe().origin.ends_with("r.txt"));

    std::fs::write(&r, "*.weight q3_x\n").unwrap();
    let out = dir.path().join("bad.mllm");
    let e = convert(
        &fixture("qwen3/gqa_tied_f32"),
        &out,
        "q4_0",
        Some(&r),
        |_, _| {},
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("r.txt:1: unknown type `q3_x`"),
        "{e}"
    );
    let e = convert(&fixture("qwen3/gqa_tied_f32"), &out, "q9", None, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("unknown type `q9`"), "{e}");
    assert!(!out.exists() && !dir.path().join("bad.mllm.tmp").exists());
}

#[test]
fn globs() {
    assert!(glob_match("*", "a.b.c"));
    assert!(glob_match(
        "model.layers.*.mlp.*",
        "model.layers.10.mlp.up_proj.weight"
    ));
    assert!(glob_match(
        "*embed_tokens.weight",
        "model.embed_tokens.weight"
    ));
    assert!(glob_match("a?c", "abc"));
    assert!(!glob_match("a?c", "ac"));
    assert!(!glob_match("lm_head.weight", "model.lm_head.weight"));
    assert!(glob_match("*a*a*a*", "xaxaxa"));
    assert!(!glob_match("*a*a*a*b", &"a".repeat(200)));
}

/// A Hugging Face directory with one tensor per shape, random values.
fn synthetic_dir(shapes: &[(&str, Vec<usize>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x2545_f491_u32;
    let mut data = vec![];
    for (_, shape) in shapes {
        let n: usize = shape.iter().product();
        let v: Vec<u8> = (0..n)
            .flat_map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                // Mostly small values, some outliers, like real weights.
                let u = (seed as f32 / u32::MAX as f32) * 2.0 - 1.0;
                let x = if i % 97 == 0 { u * 8.0 } else { u * u * u };
                x.to_le_bytes()
            })
            .collect();
        data.push(v);
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = shapes
        .iter()
        .zip(&data)
        .map(|((n, s), d)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                .unwrap();
            (n.to_string(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "test"}"#).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), "{\"version\": \"1.0\"}").unwrap();
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"chat_template": "{{ messages }}", "eos_token": "</s>"}"#,
    )
    .unwrap();
    dir
}

#[test]
fn k_quants_round_trip_within_their_bounds() {
    let src = synthetic_dir(&[
        ("a.weight", vec![8, 512]),
        ("b.weight", vec![3, 256]),
        ("c.weight", vec![2, 96]),
    ]);
    let st = SafetensorsDir::open(src.path()).unwrap();
    let a = st.load("a.weight").unwrap().to_f32_vec().unwrap();
    let q4_0 = quant::dequantize(
        QuantType::Q4_0,
        &quantize(QuantType::Q4_0, &a).unwrap(),
        a.len(),
    )
    .unwrap();
    for (ty, q, rel) in [
        ("q4_k", QuantType::Q4_K, 0.85),
        ("q5_k", QuantType::Q5_K, 0.5),
        ("q6_k", QuantType::Q6_K, 0.3),
    ] {
        let (_d, f) = convert_to(src.path(), ty, None);
        for name in ["a.weight", "b.weight"] {
            let e = f.tensor(name).unwrap();
            assert_eq!(e.ty, StoredType::Quant(q), "{name}");
            let src = st.load(name).unwrap().to_f32_vec().unwrap();
            check_k_bound(q, &src, &f.load(name).unwrap().to_f32_vec().unwrap());
        }
        // Sensible quality: no worse than (a fraction of) Q4_0's error.
        let got = f.load("a.weight").unwrap().to_f32_vec().unwrap();
        assert!(
            rmse(&a, &got) <= rel * rmse(&a, &q4_0),
            "{ty}: {} vs q4_0 {}",
            rmse(&a, &got),
            rmse(&a, &q4_0)
        );
        // 96-value rows: q4_k -> q4_1, q5_k/q6_k -> q8_0.
        let c = f.tensor("c.weight").unwrap();
        assert_eq!(
            c.ty.name(),
            if q == QuantType::Q4_K { "q4_1" } else { "q8_0" }
        );
        // Everything a directory has comes along.
        assert_eq!(f.tokenizer_json(), Some("{\"version\": \"1.0\"}"));
        assert_eq!(f.chat_template(), Some("{{ messages }}"));
        assert_eq!(f.tokenizer_config().unwrap()["eos_token"], "</s>");
    }
}

#[test]
fn k_quant_corner_blocks() {
    let mut x = vec![0.0f32; 256 * 5];
    x[256..512].fill(1.5); // constant positive
    x[512..768].fill(-2.0); // constant negative
    for (i, v) in x[768..1024].iter_mut().enumerate() {
        *v = if i < 128 {
            1e-3 * i as f32
        } else {
            100.0 - i as f32
        }; // wide sub-block spread
    }
    for (i, v) in x[1024..].iter_mut().enumerate() {
        *v = -(i as f32) / 7.0; // all negative ramp
    }
    for q in [QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K] {
        let got = quant::dequantize(q, &quantize(q, &x).unwrap(), x.len()).unwrap();
        assert_eq!(&got[..256], &[0.0; 256][..], "{q}: zeros stay zero");
        check_k_bound(q, &x, &got);
    }
    let e = quantize(QuantType::Q4_K, &[f32::NAN; 256]).unwrap_err();
    assert!(e.contains("finite"), "{e}");
}

#[test]
fn keep_stores_every_tensor_in_its_source_type() {
    // tiny_llama.gguf mixes F32, F16, Q8_0 and Q4_0 matrices: `keep` copies
    // each as it is, where the default f16 would widen the blocks.
    let src = fixture("gguf/tiny_llama.gguf");
    let (_d, f) = convert_to(&src, "keep", None);
    let g = GgufWeights::open(&src).unwrap();
    let mut types = std::collections::BTreeSet::new();
    for name in g.names() {
        let gi = g.file().tensor_info(g.gguf_name(&name).unwrap()).unwrap();
        let stored = f.tensor(&name).unwrap().ty.name();
        if gi.shape.len() >= 2 {
            assert_eq!(stored, gi.ggml_type.name.to_lowercase(), "{name}");
            types.insert(stored);
        }
        assert_eq!(
            f.load(&name).unwrap().to_f32_vec().unwrap(),
            g.load(&name).unwrap().to_f32_vec().unwrap(),
            "{name}"
        );
    }
    assert_eq!(types.len(), 4, "the fixture's four matrix types: {types:?}");
    assert_eq!(f.recipe().ty, "keep");
    // A recipe file's rules still come first.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.txt");
    std::fs::write(&rules, "*.mlp.* q8_0\n").unwrap();
    let (_d, f) = convert_to(&src, "keep", Some(&rules));
    let mlp = "model.layers.0.mlp.up_proj.weight";
    assert_eq!(f.tensor(mlp).unwrap().ty.name(), "q8_0");
    let e = convert(&src, &dir.path().join("x.mllm"), "kept", None, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("keep"), "{e}");
}

#[test]
fn gguf_source_keeps_blocks_hf_names_and_tokenizer() {
    let src = fixture("gguf/tiny_llama.gguf");
    let (_d, f) = convert_to(&src, "q8_0", None);
    let g = GgufWeights::open(&src).unwrap();
    assert_eq!(f.names(), g.names());
    assert!(f.names().iter().all(|n| !n.starts_with("blk.")));
    assert_eq!(f.config(), &hf_config(g.file()).unwrap());
    assert_eq!(f.source()["format"], "gguf");
    // Q8_0 tensors are copied block for block, Llama Q/K rows un-permuted
    // like GgufWeights does for values: the loaded values are identical.
    for name in [
        "model.embed_tokens.weight",
        "model.layers.1.self_attn.k_proj.weight",
    ] {
        let gi = g.file().tensor_info(g.gguf_name(name).unwrap()).unwrap();
        assert_eq!(gi.ggml_type.name, "Q8_0");
        assert_eq!(f.tensor(name).unwrap().ty.name(), "q8_0");
        assert_eq!(
            f.load(name).unwrap().to_f32_vec().unwrap(),
            g.load(name).unwrap().to_f32_vec().unwrap(),
            "{name}"
        );
    }
    // The tokenizer rebuilt from the GGUF vocabulary is embedded.
    let json = f.tokenizer_json().expect("an embedded tokenizer");
    let tok = Tokenizer::from_json_str(json, "embedded").unwrap();
    let want = Tokenizer::from_gguf_vocab(&GgufVocab::from_gguf(g.file()).unwrap()).unwrap();
    assert_eq!(tok.vocab_size(), want.vocab_size());
    let text = "abc ab";
    assert_eq!(
        tok.encode(text, false).unwrap(),
        want.encode(text, false).unwrap()
    );
    assert!(f.tokenizer_config().is_some());
    // Converting to f16 dequantizes the blocks.
    let (_d, f) = convert_to(&src, "f16", None);
    let name = "model.layers.1.self_attn.q_proj.weight";
    let want: Vec<f32> = g
        .load(name)
        .unwrap()
        .to_f32_vec()
        .unwrap()
        .iter()
        .map(|&x| f16::from_f32(x).to_f32())
        .collect();
    assert_eq!(f.load(name).unwrap().to_f32_vec().unwrap(), want);
    assert!(
        matches!(**f.load(name).unwrap().buffer(), Buffer::Bytes { .. }),
        "f16 loads without a copy"
    );
    let _ = GgufFile::open(&src).unwrap();
}

#[test]
#[should_panic(expected = "not finite")]
fn max_err_rejects_nan() {
    max_err(&[f32::NAN, 0.0], &[1.0, 0.0]);
}

#[test]
#[should_panic(expected = "not finite")]
fn max_err_rejects_inf() {
    max_err(&[1.0, 0.0], &[1.0, f32::INFINITY]);
}

#[test]
#[should_panic(expected = "not finite")]
fn rmse_rejects_nan_and_inf() {
    assert_eq!(rmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
    rmse(&[1.0, f32::NEG_INFINITY], &[1.0, 2.0]);
}
