//! `mllm serve` on the real SmolLM2 GGUF, over loopback: answers equal
//! `mllm run --temp 0`, streaming equals the plain answer, many concurrent
//! streams over a few slots lose, cross and cut nothing, and bad input,
//! a full queue, a missing key, a client that leaves and SIGTERM are all
//! handled as an OpenAI client expects.

mod common;

use common::http::{get, post, post_and_leave, request, Server};
use common::{mllm, smollm2, text};
use serde_json::{json, Value};

const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Name three colors.",
    "Write a haiku about rain.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "Why is the sky blue?",
    "List two fruits.",
    "Who wrote Hamlet?",
];

/// `mllm run --temp 0` on the same model: the reference answer.
fn run_answer(model: &str, prompt: &str, n: usize, raw: bool) -> String {
    let n = n.to_string();
    let mut args = vec![
        "run", "--model", model, "--prompt", prompt, "--temp", "0", "-n", &n, "-t", "2",
    ];
    if raw {
        args.push("--raw");
    }
    let out = mllm(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

fn chat_body(prompt: &str, n: usize, stream: bool) -> String {
    json!({
        "messages": [{ "role": "user", "content": prompt }],
        "temperature": 0,
        "max_tokens": n,
        "stream": stream,
        "stream_options": { "include_usage": true },
    })
    .to_string()
}

/// The text of a chat stream, its finish reason and its usage chunk;
/// checks the stream's shape on the way.
fn read_stream(events: &[String]) -> (String, String, Value) {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|_| panic!("chunk {e}")))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut content = String::new();
    let mut finish = String::new();
    let mut usage = Value::Null;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], chunks[0]["id"], "one id per stream");
        if let Some(choice) = c["choices"].get(0) {
            content.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = f.to_string();
            }
        } else {
            usage = c["usage"].clone();
        }
    }
    (content, finish, usage)
}

