//! `--mmproj` on the `mllm` binary: a Qwen3-VL text GGUF with its mmproj
//! (both written by llama.cpp's converter from the committed fixtures by
//! `tests/fixtures/gguf/make_family_ggufs.py --vl-pairs`, into
//! tests/fixtures/gguf/mmproj) answers `run --image`, `chat --image` and
//! `exec --pixel-values` as the Hugging Face directory does, `bench` times
//! it, and an image without the mmproj is an error that names the flag.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::{mllm, root, text};

const CASE: &str = "qwen3_vl/p16_m2_tied_published";

/// The committed pairs (tests/fixtures/gguf/mmproj, written by
/// `make_family_ggufs.py --vl-pairs`).
fn pairs_dir() -> PathBuf {
    root().join("tests/fixtures/gguf/mmproj")
}

fn path(p: PathBuf) -> String {
    p.to_str().expect("utf-8").to_string()
}

fn text_gguf(case: &str) -> String {
    path(pairs_dir().join(format!("{}.gguf", case.replace('/', "_"))))
}

fn mmproj(case: &str) -> String {
    path(pairs_dir().join(format!("{}.mmproj.gguf", case.replace('/', "_"))))
}

fn hf_dir(case: &str) -> String {
    path(root().join("tests/fixtures").join(case))
}

/// An image both processors leave as it is: 128 x 96 is whole 32-pixel
/// tokens inside the fixture's budget (4096..16384 pixels) and inside
/// llama.cpp's (8..4096 tokens), the one the pair's settings give.
fn image() -> String {
    path(root().join("tests/fixtures/qwen3_vl/run_images/resized/a_160x120_128x96.png"))
}

