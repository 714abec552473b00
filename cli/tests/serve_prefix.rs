//! `mllm serve` shares prompt prefixes between slots (issue #31): a
//! request whose prompt starts like one another slot has computed (a long
//! system prompt) copies that slot's whole prompt chunks instead of
//! computing them, and its answer is still `mllm run --temp 0`'s, bit for
//! bit: the chunks copied were computed exactly as its own would be (64
//! shuffled, staggered requests over 4 slots with two system prompts; a
//! prefix cache that outlives the slots, `--cache-ram`).

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
    // 64 requests over 4 slots in a shuffled order, sent at staggered
    // moments, two system prompts interleaved (so slots, the prefix cache
    // and fresh prompts all serve some): every answer is the one its prompt
    // gets alone, whatever was shared or ran beside it.
    let buses = other_system_prompt();
    let bus_questions = [
        "How often does route 5 leave?",
        "Which route stops at most villages?",
    ];
    let bus_want: Vec<String> = bus_questions
        .iter()
        .map(|q| run_answer(&model, &buses, q, 24))
        .collect();
    let mut cases: Vec<(&str, &str, &str)> = vec![];
    for (q, w) in questions.iter().zip(&want) {
        cases.push((sys.as_str(), q, w));
    }
    for (q, w) in bus_questions.iter().zip(&bus_want) {
        cases.push((buses.as_str(), q, w));
    }
    // A seeded shuffle (an LCG) of 64 picks.
    let mut state = 0x2545_f491_u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let order: Vec<(usize, u64)> = (0..64)
        .map(|_| (next() % cases.len(), (next() % 40) as u64))
        .collect();
    let shared_before = metric(addr, "mllm_prompt_tokens_shared_total");
    let got: Vec<(usize, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = order
            .iter()
            .enumerate()
            .map(|(i, &(k, delay))| {
                let (system, q, _) = cases[k];
                let b = body(system, q, 24);
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(delay * (i as u64 % 8)));
                    (k, post(addr, "/v1/chat/completions", &b).json())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let (k, v) = h.join().expect("client");
                let text = v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                (k, text)
            })
            .collect()
    });
    for (i, (k, text)) in got.iter().enumerate() {
        assert_eq!(text, cases[*k].2, "request {i}: {}", cases[*k].1);
    }
    let shared = metric(addr, "mllm_prompt_tokens_shared_total") - shared_before;
    eprintln!("64 requests: {shared} prompt tokens shared");
    assert!(
        shared >= 48 * 256,
        "{shared} prompt tokens shared: prompts were computed again"
    );
}

/// Another system prompt of several hundred tokens.
fn other_system_prompt() -> String {
    let mut s = String::from("You answer questions about the Hartley bus timetable. ");
    for i in 1..=24 {
        s.push_str(&format!(
            "Route {i} leaves the station every {} minutes from {} o'clock and stops at {} villages. ",
            i % 4 * 5 + 10,
            i % 6 + 5,
            i % 9 + 3
        ));
    }
    s
}

fn cached_tokens(v: &serde_json::Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

/// With one slot, a conversation whose slot another prompt took comes back
/// to its prefix in the prefix cache (`--cache-ram`) instead of computing it
/// again, with the answer `mllm run` gives alone; a cache too small for one
/// prompt keeps nothing, and the same prompt is computed again (but for the
/// chat template's opening tokens, which the slot holds).
#[test]
fn prefixes_outlive_their_slot_in_the_prefix_cache() {
    let model = smollm2();
    let (library, buses) = (system_prompt(), other_system_prompt());
    let (q1, q2) = ("What does rule 4 say?", "How often does route 2 leave?");
    let want_library = run_answer(&model, &library, q1, 16);
    let want_buses = run_answer(&model, &buses, q2, 16);

    let srv = Server::start(&[
        "--model",
        &model,
        "--parallel",
        "1",
        "-t",
        "2",
        "--cache-ram",
        "256",
    ]);
    let addr = srv.addr.as_str();
    let ask = |sys: &str, q: &str| {
        let r = post(addr, "/v1/chat/completions", &body(sys, q, 16));
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    let content = |v: &serde_json::Value| v["choices"][0]["message"]["content"].clone();
    // The library's prompt, then the buses' in the same (only) slot.
    assert_eq!(content(&ask(&library, q1)), want_library.as_str());
    // Only the chat template's opening tokens are common to the two
    // prompts (their system prompts differ from the first word); the slot
    // keeps them (any computed prefix is exact on the CPU).
    let template = cached_tokens(&ask(&buses, q2));
    assert!(template < 8, "{template} tokens shared");
    assert_eq!(
        metric(addr, "mllm_prompt_tokens_from_prefix_cache_total"),
        0
    );
    assert!(metric(addr, "mllm_prefix_cache_entries") >= 1);
    assert!(metric(addr, "mllm_prefix_cache_bytes") > 0);
    // Back to the library: its chunks come from the prefix cache.
    let v = ask(&library, q1);
    assert_eq!(content(&v), want_library.as_str());
    let from_cache = metric(addr, "mllm_prompt_tokens_from_prefix_cache_total");
    assert!(
        from_cache >= 256,
        "{from_cache} tokens from the prefix cache"
    );
    assert_eq!(cached_tokens(&v), from_cache);
    // And the buses' prompt, kept when the library's took the slot back.
    let v = ask(&buses, q2);
    assert_eq!(content(&v), want_buses.as_str());
    assert!(cached_tokens(&v) >= 256, "{}", cached_tokens(&v));
    drop(srv);

    // 1 MiB holds neither prompt (this model's cache takes ~44 KiB a token),
    // only the first page (16 positions, ~704 KiB) of one: a prompt takes at
    // most that from the cache, and its answer is the same.
    let srv = Server::start(&[
        "--model",
        &model,
        "--parallel",
        "1",
        "-t",
        "2",
        "--cache-ram",
        "1",
    ]);
    let addr = srv.addr.as_str();
    for (sys, q, want) in [
        (&library, q1, &want_library),
        (&buses, q2, &want_buses),
        (&library, q1, &want_library),
    ] {
        let r = post(addr, "/v1/chat/completions", &body(sys, q, 16));
        let v = r.json();
        assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
        assert!(cached_tokens(&v) <= 16, "{}", cached_tokens(&v));
        assert!(metric(addr, "mllm_prefix_cache_bytes") <= 1 << 20);
        assert!(metric(addr, "mllm_prefix_cache_pages") <= 1);
    }
    assert!(metric(addr, "mllm_prompt_tokens_from_prefix_cache_total") <= 16);
}