#[test]
fn serve_answers_as_run_does_alone_and_under_load() {
    let model = smollm2();
    let srv = Server::start(&["--model", &model, "--parallel", "4", "-t", "2"]);
    let addr = srv.addr.as_str();
    // SmolLM2's own context is 8192; a slot gets at most 4096 by default.
    assert!(srv.log.contains("4 slots of 4096 tokens"), "{}", srv.log);
    assert!(srv.log.contains("MiB"), "no KV memory in {}", srv.log);

    let health = get(addr, "/health");
    assert_eq!(
        (health.status, health.json()["status"].clone()),
        (200, json!("ok"))
    );
    let models = get(addr, "/v1/models").json();
    let name = models["data"][0]["id"]
        .as_str()
        .expect("model id")
        .to_string();
    assert_eq!(name, "SmolLM2-135M-Instruct.Q4_1");

    // Plain chat answer = `mllm run --temp 0`.
    let want = run_answer(&model, PROMPTS[0], 16, false);
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(PROMPTS[0], 16, false),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], name.as_str());
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 16);

    // The same request streamed: the same text, all of its prompt but the
    // last token taken from the slot's cache (the CPU's steps are
    // chunk-invariant, so any computed prefix is exact).
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(PROMPTS[0], 16, true),
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let (content, finish, usage) = read_stream(&r.events());
    assert_eq!(
        (content.as_str(), finish.as_str()),
        (want.as_str(), "length")
    );
    assert_eq!(usage["completion_tokens"], 16);
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"].as_u64(),
        usage["prompt_tokens"].as_u64().map(|n| n - 1),
        "{usage}"
    );
    // The conversation's next turn computes only what is new.
    let next = json!({
        "messages": [
            { "role": "user", "content": PROMPTS[0] },
            { "role": "assistant", "content": want },
            { "role": "user", "content": "And of Germany?" },
        ],
        "temperature": 0, "max_tokens": 4,
    });
    let v = post(addr, "/v1/chat/completions", &next.to_string()).json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(
        cached > 30 && cached < prompt_tokens,
        "next turn: {cached} of {prompt_tokens} cached"
    );

    // Completions on raw text = `mllm run --raw`.
    let want_raw = run_answer(&model, "The quick brown fox", 12, true);
    let r = post(
        addr,
        "/v1/completions",
        &json!({ "prompt": "The quick brown fox", "temperature": 0, "max_tokens": 12, "logprobs": 2 }).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["text"], want_raw.as_str());
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(12));
    for (t, top) in lp["token_logprobs"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(lp["top_logprobs"].as_array().into_iter().flatten())
    {
        let t = t.as_f64().expect("logprob");
        assert!(t <= 0.0, "a log-probability above 0: {t}");
        // Greedy: the chosen token is the most likely one.
        let best = top
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
            .filter_map(Value::as_f64)
            .fold(f64::MIN, f64::max);
        assert!((best - t).abs() < 1e-4, "greedy chose {t}, best was {best}");
    }

    // 32 concurrent streams over 4 slots: every answer complete, its own,
    // and equal to what the prompt gives alone.
    let alone: Vec<String> = PROMPTS
        .iter()
        .map(|p| run_answer(&model, p, 10, false))
        .collect();
    let answers: Vec<(usize, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let p = i % PROMPTS.len();
                s.spawn(move || {
                    let r = post(
                        addr,
                        "/v1/chat/completions",
                        &chat_body(PROMPTS[p], 10, true),
                    );
                    assert_eq!(r.status, 200, "{}", r.body);
                    let (content, finish, _) = read_stream(&r.events());
                    (p, content, finish)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    for (p, content, finish) in answers {
        assert_eq!(content, alone[p], "prompt {p} under load");
        assert!(finish == "length" || finish == "stop", "{finish}");
    }

    // Tokenize, detokenize, template: as the CLI does.
    let r = post(
        addr,
        "/tokenize",
        &json!({ "content": "Hello world" }).to_string(),
    )
    .json();
    let ids: Vec<u64> = r["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let cli = mllm(&["tokenize", "--model", &model, "--text", "Hello world"]);
    let want_ids: Vec<u64> = text(&cli.stdout)
        .trim()
        .split(',')
        .filter_map(|t| t.parse().ok())
        .collect();
    assert_eq!(ids, want_ids, "server and CLI tokenize differently");
    // The `text` spelling too; a body without either names the field.
    let r = post(
        addr,
        "/tokenize",
        &json!({ "text": "Hello world" }).to_string(),
    );
    assert_eq!(r.json()["tokens"], json!(ids), "{}", r.body);
    let r = post(addr, "/tokenize", r#"{"add_special": true}"#);
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(msg.contains("missing field `content`"), "{msg}");
    assert!(!msg.contains("not valid JSON"), "{msg}");
    // A wrong method is a 405 in OpenAI's error shape.
    let r = get(addr, "/v1/chat/completions");
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], 405, "{}", r.body);
    let back = post(addr, "/detokenize", &json!({ "tokens": ids }).to_string()).json();
    assert_eq!(back["content"], "Hello world");
    let tpl = post(
        addr,
        "/apply-template",
        &json!({ "messages": [{ "role": "user", "content": "Hi" }] }).to_string(),
    )
    .json();
    assert!(
        tpl["prompt"]
            .as_str()
            .is_some_and(|p| p.contains("Hi") && p.contains("<|im_start|>assistant")),
        "{tpl}"
    );

    // Errors are OpenAI-shaped, with the right status.
    let bad = |body: &str, path: &str, status: u16, needle: &str| {
        let r = post(addr, path, body);
        assert_eq!(r.status, status, "{body} -> {}", r.body);
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains(needle), "{body}: {msg}");
    };
    bad("{not json", "/v1/chat/completions", 400, "not valid JSON");
    bad(
        r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"many"}"#,
        "/v1/chat/completions",
        400,
        "max_tokens",
    );
    bad(r#"{"messages":[]}"#, "/v1/chat/completions", 400, "empty");
    bad(
        r#"{"messages":[{"role":"user","content":"x"}],"n":3}"#,
        "/v1/chat/completions",
        400,
        "n = 1",
    );
    // With one model loaded, any name is served by it (as llama-server).
    let r = post(
        addr,
        "/v1/chat/completions",
        r#"{"model":"gpt-4","messages":[{"role":"user","content":"x"}],"max_tokens":1}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["model"], name.as_str());
    bad(
        r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}"#,
        "/v1/chat/completions",
        400,
        "image",
    );
    bad(
        r#"{"prompt":["a","b"]}"#,
        "/v1/completions",
        400,
        "one per request",
    );
    bad(
        r#"{"prompt":[999999999]}"#,
        "/v1/completions",
        400,
        "out of range",
    );
    let long = "word ".repeat(9000);
    bad(
        &json!({ "prompt": long }).to_string(),
        "/v1/completions",
        400,
        "context is 4096 tokens",
    );
    assert_eq!(get(addr, "/v2/nothing").status, 404);

    let m = get(addr, "/metrics");
    assert_eq!(m.status, 200);
    for family in [
        "mllm_requests_total",
        "mllm_generated_tokens_total",
        "mllm_queue_depth",
        "mllm_decode_tokens_per_second",
    ] {
        assert!(m.body.contains(family), "{family} missing:\n{}", m.body);
    }
    let finished: u64 = m
        .body
        .lines()
        .find(|l| l.starts_with("mllm_requests_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(finished >= 35, "requests_total {finished}");
}

#[test]
fn serve_refuses_bad_keys_and_overload_cancels_leavers_and_drains_on_sigterm() {
    let model = smollm2();
    let mut srv = Server::start_with_env(
        &[
            "--model",
            &format!("small={model}"),
            "--parallel",
            "1",
            "--queue",
            "1",
            "--api-key",
            "sekret",
            "-t",
            "2",
        ],
        &[("MLLM_SERVE_FAULT", "BOOM")],
    );
    let addr = srv.addr.clone();
    let addr = addr.as_str();
    let auth = [("Authorization", "Bearer sekret")];
    let body = |n: usize| {
        json!({ "model": "small", "messages": [{ "role": "user", "content": "Tell me a long story." }], "temperature": 0, "max_tokens": n, "stream": true }).to_string()
    };

    // Keys: /health and the model list are open (as llama-server's), the
    // rest wants the key.
    assert_eq!(get(addr, "/health").status, 200);
    assert_eq!(get(addr, "/v1/models").json()["data"][0]["id"], "small");
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    assert_eq!(
        request(
            addr,
            "GET",
            "/metrics",
            &[("Authorization", "Bearer wrong")],
            ""
        )
        .status,
        401
    );
    let r = request(addr, "GET", "/metrics", &auth, "");
    assert_eq!(r.status, 200, "{}", r.body);

    // One slot and one place in the queue: of five requests at once, some
    // are turned away with 503 and Retry-After, and the others complete.
    let statuses: Vec<(u16, Option<String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..5)
            .map(|_| {
                let b = body(48);
                s.spawn(move || {
                    let r = request(addr, "POST", "/v1/chat/completions", &auth, &b);
                    if r.status == 200 {
                        assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
                    }
                    (r.status, r.header("retry-after").map(str::to_string))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("client")).collect()
    });
    let refused = statuses.iter().filter(|(s, _)| *s == 503).count();
    let served = statuses.iter().filter(|(s, _)| *s == 200).count();
    assert!(
        refused >= 1 && served >= 1 && refused + served == 5,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .filter(|(s, _)| *s == 503)
            .all(|(_, ra)| ra.is_some()),
        "{statuses:?}"
    );

    // A client that leaves frees the only slot at the next token: the next
    // request is answered, and the metrics count the cancellation.
    post_and_leave(addr, "/v1/chat/completions", &auth, &body(4000));
    let t0 = std::time::Instant::now();
    let r = request(addr, "POST", "/v1/chat/completions", &auth, &body(4));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        t0.elapsed().as_secs() < 60,
        "the abandoned request kept its slot"
    );
    let m = request(addr, "GET", "/metrics", &auth, "").body;
    assert!(
        m.lines().any(
            |l| l.starts_with("mllm_requests_cancelled_total{model=\"small\"} ")
                && !l.ends_with(" 0")
        ),
        "{m}"
    );

    // A panic inside the engine (injected) fails that request only: a 500
    // in OpenAI's shape, and the slot serves the next request.
    let boom = json!({ "model": "small", "messages": [{ "role": "user", "content": "BOOM" }], "max_tokens": 4 });
    let r = request(
        addr,
        "POST",
        "/v1/chat/completions",
        &auth,
        &boom.to_string(),
    );
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("MLLM_SERVE_FAULT"),
        "{}",
        r.body
    );
    let r = request(addr, "POST", "/v1/chat/completions", &auth, &body(4));
    assert_eq!(r.status, 200, "after the panic: {}", r.body);

    // SIGTERM: a running stream finishes, then the server exits cleanly.
    let stream = std::thread::spawn({
        let addr = addr.to_string();
        let b = body(24);
        move || {
            request(
                &addr,
                "POST",
                "/v1/chat/completions",
                &[("Authorization", "Bearer sekret")],
                &b,
            )
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(700));
    let status = srv.terminate();
    let r = stream.join().expect("stream thread");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.events().last().map(String::as_str),
        Some("[DONE]"),
        "the stream was cut: {}",
        r.body
    );
    assert!(status.success(), "exit status {status}");
}
