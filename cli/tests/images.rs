//! The `mllm` binary with images: `exec --pixel-values`, `vision-preprocess`,
//! `run --image` and `chat --image` against transformers' references.

mod common;

use std::process::Command;

use common::{max_abs, mllm, root, text};

#[test]
fn exec_with_images_matches_transformers() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_path = dir.path().join("logits.safetensors");
    let fixture = root().join("tests/fixtures/qwen3_vl/p8_m3_untied_ropeparams");
    let reference = fixture.join("reference_two_images.safetensors");
    let bytes = std::fs::read(&reference).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let i32s = |name: &str| -> Vec<i32> {
        st.tensor(name)
            .expect(name)
            .data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let join = |v: &[i32]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let prompt = i32s("input_ids");
    let greedy = i32s("greedy_ids");
    // The built-in script by name (embedded in the binary).
    let out = mllm(&[
        "exec",
        "qwen3_vl",
        "--model",
        fixture.to_str().expect("utf-8"),
        "--input-ids",
        &join(&prompt),
        "--pixel-values",
        reference.to_str().expect("utf-8"),
        "--max-new-tokens",
        &greedy.len().to_string(),
        "--logits-out",
        out_path.to_str().expect("utf-8"),
        "--threads",
        "2",
    ]);
    assert!(out.status.success(), "exec failed: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        join(&greedy),
        "greedy ids after the images"
    );
    let got = std::fs::read(&out_path).expect("logits file");
    let got = safetensors::SafeTensors::deserialize(&got).expect("safetensors");
    let f32s = |t: safetensors::tensor::TensorView| -> Vec<f32> {
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let a = f32s(got.tensor("logits").expect("logits"));
    let b = f32s(st.tensor("logits").expect("logits"));
    // Panics on a NaN/Inf on either side (a bare max fold skips NaN).
    let err = max_abs(&a, &b);
    assert!(err <= 1e-4, "exec logits differ from transformers by {err}");

    // Too few image tokens for the grids: a clear error, not a panic.
    let out = mllm(&[
        "exec",
        "qwen3_vl",
        "--model",
        fixture.to_str().expect("utf-8"),
        "--input-ids",
        "1,2,3",
        "--pixel-values",
        reference.to_str().expect("utf-8"),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("image_grid_thw"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn vision_preprocess_writes_pixel_values_and_grids() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_path = dir.path().join("pv.safetensors");
    let fixtures = root().join("tests/fixtures/vision");
    let r = mllm(&[
        "vision-preprocess",
        "--model",
        "tests/fixtures/vision/small",
        "--image",
        "tests/fixtures/vision/images/odd_173x67.png",
        "--image",
        "tests/fixtures/vision/images/rgba_70x50.png",
        "--out",
        out_path.to_str().expect("utf-8"),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stdout).contains("image_grid_thw 1,4,10"),
        "{}",
        text(&r.stdout)
    );
    let bytes = std::fs::read(&out_path).expect("out file");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let pv = st.tensor("pixel_values").expect("pixel_values");
    let grid = st.tensor("image_grid_thw").expect("image_grid_thw");
    assert_eq!(pv.dtype(), safetensors::Dtype::F32);
    assert_eq!(grid.dtype(), safetensors::Dtype::I64);
    assert_eq!(grid.shape(), [2, 3]);
    // The reference: transformers' output for each image, concatenated.
    let rbytes = std::fs::read(fixtures.join("reference.safetensors")).expect("reference");
    let reference = safetensors::SafeTensors::deserialize(&rbytes).expect("reference");
    let mut want_pv = Vec::new();
    let mut want_grid = Vec::new();
    for case in ["odd_png", "rgba_png"] {
        let levels = reference.tensor(&format!("{case}.levels")).expect("levels");
        want_pv.extend(levels.data().iter().map(|&l| (l as f32 - 127.5) / 127.5));
        want_grid.extend_from_slice(
            reference
                .tensor(&format!("{case}.image_grid_thw"))
                .expect("grid")
                .data(),
        );
    }
    assert_eq!(pv.shape(), [want_pv.len() / 1536, 1536]);
    assert_eq!(grid.data(), &want_grid[..]);
    let got: Vec<f32> = pv
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    // PNG input: bit-identical to transformers.
    assert!(got == want_pv, "pixel_values differ from the reference");
    // Bad input: a clear error naming the file, exit code 1, no panic.
    let r = mllm(&[
        "vision-preprocess",
        "--model",
        "tests/fixtures/vision/small",
        "--image",
        "README.md",
        "--out",
        out_path.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r.stderr));
    assert!(text(&r.stderr).contains("README.md"), "{}", text(&r.stderr));
    assert!(!text(&r.stderr).contains("panicked"), "{}", text(&r.stderr));
}

#[test]
fn run_with_images() {
    let f = root().join("tests/fixtures/qwen3_vl");
    let model = f.join("p16_m2_tied_published");
    let img = f.join("run_images/a_160x120.png");
    let out = mllm(&[
        "run",
        "--model",
        model.to_str().expect("utf-8"),
        "--image",
        img.to_str().expect("utf-8"),
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("prompt 39 tok"),
        "{}",
        text(&out.stderr)
    );
    let bad = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(bad.path(), b"not an image").expect("write");
    let out = mllm(&[
        "run",
        "--model",
        model.to_str().expect("utf-8"),
        "--image",
        bad.path().to_str().expect("utf-8"),
        "--prompt",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("error"), "{}", text(&out.stderr));
}

#[test]
fn chat_with_images() {
    use std::io::Write;
    let f = root().join("tests/fixtures/qwen3_vl");
    let model = f.join("p16_m2_tied_published");
    let (a, b) = (
        f.join("run_images/a_160x120.png"),
        f.join("run_images/b_36x90.png"),
    );
    let s = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let run = mllm(&[
        "run",
        "--model",
        &s(&model),
        "--image",
        &s(&a),
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args([
            "chat",
            "--model",
            &s(&model),
            "--image",
            &s(&a),
            "--temp",
            "0",
            "-n",
            "6",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn chat");
    let input = format!(
        "Describe this image.\n/image {}\nCompare them.\n/image /no/such.png\nhello\n/exit\n",
        s(&b)
    );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("chat");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("prompt 39 tok"), "{err}");
    assert!(
        err.contains("prompt 85 tok"),
        "second turn with both images: {err}"
    );
    assert!(
        err.contains("/no/such.png") && err.contains("message not sent"),
        "{err}"
    );
    // The first answer streams exactly what `run` printed.
    let first_run = run.stdout.split(|&c| c == b'\n').next().expect("line");
    assert!(
        out.stdout.starts_with(first_run),
        "chat {:?} vs run {:?}",
        text(&out.stdout),
        text(&run.stdout)
    );
}

/// The comparison above cannot pass on garbage: NaN or Inf logits panic.
#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_nan() {
    max_abs(&[f32::NAN, 1.0], &[0.0, 1.0]);
}

#[test]
#[should_panic(expected = "not finite")]
fn max_abs_rejects_inf() {
    max_abs(&[0.0, 1.0], &[0.0, f32::INFINITY]);
}
