//! Helpers the CLI test binaries share: run the built `mllm` from the
//! repository root, read its output, find the fetched SmolLM2 GGUF.

#![allow(dead_code)]

pub mod http;

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn mllm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .expect("run mllm")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Largest `|a - b|`, after checking that both sides are finite: a plain
/// `f32::max` fold skips NaN, so all-NaN logits would pass any bound.
/// (The same rule as tests/tests/common's `max_abs`, which a CLI test
/// cannot import.)
#[track_caller]
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    for (side, v) in [("left", a), ("right", b)] {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            panic!(
                "max_abs: {side} side value {i} of {} is {}: not finite",
                v.len(),
                v[i]
            );
        }
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn smollm2() -> String {
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        p.display()
    );
    p.display().to_string()
}

/// The venv `tests/fetch_assets.sh` makes for the serve tests' Python
/// clients (`openai`, `jsonschema`).
pub fn serve_python() -> PathBuf {
    let python = root().join(".cache/serve-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` to install the Python clients",
        python.display()
    );
    python
}
