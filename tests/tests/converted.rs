//! Checkpoints converted to .mllm at every type keep logits close to the f32
//! reference (per-position cosine similarity), and a converted file runs
//! with no other file beside it.

mod common;

use common::golden::worst_cosine;
use common::*;
use mllm_backends::weights::WeightSource;
use mllm_runtime::model_files::{self, load_model};

fn logits_of(path: &str, ids: &[i32], dequantize: bool) -> (Vec<f32>, usize) {
    let opts = model_files::LoadOptions {
        dequantize,
        ..Default::default()
    };
    let files =
        model_files::open_with(path, opts).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let t = full_logits(&model, ids);
    (t.to_f32_vec().expect("f32"), t.shape()[1])
}

/// The issue-4 targets, per position, on `quant_scaled_f32`: a fixture whose
/// matrices are all whole 256-blocks and whose weights are scaled like a
/// trained network's. Run with the default quantized kernels (int8
/// activations per matmul) and, for comparison, on dequantized f32 weights.
#[test]
fn every_type_meets_its_cosine_target() {
    let targets = [
        ("f16", 0.9999),
        ("bf16", 0.9999),
        ("q8_0", 0.999),
        ("q6_k", 0.999),
        ("q5_k", 0.99),
        ("q4_k", 0.99),
        ("q4_1", 0.99),
        ("q4_0", 0.99),
        ("w8a8", 0.999),
        ("w4a16_g32", 0.99),
        ("w4a16_g64", 0.99),
        ("w4a16_g128", 0.99),
    ];
    let case = "quant_scaled_f32";
    let r = reference(case);
    let dir = tempfile::tempdir().expect("tmp");
    for (ty, target) in targets {
        let out = dir.path().join(format!("{case}-{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{case} {ty}: {e}"));
        let file = mllm_converter::mllm_format::MllmFile::open(&out).expect("open");
        for name in file.names() {
            let e = file.tensor(&name).expect("entry");
            assert_eq!(e.ty, e.requested, "{ty}: {name} fell back");
        }
        let path = out.to_str().expect("utf-8");
        let (got, vocab) = logits_of(path, &r.input_ids, false);
        let cos = worst_cosine(&got, &r.logits, vocab);
        let (deq, _) = logits_of(path, &r.input_ids, true);
        let cos_deq = worst_cosine(&deq, &r.logits, vocab);
        eprintln!("{case} {ty}: worst per-position cosine vs f32 = {cos:.6} (dequantized weights, f32 activations: {cos_deq:.6})");
        assert!(cos >= target, "{case} {ty}: cosine {cos} < {target}");
        assert!(
            cos_deq >= target,
            "{case} {ty}: dequantized cosine {cos_deq} < {target}"
        );
    }
}

/// The loud N(0, 0.25) fixtures amplify weight rounding layer by layer; here
/// the bounds sit just under what is measured, as a regression guard for the
/// fallbacks (rows that are not whole blocks fall back to a smaller block, so
/// the 48-wide bf16 case stays lossless at every type).
#[test]
fn every_type_stays_close_on_the_loud_fixtures() {
    let bounds = [
        ("f16", 0.9999),
        ("bf16", 0.9998),
        ("q8_0", 0.997),
        ("q4_0", 0.8),
        ("q4_1", 0.7),
        ("q4_k", 0.7),
        ("q6_k", 0.997),
    ];
    let dir = tempfile::tempdir().expect("tmp");
    for case in ["gqa_tied_f32", "untied_bf16_ropeparams"] {
        let r = reference(case);
        for (ty, bound) in bounds {
            let out = dir.path().join(format!("{case}-{ty}.mllm"));
            mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
                .unwrap_or_else(|e| panic!("{case} {ty}: {e}"));
            let (got, vocab) = logits_of(out.to_str().expect("utf-8"), &r.input_ids, false);
            let cos = worst_cosine(&got, &r.logits, vocab);
            eprintln!("{case} {ty}: worst per-position cosine vs f32 reference = {cos:.6}");
            assert!(cos >= bound, "{case} {ty}: cosine {cos} < {bound}");
        }
    }
}

#[test]
fn converted_smollm2_keeps_greedy_tokens() {
    let gguf = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.is_file(), "run `bash tests/fetch_assets.sh` first");
    let g: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/smollm2/greedy.json"))
            .expect("fixture"),
    )
    .expect("json");
    let prompt: Vec<u32> = g["prompt_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let want: Vec<u32> = g["generated_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let greedy = |files: &model_files::ModelFiles, n: usize| -> Vec<u32> {
        let model = load_model(files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut engine = mllm_runtime::engine::Engine::new(model, files.max_context());
        let mut logits = engine
            .feed(&prompt)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut got = vec![];
        while got.len() < n {
            let t = mllm_runtime::generation::argmax(&logits) as u32;
            got.push(t);
            logits = engine
                .step(t)
                .unwrap_or_else(|e| panic!("{}", e.render(false)));
        }
        got
    };
    let open = |p: &std::path::Path, dequantize: bool| {
        let opts = model_files::LoadOptions {
            dequantize,
            ..Default::default()
        };
        model_files::open_with(p.to_str().expect("utf-8"), opts)
            .unwrap_or_else(|e| panic!("{}", e.render(false)))
    };
    const N: usize = 16;
    // Before conversion, in both numerics: the quantized kernels (int8
    // activations, llama.cpp-like) and f32 matmuls on the dequantized weights.
    let before_q = greedy(&open(&gguf, false), N);
    let before_f = greedy(&open(&gguf, true), N);
    assert_eq!(
        before_f[..],
        want[..N],
        "the dequantized GGUF follows transformers"
    );
    let dir = tempfile::tempdir().expect("tmp");
    // Q4_1 blocks are copied as they are; the others re-quantize or widen
    // them. Every type that keeps >= 8 bits must give the same tokens in the
    // f32 numerics. The quantized kernels are compared only where the blocks
    // are identical: on this prompt their first token already differs from
    // transformers' (a top-2 margin of 0.08, which llama.cpp flips too), and
    // the path after it has margins the reference does not vouch for.
    for ty in ["q4_1", "q8_0", "f16", "bf16", "f32"] {
        let out = dir.path().join(format!("smol-{ty}.mllm"));
        mllm_converter::mllm_format::convert(&gguf, &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let files = open(&out, true);
        assert!(
            files.tokenizer.is_some() && files.chat_template.is_some(),
            "the .mllm carries tokenizer and template"
        );
        let text = |ids: &[u32]| {
            let tok = files.tokenizer.as_ref().expect("tok");
            tok.decode(ids, true).expect("decode")
        };
        let got = greedy(&files, N);
        assert_eq!(
            got,
            before_f,
            "{ty}: conversion changed the greedy answer: {:?}, before: {:?}",
            text(&got),
            text(&before_f)
        );
        if ty == "q4_1" {
            let got = greedy(&open(&out, false), N);
            assert_eq!(
                got, before_q,
                "{ty}: the same blocks must give the same tokens"
            );
        }
        eprintln!("SmolLM2 -> {ty}: {N} greedy tokens as before conversion");
    }
}
