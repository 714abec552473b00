//! `mllm run --model DIR --image PAGE --prompt ...` on the tiny DeepSeek-OCR 2
//! (tests/fixtures/deepseek_ocr2/e2e, make_deepseek_ocr2_e2e_fixtures.py):
//! the printed text is transformers' greedy continuation.

mod common;

use common::{mllm, root, text};

#[test]
fn run_reads_a_page() {
    let dir = root().join("tests/fixtures/deepseek_ocr2/e2e");
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
    )
    .expect("json");
    let case = &info["cases"]["tiles"];
    let want = case["greedy_text"].as_str().expect("text");
    let n = case["greedy"].as_array().expect("ids").len().to_string();
    let image = dir.join(case["image"].as_str().expect("image"));
    let model = dir.join("model");
    let out = mllm(&[
        "run",
        "--model",
        model.to_str().expect("utf-8"),
        "--image",
        image.to_str().expect("utf-8"),
        "--prompt",
        "Free OCR .",
        "--temp",
        "0",
        "-n",
        &n,
        "--threads",
        "2",
    ]);
    assert!(
        out.status.success(),
        "mllm run failed: {}",
        text(&out.stderr)
    );
    let got: Vec<String> = text(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let want: Vec<&str> = want.split_whitespace().collect();
    assert_eq!(got, want, "generated text");
}
