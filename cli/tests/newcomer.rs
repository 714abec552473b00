//! What a newcomer trips on (issue #33): llama.cpp's flag spellings, chats
//! that go on past the context, and an answer to each mistake that says
//! what to do. The text model is the real SmolLM2 GGUF (tests/fetch_assets.sh);
//! the vision model the tiny Qwen3-VL fixture.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::http::Server;
use common::{mllm, root, smollm2, text};

/// `mllm ARGS` with `input` on standard input.
fn mllm_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mllm");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait for mllm")
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "succeeded: {}", text(&out.stdout));
    text(&out.stderr)
}

/// `-p TEXT`, `-p -`, `-f FILE` and `-f -` give the same greedy answer;
/// `-s`, `-c`, `-n`, `-t` are taken; a prompt longer than `-c` is refused
/// with both numbers.
#[test]
fn run_takes_llama_cpp_flags() {
    let m = smollm2();
    let prompt = "What is the capital of France?";
    let base = [
        "run",
        "-m",
        m.as_str(),
        "--temp",
        "0",
        "-n",
        "6",
        "-t",
        "2",
        "-s",
        "7",
        "-c",
        "256",
    ];
    let mut a = base.to_vec();
    a.extend(["-p", prompt]);
    let want = ok(&mllm(&a));
    assert!(!want.trim().is_empty());

    let mut a = base.to_vec();
    a.extend(["-p", "-"]);
    assert_eq!(ok(&mllm_stdin(&a, prompt)), want, "-p -");
    let mut a = base.to_vec();
    a.extend(["-f", "-"]);
    assert_eq!(ok(&mllm_stdin(&a, prompt)), want, "-f -");
    let file = std::env::temp_dir().join(format!("mllm-prompt-{}.txt", std::process::id()));
    std::fs::write(&file, prompt).expect("prompt file");
    let mut a = base.to_vec();
    a.extend(["--file", file.to_str().expect("utf-8")]);
    assert_eq!(ok(&mllm(&a)), want, "-f FILE");
    std::fs::remove_file(&file).ok();

    let err = failed(&mllm(&["run", "-m", &m, "-c", "8", "-p", prompt]));
    assert!(
        err.contains("tokens but the context is 8 tokens") && err.contains("-c"),
        "{err}"
    );
    let err = failed(&mllm(&["run", "-m", &m]));
    assert!(err.contains("--prompt") || err.contains("--file"), "{err}");
    let err = failed(&mllm(&["run", "-m", &m, "-f", "/no/such/prompt.txt"]));
    assert!(
        err.contains("cannot read the prompt file /no/such/prompt.txt"),
        "{err}"
    );
}

/// An answer that reaches the context ends there, with its text, instead
/// of failing.
#[test]
fn an_answer_that_fills_the_context_ends_cleanly() {
    let m = smollm2();
    let out = mllm(&[
        "run",
        "-m",
        &m,
        "--temp",
        "0",
        "-n",
        "200",
        "-c",
        "48",
        "-p",
        "Count to one hundred.",
    ]);
    let answer = ok(&out);
    assert!(!answer.trim().is_empty(), "{}", text(&out.stderr));
}

/// `-np` (llama-server) and `-p` (ours before) both set the slots.
#[test]
fn serve_takes_np() {
    let m = smollm2();
    for flag in ["-np", "-p"] {
        let srv = Server::start(&["--model", &m, flag, "3", "-c", "512", "-t", "1"]);
        assert!(
            srv.log.contains("3 slots of 512 tokens"),
            "{flag}: {}",
            srv.log
        );
    }
}

/// `exec` picks the built-in script from the checkpoint as `run` does.
#[test]
fn exec_needs_no_script() {
    let m = smollm2();
    let out = ok(&mllm(&[
        "exec",
        "--model",
        &m,
        "--input-ids",
        "1,2,3",
        "--max-new-tokens",
        "2",
    ]));
    assert!(!out.trim().is_empty());
}

/// A chat longer than `-c` drops its oldest turns (said once) and goes on;
/// `/help` answers without reaching the model; `/image` on a text model is
/// refused at once; an unknown command is not sent as a message.
#[test]
fn chat_goes_on_past_the_context() {
    let m = smollm2();
    let line = "Tell me about the history of the city of Paris and its river.\n";
    let mut input = String::from("/help\n/image x.png\n/bogus\n");
    for _ in 0..8 {
        input.push_str(line);
    }
    let out = mllm_stdin(
        &[
            "chat",
            "-m",
            &m,
            "--system",
            "Be brief.",
            "-c",
            "160",
            "-n",
            "12",
            "--temp",
            "0",
            "-t",
            "2",
        ],
        &input,
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("dropping its oldest turns").count(), 1, "{err}");
    assert!(!err.contains("the conversation needs"), "{err}");
    assert!(
        err.contains("/reset") && err.contains("/exit"),
        "no /help: {err}"
    );
    assert!(err.contains("takes no images"), "{err}");
    assert!(err.contains("unknown command /bogus"), "{err}");
    // Every one of the eight messages got an answer.
    assert_eq!(err.matches("| generated ").count(), 8, "{err}");
}

