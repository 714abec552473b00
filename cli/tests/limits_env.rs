//! Every limit on hostile input can be changed through the environment,
//! end to end: a tiny limit stops ordinary work with a message naming the
//! variable, and a value that is not a number is refused clearly.

mod common;

use std::process::{Command, Output};

use common::*;

fn mllm_env(vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mllm"));
    c.args(args).current_dir(root()).env("NO_COLOR", "1");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().expect("run mllm")
}

/// stderr with miette's line wrapping undone.
fn flat(o: &Output) -> String {
    text(&o.stderr)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn exec_qwen3(vars: &[(&str, &str)]) -> Output {
    mllm_env(
        vars,
        &[
            "exec",
            "qwen3",
            "--model",
            "tests/fixtures/qwen3/gqa_tied_f32",
            "--input-ids",
            "1,2,3",
        ],
    )
}

const VL: &str = "tests/fixtures/qwen3_vl/p16_m2_tied_published";

#[test]
fn script_steps_and_memory() {
    assert!(exec_qwen3(&[]).status.success());
    let o = exec_qwen3(&[("MLLM_MAX_SCRIPT_STEPS", "100")]);
    let err = flat(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("mdl::run::step_limit") && err.contains("more than 100 steps"),
        "{err}"
    );
    assert!(err.contains(".mdl:"), "the script line: {err}");
    let o = exec_qwen3(&[("MLLM_MAX_SCRIPT_MEMORY", "4K")]);
    let err = flat(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("mdl::run::memory_limit") && err.contains("over the limit of 0.0 MiB"),
        "{err}"
    );
    let o = exec_qwen3(&[("MLLM_MAX_SCRIPT_STEPS", "lots")]);
    let err = flat(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("MLLM_MAX_SCRIPT_STEPS=lots is not a positive number"),
        "{err}"
    );
}

#[test]
fn template_fuel_depth_and_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let msgs = dir.path().join("m.json");
    std::fs::write(&msgs, r#"[{"role": "user", "content": "Hi"}]"#).expect("write");
    let msgs = msgs.display().to_string();
    let args = ["template", "--model", VL, "--messages", &msgs];
    let o = mllm_env(&[], &args);
    assert!(o.status.success(), "{}", flat(&o));
    let o = mllm_env(&[("MLLM_TEMPLATE_FUEL", "10")], &args);
    let err = flat(&o);
    assert!(
        !o.status.success() && err.contains("used up its fuel of 10"),
        "{err}"
    );
    let o = mllm_env(&[("MLLM_TEMPLATE_MAX_OUTPUT", "16")], &args);
    let err = flat(&o);
    assert!(
        !o.status.success() && err.contains("rendered more than 16 bytes"),
        "{err}"
    );
    let o = mllm_env(&[("MLLM_TEMPLATE_MAX_DEPTH", "0")], &args);
    let err = flat(&o);
    assert!(
        !o.status.success() && err.contains("MLLM_TEMPLATE_MAX_DEPTH=0 is not a positive number"),
        "{err}"
    );
}

#[test]
fn image_pixels_and_text_bytes() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("pv.safetensors").display().to_string();
    let image = "tests/fixtures/vision/images/rgba_70x50.png";
    let args = [
        "vision-preprocess",
        "--model",
        VL,
        "--image",
        image,
        "--out",
        &out,
    ];
    let o = mllm_env(&[], &args);
    assert!(o.status.success(), "{}", flat(&o));
    let o = mllm_env(&[("MLLM_MAX_IMAGE_PIXELS", "1000")], &args);
    let err = flat(&o);
    assert!(
        !o.status.success() && err.contains("70x50 = 3500 pixels, over the limit of 1000"),
        "{err}"
    );
    let tok = ["tokenize", "--model", VL, "--text", "twenty bytes of text"];
    let o = mllm_env(&[], &tok);
    assert!(o.status.success(), "{}", flat(&o));
    let o = mllm_env(&[("MLLM_MAX_TEXT_BYTES", "19")], &tok);
    let err = flat(&o);
    assert!(
        !o.status.success() && err.contains("a text of 20 bytes is over the limit of 19 bytes"),
        "{err}"
    );
}
