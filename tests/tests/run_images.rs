//! `mllm run --image` end to end on the tiny Qwen3-VL (fixture
//! tests/fixtures/qwen3_vl/p16_m2_tied_published with the byte-level
//! tokenizer, chat template and processor config made by
//! make_run_fixture.py) against transformers' Qwen3VLProcessor + greedy
//! generate(): the image files are preprocessed in Rust, the chat template
//! gets image parts, placeholders expand per merged patch, and the greedy
//! ids after the images must be transformers' (run_reference.json).

mod common;

use common::*;
use mllm_runtime::engine::Engine;
use mllm_runtime::images;
use mllm_runtime::model_files::{self, load_model};

fn reference() -> serde_json::Value {
    let p = root().join("tests/fixtures/qwen3_vl/run_reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("run_reference.json")).expect("json")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn model_dir() -> std::path::PathBuf {
    root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published")
}

#[test]
fn prompts_with_images_match_transformers() {
    let files = model_files::open(model_dir().to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    check(&files, &["one_image", "two_images"]);
}

/// A .mllm file alone carries the tokenizer, chat template and image
/// processor settings: converted at f32 (lossless) it answers the same.
#[test]
fn a_converted_file_alone_takes_images() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("vl.mllm");
    mllm_converter::mllm_format::convert(&model_dir(), &out, "f32", None, |_, _| {})
        .unwrap_or_else(|e| panic!("{e}"));
    let files = model_files::open(out.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(files.preprocessor_config.is_some());
    check(&files, &["two_images"]);
}

fn check(files: &model_files::ModelFiles, cases: &[&str]) {
    let r = reference();
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    for &case in cases {
        let c = &r["cases"][case];
        let paths: Vec<String> = c["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|p| {
                root()
                    .join("tests/fixtures/qwen3_vl")
                    .join(p.as_str().expect("path"))
                    .display()
                    .to_string()
            })
            .collect();
        let (imgs, spec) =
            images::from_files(files, &paths).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let grids: Vec<Vec<i64>> = imgs.grid_thw.iter().map(|g| g.to_vec()).collect();
        let want_grids: Vec<Vec<i64>> =
            serde_json::from_value(c["image_grid_thw"].clone()).expect("grids");
        assert_eq!(grids, want_grids, "{case}: image_grid_thw");
        let prompt = c["prompt"].as_str().expect("prompt");
        let text = images::prompt_text(files, None, prompt, &imgs, &spec, false, None)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let got = tok.encode(&text, false).expect("encode");
        assert_eq!(got, ids(&c["input_ids"]), "{case}: prompt ids");

        let model = load_model(files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut engine = Engine::new(model, files.max_context());
        let mut logits = engine
            .feed_images(&got, &imgs, &spec)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let want = ids(&c["generated_ids"]);
        let mut gen = vec![];
        while gen.len() < want.len() {
            let t = mllm_runtime::generation::argmax(&logits) as u32;
            gen.push(t);
            logits = engine
                .step(t)
                .unwrap_or_else(|e| panic!("{}", e.render(false)));
        }
        assert_eq!(gen, want, "{case}: greedy ids after the images");
        eprintln!(
            "{case}: {} prompt ids and {} greedy ids equal transformers'",
            got.len(),
            gen.len()
        );
    }
}
