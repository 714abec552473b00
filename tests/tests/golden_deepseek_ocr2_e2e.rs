//! DeepSeek-OCR 2 end to end on a whole tiny model (fixture
//! tests/fixtures/deepseek_ocr2/e2e, made by
//! make_deepseek_ocr2_e2e_fixtures.py with transformers 5.24): image files
//! preprocessed in Rust into global views and local tiles, `<image>`
//! expanded to its tokens, SAM + the second encoder + projector + view
//! separator scattered into the prompt, the MoE decoder; prompt ids, the
//! image rows, prefill logits and greedy ids against transformers'. Also
//! through a converted `.mllm`; the command line is cli/tests/ocr.rs.

mod common;

use std::path::PathBuf;

use common::*;
use mllm_runtime::engine::Engine;
use mllm_runtime::images;
use mllm_runtime::model_files::{self, load_model, ModelFiles};

fn dir() -> PathBuf {
    root().join("tests/fixtures/deepseek_ocr2/e2e")
}

fn info() -> serde_json::Value {
    let text = std::fs::read_to_string(dir().join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("json")
}

fn image_path(case: &str) -> String {
    let rel = info()["cases"][case]["image"]
        .as_str()
        .expect("image")
        .to_string();
    dir().join(rel).display().to_string()
}

/// Prompt ids, prefill logits (<= 1e-4) and greedy ids of each case.
fn check(files: &ModelFiles, cases: &[&str]) {
    let r = RefFile::open(&dir().join("reference.safetensors"));
    let prompt = "Free OCR .";
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = load_model(files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut engine = Engine::new(model, files.max_context());
    for &case in cases {
        let (imgs, spec) = images::from_files(files, &[image_path(case)])
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let want_tiles = info()["cases"][case]["num_local_patches"][0]
            .as_u64()
            .expect("tiles") as usize;
        assert_eq!(
            imgs.tiled.as_ref().expect("tiled views").num_local,
            vec![want_tiles],
            "{case}: local tiles"
        );
        let text = images::prompt_text(files, None, prompt, &imgs, &spec, false, None)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let ids = tok.encode(&text, false).expect("encode");
        assert_eq!(
            ids,
            r.u32s(&format!("{case}.input_ids")),
            "{case}: prompt ids"
        );

        engine.reset();
        let logits = engine
            .feed_images(&ids, &imgs, &spec)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let want = r.f32s(&format!("{case}.logits"));
        let vocab = logits.len();
        let last = &want[want.len() - vocab..];
        let err = max_abs(&logits, last);
        eprintln!("{case}: last-row logits max-abs = {err:.3e}");
        assert!(err <= 1e-4, "{case}: logits differ by {err}");

        let want_ids = r.u32s(&format!("{case}.greedy"));
        let got = engine_greedy(&mut engine, logits, want_ids.len());
        assert_eq!(got, want_ids, "{case}: greedy ids");
    }
}

#[test]
fn images_through_the_whole_model_match_transformers() {
    let files = model_files::open(dir().join("model").to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    check(&files, &["tiles", "global"]);
}

/// Every position's logits of the prompt with tiles (1e-4): the image rows
/// go to the right places, not only the last row comes out right.
#[test]
fn every_prompt_row_matches_transformers() {
    let files = model_files::open(dir().join("model").to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let r = RefFile::open(&dir().join("reference.safetensors"));
    let (imgs, spec) = images::from_files(&files, &[image_path("tiles")])
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let ids: Vec<i32> = r
        .u32s("tiles.input_ids")
        .iter()
        .map(|&t| t as i32)
        .collect();
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut exec = mllm_interpreter::Eager::new(mllm_backends::CpuBackend);
    let (logits, delta) =
        images::run_forward_images(&model, &mut exec, &new_cache(), &ids, &imgs, &spec, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert_eq!(delta, 0, "1-D positions");
    let err = max_abs(&data(&logits), &r.f32s("tiles.logits"));
    eprintln!("tiles: all {} rows max-abs = {err:.3e}", ids.len());
    assert!(err <= 1e-4, "logits differ by {err}");
}

/// A `.mllm` converted at f32 carries the processor settings (nested in
/// processor_config.json here) and answers the same.
#[test]
fn a_converted_file_alone_reads_pages() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("ocr.mllm");
    mllm_converter::mllm_format::convert(&dir().join("model"), &out, "f32", None, |_, _| {})
        .unwrap_or_else(|e| panic!("{e}"));
    let files = model_files::open(out.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let pre = files
        .preprocessor_config
        .as_ref()
        .expect("processor settings");
    assert_eq!(pre["tile_size"], 96, "tile size from processor_config.json");
    assert_eq!(
        pre["patch_size"], 2,
        "the processor's patch size came along"
    );
    check(&files, &["tiles"]);
}