fn ok(out: &Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The `prompt N tok` part of a run's summary line.
fn prompt_tokens(stderr: &str) -> String {
    let at = stderr.find("prompt ").expect("summary");
    stderr[at..]
        .split(" tok")
        .next()
        .expect("count")
        .to_string()
}

#[test]
fn run_with_mmproj_answers_as_the_hf_dir() {
    let img = image();
    let args = |model: &[&str]| -> Output {
        let mut a = vec!["run"];
        a.extend_from_slice(model);
        a.extend([
            "--image",
            &img,
            "--prompt",
            "Describe this image.",
            "--temp",
            "0",
            "-n",
            "6",
        ]);
        mllm(&a)
    };
    // Qwen3.5's run fixture shares the tokenizer, template and processor.
    for case in [CASE, "qwen3_5_vl/dense"] {
        let dir = args(&["--model", &hf_dir(case)]);
        ok(&dir);
        let pair = args(&["--model", &text_gguf(case), "--mmproj", &mmproj(case)]);
        ok(&pair);
        let (e1, e2) = (text(&dir.stderr), text(&pair.stderr));
        assert_eq!(prompt_tokens(&e1), prompt_tokens(&e2), "{e1}\n{e2}");
        // 12 image tokens, as a_160x120.png takes after its resize to this size.
        assert_eq!(prompt_tokens(&e2), "prompt 39", "{case}: {e2}");
        assert_eq!(
            text(&pair.stdout),
            text(&dir.stdout),
            "{case}: the answers differ"
        );
        eprintln!(
            "{case}: run --mmproj answered {:?} as the HF dir",
            text(&pair.stdout)
        );
    }
}

#[test]
fn chat_with_mmproj_answers_as_run() {
    let run = mllm(&[
        "run",
        "--model",
        &text_gguf(CASE),
        "--mmproj",
        &mmproj(CASE),
        "--image",
        &image(),
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    ok(&run);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args([
            "chat",
            "--model",
            &text_gguf(CASE),
            "--mmproj",
            &mmproj(CASE),
            "--image",
            &image(),
            "--temp",
            "0",
            "-n",
            "6",
        ])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chat");
    let stdin = child.stdin.take().expect("stdin");
    { stdin }
        .write_all(b"Describe this image.\n/exit\n")
        .expect("write");
    let out = child.wait_with_output().expect("chat");
    ok(&out);
    let first = run.stdout.split(|&c| c == b'\n').next().expect("line");
    assert!(
        out.stdout.starts_with(first),
        "chat {:?} vs run {:?}",
        text(&out.stdout),
        text(&run.stdout)
    );
}

/// `exec --pixel-values` with the reference's processor output: the greedy
/// ids are transformers' (the untied fixture: merge 3, patch 8).
#[test]
fn exec_with_mmproj_matches_transformers() {
    let case = "qwen3_vl/p8_m3_untied_ropeparams";
    let reference = root()
        .join("tests/fixtures")
        .join(case)
        .join("reference_two_images.safetensors");
    let bytes = std::fs::read(&reference).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let ids = |name: &str| -> String {
        let t = st.tensor(name).expect(name);
        let v: Vec<String> = t
            .data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).to_string())
            .collect();
        v.join(",")
    };
    let want = ids("greedy_ids");
    let n = want.split(',').count().to_string();
    let out = mllm(&[
        "exec",
        "qwen3_vl",
        "--model",
        &text_gguf(case),
        "--mmproj",
        &mmproj(case),
        "--input-ids",
        &ids("input_ids"),
        "--pixel-values",
        &path(reference.clone()),
        "--max-new-tokens",
        &n,
    ]);
    ok(&out);
    assert_eq!(text(&out.stdout).trim(), want);
}

#[test]
fn bench_times_images_with_mmproj() {
    let out = mllm(&[
        "bench",
        "--model",
        &text_gguf(CASE),
        "--mmproj",
        &mmproj(CASE),
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "--image-size",
        "64",
    ]);
    ok(&out);
    assert!(text(&out.stdout).contains("img64"), "{}", text(&out.stdout));
}

#[test]
fn images_without_mmproj_name_the_flag() {
    let out = mllm(&[
        "run",
        "--model",
        &text_gguf(CASE),
        "--image",
        &image(),
        "--prompt",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("--mmproj FILE"), "{err}");
    // A video (a directory of frames) likewise.
    let frames = path(root().join("tests/fixtures/qwen3_vl/run_images"));
    let out = mllm(&[
        "run",
        "--model",
        &text_gguf(CASE),
        "--video",
        &frames,
        "--prompt",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("--mmproj FILE"), "{err}");
    let out = mllm(&[
        "exec",
        "qwen3_vl",
        "--model",
        &text_gguf(CASE),
        "--input-ids",
        "1,2",
        "--pixel-values",
        &path(
            root()
                .join("tests/fixtures")
                .join(CASE)
                .join("reference_one_image.safetensors"),
        ),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--mmproj FILE"),
        "{}",
        text(&out.stderr)
    );
    // A text model with `--mmproj` but no image still answers.
    let out = mllm(&[
        "run",
        "--model",
        &text_gguf(CASE),
        "--mmproj",
        &mmproj(CASE),
        "--prompt",
        "hi",
        "--temp",
        "0",
        "-n",
        "2",
    ]);
    ok(&out);
}

/// `serve --mmproj`: an image in a chat request to the GGUF pair gets
/// `run --mmproj --image`'s answer; an unnamed `--mmproj` beside two models
/// is refused.
#[test]
fn serve_with_mmproj_answers_as_run() {
    use common::http::{post, Server};
    use serde_json::json;
    let (model, proj, img) = (text_gguf(CASE), mmproj(CASE), image());
    let run = mllm(&[
        "run",
        "--model",
        &model,
        "--mmproj",
        &proj,
        "--image",
        &img,
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    ok(&run);
    let want = text(&run.stdout);
    let want = want.strip_suffix('\n').unwrap_or(&want).to_string();
    let named = format!("vl={model}");
    let images_dir = std::path::Path::new(&img)
        .parent()
        .expect("the image's folder");
    let srv = Server::start(&[
        "--model",
        &named,
        "--mmproj",
        &format!("vl={proj}"),
        "-t",
        "2",
        "--allowed-local-media-path",
        images_dir.to_str().expect("utf-8"),
    ]);
    let body = json!({ "model": "vl", "temperature": 0, "max_tokens": 6, "messages": [
        { "role": "user", "content": [
            { "type": "image_url", "image_url": { "url": img } },
            { "type": "text", "text": "Describe this image." },
        ] },
    ] });
    let r = post(srv.addr.as_str(), "/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["choices"][0]["message"]["content"], want.as_str());

    let two = mllm(&[
        "serve",
        "--model",
        &format!("a={model}"),
        "--model",
        &format!("b={model}"),
        "--mmproj",
        &proj,
        "--port",
        "0",
    ]);
    assert_eq!(two.status.code(), Some(2), "{}", text(&two.stderr));
    let e = text(&two.stderr);
    assert!(e.contains("say which with --mmproj NAME=FILE"), "{e}");
}
