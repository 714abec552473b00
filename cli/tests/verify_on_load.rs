//! A `.mllm` file whose tensor data was overwritten is refused when a
//! command loads it, naming the damaged tensor and what to do; with
//! `--no-verify` it loads (and runs on the damaged values).

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use common::*;
use mllm_runtime::mllm_format::MllmFile;

const DAMAGED: &str = "model.layers.1.mlp.down_proj.weight";

/// Converts the tiny Qwen3 fixture to `out` (q8_0).
fn convert(out: &Path) {
    let src = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let r = mllm(&[
        "convert",
        &src.display().to_string(),
        &out.display().to_string(),
        "-q",
        "q8_0",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
}

/// Overwrites 64 bytes in the middle of tensor `name` with other bytes.
fn damage(path: &Path, name: &str) {
    let (offset, len) = {
        let f = MllmFile::open(path).expect("open");
        let t = f.tensor(name).expect("tensor");
        (t.offset, t.byte_len)
    };
    assert!(len > 128, "{name} has {len} bytes");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open for writing");
    let at = (offset + len / 2) as u64;
    file.seek(SeekFrom::Start(at)).expect("seek");
    let noise: Vec<u8> = (0..64u32).map(|i| (i * 97 + 13) as u8).collect();
    file.write_all(&noise).expect("write");
}

fn exec(model: &Path, extra: &[&str]) -> std::process::Output {
    let model = model.display().to_string();
    let mut args = vec!["exec", "qwen3", "--model", &model, "--input-ids", "1,2,3"];
    args.extend_from_slice(extra);
    mllm(&args)
}

#[test]
fn a_damaged_file_is_refused_with_the_tensor_named_and_loads_with_no_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tiny.mllm");
    convert(&path);
    let r = exec(&path, &["--max-new-tokens", "2"]);
    assert!(r.status.success(), "{}", text(&r.stderr));

    damage(&path, DAMAGED);
    // The header and table are intact: only the checksum can tell.
    assert!(MllmFile::open(&path).is_ok());
    let r = exec(&path, &["--max-new-tokens", "2"]);
    let err = text(&r.stderr);
    assert!(!r.status.success(), "a damaged file ran:\n{err}");
    assert!(
        err.contains("tiny.mllm is damaged")
            && err.contains(&format!("tensor `{DAMAGED}` has checksum"))
            && err.contains("1 damaged tensor"),
        "{err}"
    );
    assert!(
        err.contains("convert it again") && err.contains("--no-verify"),
        "{err}"
    );
    assert!(r.stdout.is_empty(), "nothing was computed");

    let r = exec(&path, &["--max-new-tokens", "2", "--no-verify"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_ne!(text(&r.stdout), "", "greedy ids printed");
    // bench loads through the same flags.
    let model = path.display().to_string();
    let bench = ["bench", "--model", &model, "-p", "4", "-n", "2", "-r", "1"];
    let r = mllm(&bench);
    assert!(!r.status.success() && text(&r.stderr).contains("is damaged"));
    let mut with = bench.to_vec();
    with.push("--no-verify");
    let r = mllm(&with);
    assert!(r.status.success(), "{}", text(&r.stderr));
}

#[test]
fn commands_that_read_no_weights_do_not_checksum_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vl.mllm");
    let src = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let model = path.display().to_string();
    let r = mllm(&["convert", &src.display().to_string(), &model, "-q", "f32"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    damage(&path, "model.language_model.layers.0.mlp.down_proj.weight");
    let r = mllm(&["tokenize", "--model", &model, "--text", "hello"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let r = mllm(&["run", "--model", &model, "--prompt", "hello", "-n", "1"]);
    assert!(
        !r.status.success() && text(&r.stderr).contains("is damaged"),
        "{}",
        text(&r.stderr)
    );
}
