//! `--check-numerics` stops at the first op whose output holds a NaN or an
//! infinity, naming the op, the tensor's shape, the script line and where
//! the value came from; without it, non-finite logits are an error when a
//! token would be chosen from them, never a sampled token.

mod common;

use std::path::Path;

use common::*;

/// Copies the checkpoint directory `fixture` to `dst` with `value` written
/// into element 5 of the f32 tensor `tensor`.
fn poisoned_copy(fixture: &str, dst: &Path, tensor: &str, value: f32) {
    let src = root().join(fixture);
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(&src).expect("fixture").flatten() {
        std::fs::copy(e.path(), dst.join(e.file_name())).expect("copy");
    }
    let path = dst.join("model.safetensors");
    let mut bytes = std::fs::read(&path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let t = &header[tensor];
    assert_eq!(t["dtype"], "F32", "{tensor}");
    let start = 8 + n + t["data_offsets"][0].as_u64().expect("offset") as usize;
    bytes[start + 20..start + 24].copy_from_slice(&value.to_le_bytes());
    std::fs::write(&path, bytes).expect("write");
}

/// stderr with miette's line wrapping undone (`│` gutters, breaks).
fn flat(stderr: &[u8]) -> String {
    text(stderr)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn exec(script: &str, model: &Path, extra: &[&str]) -> (bool, String, String) {
    let model = model.display().to_string();
    let mut args = vec!["exec", script, "--model", &model, "--input-ids", "1,2,3"];
    args.extend_from_slice(extra);
    let r = mllm(&args);
    (r.status.success(), text(&r.stdout), flat(&r.stderr))
}

#[test]
fn a_nan_weight_is_traced_to_the_op_line_and_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("nan");
    poisoned_copy(
        "tests/fixtures/qwen3/gqa_tied_f32",
        &model,
        "model.layers.0.mlp.down_proj.weight",
        f32::NAN,
    );
    let (ok, out, err) = exec("qwen3", &model, &["--check-numerics"]);
    assert!(!ok, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("mdl::run::non_finite")
            && err.contains("`linear` produced NaN at index [0, 0] of its f32 [3, 64] output")
            && err.contains("input 2 (f32 [64, 128]) already held NaN"),
        "{err}"
    );
    // The line of the call, and the script calls above it, up to the
    // decoder's layer loop (Qwen3 is the stdlib decoder: nn.CausalLM).
    assert!(err.contains("stdlib/nn.mdl:11:"), "{err}");
    let nn = std::fs::read_to_string(root().join("stdlib/nn.mdl")).expect("nn.mdl");
    let layer_call = nn
        .lines()
        .position(|l| l.contains("x = layer(x, rope, cache.layer(i))"))
        .expect("CausalLM's layer loop")
        + 1;
    assert!(
        err.contains(&format!(
            "called from <builtin>/stdlib/nn.mdl:{layer_call}:"
        )),
        "{err}"
    );

    // Without the check, prefill alone runs, but no token comes of it.
    let (ok, _, err) = exec("qwen3", &model, &[]);
    assert!(ok, "{err}");
    let (ok, out, err) = exec("qwen3", &model, &["--max-new-tokens", "2"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains("the model's logits hold NaN") && err.contains("no token was sampled"),
        "{err}"
    );
}

#[test]
fn a_script_dividing_by_zero_is_stopped_at_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Qwen3 spelled out (tests/lang/qwen3_shared.mdl), so the forward's
    // lines are the script's own.
    let source = std::fs::read_to_string(root().join("tests/lang/qwen3_shared.mdl"))
        .expect("qwen3_shared.mdl");
    let broken = source.replacen("x = model.norm(x)", "x = model.norm(x) / 0.0", 1);
    assert_ne!(broken, source, "the line to break is in qwen3_shared.mdl");
    let script = dir.path().join("broken.mdl");
    std::fs::write(&script, &broken).expect("write");
    let line = broken
        .lines()
        .position(|l| l.contains("/ 0.0"))
        .expect("line")
        + 1;
    let fixture = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let script = script.display().to_string();
    let (ok, _, err) = exec(&script, &fixture, &["--check-numerics"]);
    assert!(!ok);
    assert!(
        err.contains("`div` produced") && err.contains("its inputs were finite"),
        "{err}"
    );
    assert!(err.contains(&format!("broken.mdl:{line}:")), "{err}");
    let (ok, _, err) = exec(&script, &fixture, &["--max-new-tokens", "1"]);
    assert!(!ok && err.contains("no token was sampled"), "{err}");
}

#[test]
fn sampling_refuses_non_finite_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("inf");
    poisoned_copy(
        "tests/fixtures/qwen3_vl/p16_m2_tied_published",
        &model,
        "model.language_model.layers.0.mlp.down_proj.weight",
        f32::INFINITY,
    );
    let model = model.display().to_string();
    let r = mllm(&[
        "run", "--model", &model, "--prompt", "hi", "-n", "3", "--temp", "0.7",
    ]);
    let err = flat(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(err.contains("no token was sampled"), "{err}");
    let r = mllm(&[
        "run",
        "--model",
        &model,
        "--prompt",
        "hi",
        "-n",
        "3",
        "--check-numerics",
    ]);
    let err = flat(&r.stderr);
    assert!(!r.status.success() && err.contains("produced inf"), "{err}");
}

#[test]
fn a_healthy_model_gives_the_same_ids_checked_and_the_flag_needs_eager_steps() {
    let fixture = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let (ok, plain, err) = exec("qwen3", &fixture, &["--max-new-tokens", "6"]);
    assert!(ok, "{err}");
    let (ok, checked, err) = exec(
        "qwen3",
        &fixture,
        &["--max-new-tokens", "6", "--check-numerics"],
    );
    assert!(ok, "{err}");
    assert_eq!(plain, checked);
    assert_eq!(plain.trim().split(',').count(), 6, "{plain}");
    let (ok, _, err) = exec("qwen3", &fixture, &["--check-numerics", "--compiled"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}
