//! Constrained decoding (issue #28, on the generation core's logits
//! processors): `run --json-schema/--grammar-file/--json`, and `serve`'s
//! `response_format`, `json_schema`, `grammar` and `logit_bias`. Answers
//! are validated by the `jsonschema` package (`tests/serve/constrained.py`
//! in the venv `tests/fetch_assets.sh` installs), for random weights (the
//! tiny Qwen3-VL fixture, whose answers wander everywhere a schema allows)
//! and for the real SmolLM2.

mod common;

use std::process::Command;

use common::http::{post, Server};
use common::{mllm, root, serve_python, smollm2, text};
use serde_json::{json, Value};

/// A random-weight model with a real (byte-level BPE) tokenizer.
fn random_model() -> String {
    let p = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    p.to_str().expect("utf-8").to_string()
}

fn run(args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["run", "--model"];
    let m = random_model();
    all.push(&m);
    all.extend_from_slice(args);
    let out = mllm(&all);
    (
        out.status.success(),
        text(&out.stdout).trim_end_matches('\n').to_string(),
        text(&out.stderr),
    )
}

#[test]
fn run_follows_a_schema_a_grammar_and_json() {
    let schema = r#"{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":1,"maximum":3}},"required":["ok","n"],"additionalProperties":false}"#;
    for seed in ["1", "2", "3"] {
        let (ok, out, err) = run(&[
            "--prompt",
            "hi",
            "--temp",
            "1",
            "--top-k",
            "0",
            "-s",
            seed,
            "-n",
            "200",
            "--json-schema",
            schema,
        ]);
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
        assert!(v["ok"].is_boolean(), "{out}");
        let n = v["n"].as_i64().expect("n");
        assert!((1..=3).contains(&n), "{out}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{out}");
    }

    let tmp = std::env::temp_dir().join(format!("mllm-constrained-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let gbnf = tmp.join("answer.gbnf");
    std::fs::write(
        &gbnf,
        "# a verdict and a digit\nroot ::= verdict \" \" [0-9]\nverdict ::= (\n  \"yes\"\n  | \"no\" )\n",
    )
    .expect("write");
    for seed in ["1", "2", "3", "4"] {
        let (ok, out, err) = run(&[
            "--prompt",
            "hi",
            "--temp",
            "1",
            "-s",
            seed,
            "-n",
            "50",
            "--grammar-file",
            gbnf.to_str().expect("utf-8"),
        ]);
        assert!(ok, "{err}");
        let (verdict, digit) = out.split_once(' ').unwrap_or_else(|| panic!("{out:?}"));
        assert!(matches!(verdict, "yes" | "no"), "{out:?}");
        assert!(
            digit.len() == 1 && digit.chars().all(|c| c.is_ascii_digit()),
            "{out:?}"
        );
    }
    let (ok, out, err) = run(&["--prompt", "hi", "--temp", "0", "-n", "300", "--json"]);
    assert!(ok, "{err}");
    if !err.contains("generated 300 tok") {
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
        assert!(v.is_object(), "{out}");
    } else {
        assert!(out.starts_with('{'), "{out}");
    }

    // Mistakes are said plainly.
    let (ok, _, err) = run(&["--prompt", "hi", "--json-schema", "{\"type\": \"objekt\"}"]);
    assert!(!ok);
    assert!(err.contains("JSON schema cannot be used"), "{err}");
    let (ok, _, err) = run(&["--prompt", "hi", "--json-schema", "{not json"]);
    assert!(!ok);
    assert!(err.contains("is not valid JSON"), "{err}");
    let (ok, _, err) = run(&[
        "--prompt",
        "hi",
        "--json",
        "--grammar-file",
        gbnf.to_str().expect("utf-8"),
    ]);
    assert!(!ok);
    assert!(err.contains("give one"), "{err}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Runs `tests/serve/constrained.py` against `srv`: `n` answers per schema,
/// each parsed and validated by `jsonschema`.
fn validate_with_jsonschema(srv: &Server, n: usize, extra: &[&str]) -> String {
    let out = Command::new(serve_python())
        .arg(root().join("tests/serve/constrained.py"))
        .arg(format!("http://{}", srv.addr))
        .arg(n.to_string())
        .args(extra)
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run constrained.py");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}");
    assert!(
        out.status.success(),
        "constrained.py failed:\n{stdout}\n{stderr}\n--- server log\n{}",
        srv.log
    );
    stdout
}

#[test]
fn every_answer_under_a_schema_validates_with_random_weights() {
    let srv = Server::start(&["--model", &random_model(), "-t", "2"]);
    let out = validate_with_jsonschema(&srv, 50, &[]);
    assert_eq!(
        out.matches("50/50 answers parse and validate").count(),
        4,
        "{out}"
    );
}

/// `--ignore-eos` masks the end-of-sequence token (as serve's
/// `ignore_eos`): SmolLM2's greedy answer to a greeting ends after a few
/// dozen tokens, and with the flag it runs to `-n`.
#[test]
fn ignore_eos_runs_to_the_token_limit() {
    let model = smollm2();
    let args = [
        "run", "--model", &model, "--prompt", "Say hi.", "--temp", "0", "-n", "64", "-t", "2",
    ];
    let out = mllm(&args);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("generated 64 tok"),
        "the answer should end before -n: {err}"
    );
    let out = mllm(&[&args[..], &["--ignore-eos"]].concat());
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("generated 64 tok"), "{err}");
}

#[test]
fn every_answer_under_a_schema_validates_with_smollm2() {
    let srv = Server::start(&["--model", &smollm2(), "-t", "2"]);
    let out = validate_with_jsonschema(&srv, 8, &["--with-object"]);
    // Every answer to the four bounded schemas; json_object answers that
    // end by themselves all validate (constrained.py fails otherwise), and
    // it checks that at least half end (one may nest on past max_tokens).
    for schema in ["nested", "bounded_array", "enum_optional_number", "any_of"] {
        let want = format!("{schema}: 8/8 answers parse and validate");
        assert!(out.contains(&want), "no `{want}` in:\n{out}");
    }
    assert!(out.contains("json_object: "), "{out}");
}

#[test]
fn serve_refuses_what_it_cannot_do_and_biases_logits() {
    let srv = Server::start(&["--model", &random_model(), "-t", "2"]);
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        post(&srv.addr, "/v1/chat/completions", &body.to_string())
    };
    let refused = |extra: Value, param: &str, says: &str| {
        let r = chat(extra.clone());
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        let e = r.json();
        assert_eq!(e["error"]["param"], param, "{}", r.body);
        let msg = e["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{extra}: {msg}");
    };
    refused(
        json!({"functions": [{"name": "f", "parameters": {}}]}),
        "functions",
        "send `tools`",
    );
    refused(
        json!({"tool_choice": "required"}),
        "tool_choice",
        "no `tools` are given",
    );
    refused(
        json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
        "tool_choice",
        "`g`, which is not one of `tools`",
    );
    refused(
        json!({"tools": [{"type": "retrieval"}]}),
        "tools[0]",
        "only `function` tools",
    );
    refused(
        json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required", "response_format": {"type": "json_object"}}),
        "tool_choice",
        "cannot be combined",
    );
    refused(
        json!({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}),
        "grammar",
        "send one",
    );
    refused(
        json!({"response_format": {"type": "yaml"}}),
        "response_format",
        "`yaml`",
    );
    refused(
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
        "response_format",
        "schema` is missing",
    );
    refused(
        json!({"logit_bias": {"abc": 1}}),
        "logit_bias.abc",
        "token ids",
    );
    refused(
        json!({"logit_bias": {"5": 300}}),
        "logit_bias.5",
        "-100 to 100",
    );
    // A schema llguidance cannot take is a 400 naming it, not a 500.
    let r =
        chat(json!({"json_schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("JSON schema cannot be used"), "{}", r.body);
    // `tool_choice: "none"` asks for nothing and is served.
    assert_eq!(chat(json!({"tool_choice": "none"})).status, 200);

    // A GBNF grammar through llama-server's field.
    let r = chat(json!({"grammar": "root ::= \"ok\" [0-9]", "max_tokens": 20}));
    assert_eq!(r.status, 200, "{}", r.body);
    let content = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        content.len() == 3 && content.starts_with("ok"),
        "{content:?}"
    );
    assert_eq!(r.json()["choices"][0]["finish_reason"], "stop");

    // logit_bias +100 on one token makes greedy decoding pick it every time.
    let d = post(
        &srv.addr,
        "/detokenize",
        &json!({"tokens": [70]}).to_string(),
    );
    assert_eq!(d.status, 200, "{}", d.body);
    let piece = d.json()["content"].as_str().unwrap_or_default().to_string();
    assert!(!piece.is_empty());
    let r = chat(json!({"logit_bias": {"70": 100}, "max_tokens": 4}));
    assert_eq!(r.status, 200, "{}", r.body);
    let content = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(content, piece.repeat(4));
}

/// `<think>` blocks go to `reasoning_content` (issue #28 item 3), in whole
/// and streamed answers; `reasoning_format: "none"` keeps them in
/// `content`. A grammar makes the random-weight model think on cue.
#[test]
fn thinking_is_split_into_reasoning_content() {
    let srv = Server::start(&["--model", &random_model(), "-t", "2"]);
    let thinking = "root ::= \"<think>\\n\" [a-z]{2,4} \"</think>\\n\\n\" [a-z]{2,4}";
    let body = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
                           "temperature": 1, "seed": 3, "grammar": thinking});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b.to_string()
    };
    let r = post(&srv.addr, "/v1/chat/completions", &body(json!({})));
    assert_eq!(r.status, 200, "{}", r.body);
    let msg = &r.json()["choices"][0]["message"];
    let reasoning = msg["reasoning_content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let content = msg["content"].as_str().unwrap_or_default().to_string();
    let is_word = |s: &str| (2..=4).contains(&s.len()) && s.chars().all(|c| c.is_ascii_lowercase());
    assert!(is_word(&reasoning) && is_word(&content), "{msg}");

    // Streamed: the same split, as deltas.
    let r = post(
        &srv.addr,
        "/v1/chat/completions",
        &body(json!({"stream": true})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let (mut r_stream, mut c_stream) = (String::new(), String::new());
    for ev in r.events().iter().filter(|e| e.as_str() != "[DONE]") {
        let v: Value = serde_json::from_str(ev).expect("a JSON chunk");
        let delta = &v["choices"][0]["delta"];
        r_stream.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        c_stream.push_str(delta["content"].as_str().unwrap_or_default());
    }
    assert_eq!(
        (r_stream.as_str(), c_stream.as_str()),
        (reasoning.as_str(), content.as_str())
    );

    // `none` leaves the block in the content.
    let r = post(
        &srv.addr,
        "/v1/chat/completions",
        &body(json!({"reasoning_format": "none"})),
    );
    let msg = &r.json()["choices"][0]["message"];
    assert_eq!(
        msg["content"],
        format!("<think>\n{reasoning}</think>\n\n{content}"),
        "{msg}"
    );
    assert!(msg.get("reasoning_content").is_none(), "{msg}");

    // `reasoning_effort: "none"` is thinking off; an unknown effort is a 400.
    let plain = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let mut b = plain.clone();
    b["reasoning_effort"] = json!("none");
    assert_eq!(
        post(&srv.addr, "/v1/chat/completions", &b.to_string()).status,
        200
    );
    b["reasoning_effort"] = json!("extreme");
    let r = post(&srv.addr, "/v1/chat/completions", &b.to_string());
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "reasoning_effort");
}
