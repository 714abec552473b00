//! Checkpoints converted to .mllm at every type keep logits close to the f32
//! reference (per-position cosine similarity), and a converted file runs
//! with no other file beside it.

mod common;

use common::*;
use mllm_cli::model_files::{self, load_model};

fn logits_of(path: &str, ids: &[i32]) -> (Vec<f32>, usize) {
    let files = model_files::open(path).unwrap_or_else(|e| panic!("{}", e.0));
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.0));
    let t = full_logits(&model, ids);
    (t.to_f32_vec().expect("f32"), t.shape()[1])
}

fn worst_cosine(a: &[f32], b: &[f32], vocab: usize) -> f64 {
    a.chunks(vocab)
        .zip(b.chunks(vocab))
        .map(|(x, y)| {
            let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
            let nx: f64 = x.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
            let ny: f64 = y.iter().map(|q| (*q as f64).powi(2)).sum::<f64>().sqrt();
            dot / (nx * ny)
        })
        .fold(1.0, f64::min)
}

#[test]
fn every_type_keeps_logits_close_to_f32() {
    // (type, required worst per-position cosine similarity). These tiny
    // random models (weights N(0, 0.25)) amplify weight error far more than
    // trained ones; the bounds sit just under what is measured here, as a
    // regression guard (the issue-4 targets are 0.9999 / 0.999 / 0.99).
    // Rows that are not whole blocks fall back (recorded in the file), so
    // the bf16 case with 48-wide rows stays lossless at every type.
    let bounds = [
        ("f16", 0.9999),
        ("bf16", 0.9998),
        ("q8_0", 0.998),
        ("q4_0", 0.85),
        ("q4_1", 0.72),
        ("q4_k", 0.72),
        ("q6_k", 0.998),
    ];
    let dir = tempfile::tempdir().expect("tmp");
    for case in ["gqa_tied_f32", "untied_bf16_ropeparams"] {
        let r = reference(case);
        for (ty, bound) in bounds {
            let out = dir.path().join(format!("{case}-{ty}.mllm"));
            mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
                .unwrap_or_else(|e| panic!("{case} {ty}: {e}"));
            let (got, vocab) = logits_of(out.to_str().expect("utf-8"), &r.input_ids);
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
    let dir = tempfile::tempdir().expect("tmp");
    // Q4_1 blocks are copied as they are; q8_0 re-quantizes from them.
    for ty in ["q4_1", "q8_0"] {
        let out = dir.path().join(format!("smol-{ty}.mllm"));
        mllm_converter::mllm_format::convert(&gguf, &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let files =
            model_files::open(out.to_str().expect("utf-8")).unwrap_or_else(|e| panic!("{}", e.0));
        assert!(
            files.tokenizer.is_some() && files.chat_template.is_some(),
            "the .mllm carries tokenizer and template"
        );
        let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.0));
        let mut engine = mllm_cli::engine::Engine::new(model, files.max_context());
        let mut logits = engine.feed(&prompt).unwrap_or_else(|e| panic!("{}", e.0));
        let mut got = vec![];
        while got.len() < 8 {
            let t = mllm_interpreter::sampler::argmax(&logits) as u32;
            got.push(t);
            logits = engine.step(t).unwrap_or_else(|e| panic!("{}", e.0));
        }
        if ty == "q4_1" {
            assert_eq!(
                got,
                want[..8],
                "{ty}: the same blocks must give the same tokens"
            );
        } else {
            // Re-quantizing Q4_1 weights to Q8_0 is not lossless; the answer must still hold.
            let text = files
                .tokenizer
                .as_ref()
                .expect("tok")
                .decode(&got, true)
                .expect("decode");
            assert!(text.contains("Paris"), "{ty}: {text}");
        }
    }
}
