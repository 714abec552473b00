//! `mllm serve` shares prompt prefixes between slots (issue #31): a
//! request whose prompt starts like one another slot has computed (a long
//! system prompt) copies that slot's whole prompt chunks instead of
//! computing them, and its answer is still `mllm run --temp 0`'s, bit for
//! bit: the chunks copied were computed exactly as its own would be.

mod common;

use std::time::{Duration, Instant};

use common::http::{get, post, Server};
use common::{mllm, smollm2, text};
use serde_json::json;

/// A system prompt of several hundred tokens.
fn system_prompt() -> String {
    let mut s = String::from("You are the help desk of the Milton lending library. ");
    for i in 1..=24 {
        s.push_str(&format!(
            "Rule {i}: members may borrow up to {} books for {} days, and late returns cost {} pence a day. ",
            i % 7 + 2,
            i * 3 + 7,
            i % 5 + 10
        ));
    }
    s
}

fn run_answer(model: &str, system: &str, prompt: &str, n: usize) -> String {
    let n = n.to_string();
    let out = mllm(&[
        "run", "--model", model, "--system", system, "--prompt", prompt, "--temp", "0", "-n", &n,
        "-t", "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

fn body(system: &str, prompt: &str, n: usize) -> String {
    json!({
        "messages": [
            { "role": "system", "content": system },
            { "role": "user", "content": prompt },
        ],
        "temperature": 0, "max_tokens": n, "ignore_eos": n > 100,
    })
    .to_string()
}

fn metric(addr: &str, name: &str) -> u64 {
    let m = get(addr, "/metrics").body;
    m.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{m}"))
}

#[test]
fn a_prompt_prefix_computed_in_one_slot_is_shared_by_another_without_changing_answers() {
    let model = smollm2();
    let sys = system_prompt();
    let srv = Server::start(&["--model", &model, "--parallel", "4", "-t", "2"]);
    let addr = srv.addr.as_str();
    let questions = [
        "How many books may I borrow under rule 3?",
        "What does rule 10 say?",
        "Which rule allows the longest loan?",
        "Summarise rule 7 in five words.",
    ];
    let want: Vec<String> = questions
        .iter()
        .map(|q| run_answer(&model, &sys, q, 24))
        .collect();
    std::thread::scope(|s| {
        // A long answer keeps the first slot busy with the system prompt
        // in its cache.
        let long = s.spawn(|| {
            post(
                addr,
                "/v1/chat/completions",
                &body(&sys, "Recite every rule.", 400),
            )
        });
        let until = Instant::now() + Duration::from_secs(60);
        while metric(addr, "mllm_prompt_tokens_total") == 0 {
            assert!(Instant::now() < until, "the first prompt never finished");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Now the other slot takes a question with the same system prompt.
        let r = post(addr, "/v1/chat/completions", &body(&sys, questions[0], 24));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["choices"][0]["message"]["content"], want[0].as_str());
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        assert!(
            cached >= 256 && cached < prompt_tokens,
            "{cached} of {prompt_tokens} prompt tokens shared"
        );
        assert!(
            metric(addr, "mllm_prompt_tokens_shared_total") >= cached,
            "the shared tokens are not counted"
        );
        let r = long.join().expect("client");
        assert_eq!(r.status, 200, "{}", r.body);
    });
    // Afterwards, whichever slot takes it: the same answers.
    for (q, w) in questions.iter().zip(&want).take(2) {
        let v = post(addr, "/v1/chat/completions", &body(&sys, q, 24)).json();
        assert_eq!(v["choices"][0]["message"]["content"], w.as_str(), "{q}");
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        assert!(cached >= 256, "{q}: {cached} cached");
    }
    // 16 at once over 4 slots, questions interleaved: every answer is the
    // one its prompt gets alone, whatever was shared or ran beside it.
    let got: Vec<(usize, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let q = questions[(i * 7) % questions.len()];
                let b = body(&sys, q, 24);
                s.spawn(move || (i, post(addr, "/v1/chat/completions", &b).json()))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let (i, v) = h.join().expect("client");
                let text = v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                (i, text)
            })
            .collect()
    });
    for (i, text) in got {
        let k = (i * 7) % questions.len();
        assert_eq!(text, want[k], "request {i}: {}", questions[k]);
    }
}
