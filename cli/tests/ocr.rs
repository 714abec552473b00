//! `mllm run --model DIR --image PAGE --prompt ...` on the tiny DeepSeek-OCR 2
//! (tests/fixtures/deepseek_ocr2/e2e, make_deepseek_ocr2_e2e_fixtures.py),
//! and `--model TEXT.gguf --mmproj MMPROJ.gguf` on the pair llama.cpp's
//! converter wrote of tests/fixtures/deepseek_ocr2/gguf_shaped: the printed
//! text is transformers' greedy continuation.

mod common;

use std::path::{Path, PathBuf};

use common::{mllm, root, text};

/// What `mllm run MODEL_ARGS --image IMAGE --prompt "Free OCR ." --temp 0
/// -n N` prints.
fn run_page(model: &[&str], image: &Path, n: usize) -> String {
    let n = n.to_string();
    let mut args = vec!["run"];
    args.extend_from_slice(model);
    let image = image.to_str().expect("utf-8");
    args.extend([
        "--image",
        image,
        "--prompt",
        "Free OCR .",
        "--temp",
        "0",
        "-n",
        &n,
    ]);
    args.extend(["--threads", "2"]);
    let out = mllm(&args);
    assert!(
        out.status.success(),
        "mllm run failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_string()
}

/// The fixture's greedy case: (image, greedy text, tokens).
fn case(dir: &Path, name: &str) -> (PathBuf, String, usize) {
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
    )
    .expect("json");
    let case = &info["cases"][name];
    (
        dir.join(case["image"].as_str().expect("image")),
        case["greedy_text"].as_str().expect("text").to_string(),
        case["greedy"].as_array().expect("ids").len(),
    )
}

#[test]
fn run_reads_a_page() {
    let dir = root().join("tests/fixtures/deepseek_ocr2/e2e");
    let (image, want, n) = case(&dir, "tiles");
    let model = dir.join("model");
    let got = run_page(&["--model", model.to_str().expect("utf-8")], &image, n);
    let got: Vec<&str> = got.split_whitespace().collect();
    let want: Vec<&str> = want.split_whitespace().collect();
    assert_eq!(got, want, "generated text");
}

#[test]
fn run_reads_a_page_from_a_gguf_pair() {
    let dir = root().join("tests/fixtures/deepseek_ocr2/gguf_shaped");
    let (image, want, n) = case(&dir, "global");
    let pair = root().join("tests/fixtures/gguf/mmproj/deepseek_ocr2_gguf_shaped");
    let (gguf, mmproj) = (
        format!("{}.gguf", pair.display()),
        format!("{}.mmproj.gguf", pair.display()),
    );
    let got = run_page(&["--model", &gguf, "--mmproj", &mmproj], &image, n);
    assert_eq!(got, want, "the pair");
    // The pair converted into one .mllm answers the same.
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("ocr.mllm");
    let out = out.to_str().expect("utf-8");
    let conv = mllm(&["convert", &gguf, out, "--mmproj", &mmproj, "-q", "f32"]);
    assert!(conv.status.success(), "{}", text(&conv.stderr));
    assert_eq!(
        run_page(&["--model", out], &image, n),
        want,
        "the converted pair"
    );
}
