//! What the capi test binaries share: the repository root and the real
//! SmolLM2 GGUF that tests/fetch_assets.sh fetches.

#![allow(dead_code)]

use std::path::PathBuf;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// The README's question, and what `mllm run --temp 0` answers on SmolLM2.
pub const QUESTION: &str = "What is the capital of France? Answer in one sentence.";
pub const ANSWER: &str = "The capital of France is Paris.";
