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

pub fn smollm2() -> String {
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        p.display()
    );
    p.display().to_string()
}
