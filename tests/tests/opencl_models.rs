//! Whole models on the OpenCL backend (PoCL in CI) through the same
//! scripts: every golden Qwen3 and Llama fixture (f32 and bf16
//! checkpoints), Qwen3-VL with images, and the real SmolLM2 Q4_1 GGUF.
//! Logits agree with the CPU path within 1e-3 of their scale and greedy ids
//! are equal (and equal transformers' where the fixture has them); compiled
//! graphs run on OpenCL too. Needs an OpenCL device: `MLLM_SKIP_OPENCL=1`
//! skips these knowingly (and says so), nothing else does.

mod common;

use common::*;
use mllm_runtime::images::read_images;
use mllm_runtime::model_files::{self, Backend, LoadOptions};
use mllm_runtime::Loaded;

fn skip() -> bool {
    let s = std::env::var_os("MLLM_SKIP_OPENCL").is_some();
    if s {
        eprintln!("MLLM_SKIP_OPENCL is set: whole models on OpenCL were NOT tested");
    }
    s
}

fn opencl() -> LoadOptions {
    LoadOptions {
        backend: Backend::OpenCl,
        ..Default::default()
    }
}

fn load_on(script: &str, path: &str, opts: LoadOptions) -> Loaded {
    mllm_runtime::load_with(script, path, opts)
        .unwrap_or_else(|e| panic!("loading {path}: {}", e.render(false)))
}

/// `max|a - b| <= tol * max|b|`.
fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    let err = max_abs(a, b);
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    eprintln!(
        "{what}: max-abs {err:.3e} of scale {scale:.3} ({:.2e} relative)",
        err / scale
    );
    assert!(
        err <= tol * scale,
        "{what}: max-abs {err} exceeds {tol} x {scale}"
    );
}

fn all_logits(m: &mut Loaded, ids: &[i32]) -> Vec<f32> {
    data(
        &m.step(&new_cache(), ids, 0, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false))),
    )
}

/// Prefill logits and greedy ids on OpenCL against the CPU (and against
/// the fixture's transformers greedy ids).
fn text_case(script: &str, case: &str) {
    let path = fixture(case).display().to_string();
    let r = reference(case);
    let mut cpu = load_on(script, &path, LoadOptions::default());
    let mut cl = load_on(script, &path, opencl());
    assert_close(
        &all_logits(&mut cl, &r.input_ids),
        &all_logits(&mut cpu, &r.input_ids),
        1e-3,
        &format!("{case} prefill, opencl vs cpu"),
    );
    let got = greedy(&mut cl, &r.input_ids, r.greedy.len());
    assert_eq!(
        got, r.greedy,
        "{case}: greedy ids on opencl differ from transformers'"
    );
    // Compiled graphs (prefill chunks, 1-token decode) on OpenCL.
    let mut compiled = load_on(
        script,
        &path,
        LoadOptions {
            compiled: true,
            ..opencl()
        },
    );
    let got = greedy(&mut compiled, &r.input_ids, r.greedy.len());
    assert_eq!(
        got, r.greedy,
        "{case}: compiled greedy ids on opencl differ"
    );
}

#[test]
fn qwen3_fixtures_match_the_cpu_on_opencl() {
    if skip() {
        return;
    }
    for case in QWEN3_CASES {
        text_case(&qwen3_script(), case);
    }
}

#[test]
fn llama_fixtures_match_the_cpu_on_opencl() {
    if skip() {
        return;
    }
    for case in LLAMA_CASES {
        text_case(&script("llama"), &format!("llama/{case}"));
    }
}

/// The families added as scripts: sliding windows (host fallback for
/// now), experts (host fallback), NoPE layers.
#[test]
fn new_families_match_the_cpu_on_opencl() {
    if skip() {
        return;
    }
    for (name, case) in [
        ("gemma3", "gemma3/gemma3_f32"),
        ("qwen3_moe", "qwen3_moe/moe_f32"),
        ("smollm3", "smollm3/smollm3_bf16"),
    ] {
        text_case(&script(name), case);
    }
}

#[test]
fn qwen3_vl_with_images_matches_the_cpu_on_opencl() {
    if skip() {
        return;
    }
    let config = "p16_m2_tied_published";
    let dir = fixture(&format!("qwen3_vl/{config}"));
    let refs = dir.join("reference_two_images.safetensors");
    let ids = ref_i32s(&refs, "input_ids");
    let want = ref_i32s(&refs, "greedy_ids");
    let images =
        read_images(&refs.display().to_string()).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let path = dir.display().to_string();
    let mut cpu = load_on(&script("qwen3_vl"), &path, LoadOptions::default());
    let mut cl = load_on(&script("qwen3_vl"), &path, opencl());
    let run = |m: &mut Loaded| {
        m.prefill_images(&new_cache(), &ids, &images, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)))
            .0
    };
    assert_close(
        &data(&run(&mut cl)),
        &data(&run(&mut cpu)),
        1e-3,
        "qwen3-vl prefill with two images",
    );
    // Greedy decoding after the images, through the device KV cache.
    let cache = new_cache();
    let (mut logits, delta) = cl
        .prefill_images(&cache, &ids, &images, true)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut got = vec![];
    for i in ids.len().. {
        got.push(cl.argmax_last(&logits).expect("argmax"));
        if got.len() == want.len() {
            break;
        }
        let pos = (i as i64 + delta) as usize;
        logits = cl
            .step(&cache, &[got[got.len() - 1]], pos, true)
            .expect("decode");
    }
    assert_eq!(
        got, want,
        "qwen3-vl greedy ids on opencl differ from transformers'"
    );
}

#[test]
fn real_smollm2_q4_1_gguf_matches_the_cpu_on_opencl() {
    if skip() {
        return;
    }
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        p.display()
    );
    let path = p.display().to_string();
    let g: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/smollm2/greedy.json"))
            .expect("fixture"),
    )
    .expect("json");
    let ids: Vec<i32> = g["prompt_ids"]
        .as_array()
        .expect("prompt_ids")
        .iter()
        .map(|v| v.as_i64().expect("id") as i32)
        .collect();
    // The device reads the Q4_1 blocks with f32 activations: the CPU's
    // exact counterpart is --dequantize (no int8 activation rounding).
    let files = model_files::open_with(
        &path,
        LoadOptions {
            dequantize: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model =
        model_files::load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut cpu = Loaded {
        runner: mllm_runtime::Runner::new(model),
        eos: vec![],
        config: files.config,
    };
    let files =
        model_files::open_with(&path, opencl()).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model =
        model_files::load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut cl = Loaded {
        runner: mllm_runtime::Runner::new(model),
        eos: vec![],
        config: files.config,
    };
    assert_close(
        &all_logits(&mut cl, &ids),
        &all_logits(&mut cpu, &ids),
        1e-3,
        "smollm2 q4_1 prefill",
    );
    assert_eq!(
        greedy(&mut cl, &ids, 16),
        greedy(&mut cpu, &ids, 16),
        "smollm2 greedy ids, opencl vs cpu --dequantize"
    );
}