/// Mistakes get answers that say what to do.
#[test]
fn mistakes_get_answers() {
    let m = smollm2();
    let err = failed(&mllm(&["convert", &m, "/tmp/never.mllm", "-q", "foo"]));
    assert!(
        err.contains("w4a16_g128") && err.contains("w8a8") && err.contains("q6_k"),
        "{err}"
    );

    let empty = std::env::temp_dir().join(format!("mllm-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("dir");
    let err = failed(&mllm(&[
        "run",
        "-m",
        empty.to_str().expect("utf-8"),
        "-p",
        "hi",
    ]));
    assert!(
        err.contains("no config.json")
            && err.contains("no weights")
            && err.contains("no tokenizer.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&empty).ok();

    let err = failed(&mllm(&["run", "-m", "Qwen/Qwen3-0.6B", "-p", "hi"]));
    assert!(
        err.contains("Hugging Face model name") && err.contains("--model hf://Qwen/Qwen3-0.6B"),
        "{err}"
    );
    let err = failed(&mllm(&["run", "-m", "/no/such/model.gguf", "-p", "hi"]));
    assert!(!err.contains("Hugging Face model name"), "{err}");

    let out = ok(&mllm(&["tokenize", "-m", &m, "--decode", "28120,905"]));
    assert!(out.ends_with('\n'), "{out:?}");
}

/// `export --check` loads the graph in onnxruntime and says so; without
/// onnxruntime it fails saying nothing was checked; without `--check` it
/// says the graph was not checked.
#[test]
fn export_says_whether_it_checked() {
    let onnx_python = root().join(".cache/onnx-venv/bin/python");
    assert!(
        onnx_python.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh`",
        onnx_python.display()
    );
    let plain_python = root().join(".cache/serve-venv/bin/python");
    let model = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let out_dir = std::env::temp_dir().join(format!("mllm-export-{}", std::process::id()));
    let export = |check: bool, python: &std::path::Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mllm"));
        cmd.args(["export", "qwen3", "-m"])
            .arg(&model)
            .args(["--seq", "1", "--context", "8", "--out"])
            .arg(&out_dir)
            .env("MLLM_PYTHON", python)
            .current_dir(root());
        if check {
            cmd.arg("--check");
        }
        cmd.output().expect("run mllm export")
    };
    let out = export(true, &onnx_python);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("checked: onnxruntime"),
        "{}",
        text(&out.stderr)
    );
    let err = failed(&export(true, &plain_python));
    assert!(
        err.contains("NOT checked") && err.contains("onnxruntime is not installed"),
        "{err}"
    );
    let out = export(false, &onnx_python);
    assert!(
        text(&out.stderr).contains("not checked"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&out_dir).ok();
}

/// `serve`: a conversation over the context is a 400 that says how to
/// go on; with `"truncate": true` its oldest turns make way and it is
/// answered.
#[test]
fn serve_truncates_when_asked() {
    let m = smollm2();
    let srv = Server::start(&["--model", &m, "-c", "128", "-np", "1", "-t", "2"]);
    let turn = "Tell me about the history of the city of Paris and its river.";
    let mut messages = vec![serde_json::json!({ "role": "system", "content": "Be brief." })];
    for _ in 0..6 {
        messages.push(serde_json::json!({ "role": "user", "content": turn }));
        messages.push(serde_json::json!({ "role": "assistant", "content": turn }));
    }
    messages.push(serde_json::json!({ "role": "user", "content": "And today?" }));
    let body = |truncate: bool| {
        serde_json::json!({ "messages": messages, "max_tokens": 4, "temperature": 0, "truncate": truncate })
            .to_string()
    };
    let r = common::http::post(srv.addr.as_str(), "/v1/chat/completions", &body(false));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("truncate"), "{}", r.body);
    let r = common::http::post(srv.addr.as_str(), "/v1/chat/completions", &body(true));
    assert_eq!(r.status, 200, "{}", r.body);
    let used = r.json()["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(used > 0 && used < 128, "{}", r.body);
}
