//! `--spec-type` on run and bench (issue #27): answers of the real
//! SmolLM2-135M-Instruct with n-gram lookup and with a draft model are the
//! plain answers, greedy and sampled, and quoting prompts get proposals
//! accepted; a recurrent model (Qwen3.5) speculates too; bench reports
//! acceptance beside plain decode; unusable
//! settings are refused with what to do.

mod common;

use common::{mllm, root, smollm2, text};

fn prompt(name: &str) -> String {
    root()
        .join("bench/spec_prompts")
        .join(name)
        .display()
        .to_string()
}

/// stdout and stderr of a successful `mllm run`.
fn run_ok(args: &[&str]) -> (String, String) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let out = mllm(&all);
    let err = text(&out.stderr);
    assert!(out.status.success(), "mllm {all:?} failed:\n{err}");
    (text(&out.stdout), err)
}

/// `accepted` of the `speculation: ...` line.
fn accepted(stderr: &str) -> usize {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("speculation:"))
        .unwrap_or_else(|| panic!("no speculation line in:\n{stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "accepted")
        .expect("accepted");
    words[at - 1].parse().expect("a count")
}

#[test]
fn ngram_and_draft_answers_are_the_plain_answers_on_smollm2() {
    let model = smollm2();
    let file = prompt("type_hints.txt");
    for sampling in [&["--temp", "0"][..], &["--temp", "0.8", "-s", "11"][..]] {
        let mut base = vec!["-m", &model, "-f", &file, "-n", "64", "-t", "2"];
        base.extend_from_slice(sampling);
        let (plain, _) = run_ok(&base);
        assert!(!plain.trim().is_empty(), "an empty answer");
        let mut ngram = base.clone();
        ngram.extend_from_slice(&["--spec-type", "ngram"]);
        let (got, err) = run_ok(&ngram);
        assert_eq!(got, plain, "{sampling:?}: ngram changed the answer\n{err}");
        if sampling[1] == "0" {
            // The answer quotes the function: lookups must land.
            assert!(accepted(&err) > 0, "no proposal accepted:\n{err}");
        }
        // The model as its own draft (same tokenizer): every greedy
        // proposal the target would make.
        let mut draft = base.clone();
        draft.extend_from_slice(&["--model-draft", &model, "--draft-p-min", "0"]);
        let (got, err) = run_ok(&draft);
        assert_eq!(
            got, plain,
            "{sampling:?}: the draft changed the answer\n{err}"
        );
        assert!(accepted(&err) > 0, "{err}");
    }
}

/// A recurrent model (Qwen3.5's Gated DeltaNet layers): the target and a
/// draft of the same model go back to a checkpoint of their states where
/// proposals are rejected (sampling rejects some of the draft's greedy
/// ones), and the answers are the plain ones; so are they with the
/// model's own MTP head (`--spec-type mtp`).
#[test]
fn a_recurrent_model_speculates_with_the_plain_answers() {
    let model = root().join("tests/fixtures/qwen3_5_vl/dense");
    let model = model.to_str().expect("utf-8");
    let words = "the cat sat on the mat and the cat sat on the mat and the cat";
    for sampling in [&["--temp", "0"][..], &["--temp", "0.9", "-s", "5"][..]] {
        let mut base = vec!["-m", model, "--raw", "-p", words, "-n", "40", "-t", "2"];
        base.extend_from_slice(sampling);
        let (plain, _) = run_ok(&base);
        assert!(!plain.trim().is_empty(), "an empty answer");
        for extra in [
            &["--spec-type", "ngram"][..],
            &["--model-draft", model, "--draft-p-min", "0"][..],
            // The fixture's random MTP head (tests/fixtures/make_qwen3_5_mtp_fixture.py).
            &["--spec-type", "mtp"][..],
        ] {
            let mut args = base.clone();
            args.extend_from_slice(extra);
            let (got, err) = run_ok(&args);
            assert_eq!(
                got, plain,
                "{sampling:?} {extra:?} changed the answer\n{err}"
            );
            assert!(err.contains("speculation:"), "{err}");
        }
    }
}

/// `serve` speculates on a recurrent model, with a draft and with the
/// model's MTP head: slots take their states back where proposals are
/// rejected, and completions equal `mllm run --raw`, greedy and sampled,
/// 6 at once over 3 slots.
#[test]
fn serve_speculates_on_a_recurrent_model() {
    let model = root().join("tests/fixtures/qwen3_5_vl/dense");
    let model = model.to_str().expect("utf-8");
    let prompts = [
        "the cat sat on the mat and the cat sat on the mat",
        "one two three four five six seven",
        "a b c d e f g a b c d e f g a b c",
    ];
    let cases: Vec<(&str, f64, u64)> = (0..6)
        .map(|i| (prompts[i % 3], if i < 3 { 0.0 } else { 0.9 }, i as u64))
        .collect();
    let want: Vec<String> = cases
        .iter()
        .map(|(p, temp, seed)| {
            let (t, s) = (temp.to_string(), seed.to_string());
            let args = [
                "-m", model, "--raw", "-p", p, "-n", "24", "-t", "2", "--temp", &t, "-s", &s,
            ];
            let (out, _) = run_ok(&args);
            out.strip_suffix('\n').unwrap_or(&out).to_string()
        })
        .collect();
    for spec in [
        &["--model-draft", model, "--draft-p-min", "0"][..],
        &["--spec-type", "mtp"][..],
    ] {
        serve_equals_run(model, &cases, &want, spec);
    }
}

/// Completions of `cases` (prompt, temperature, seed) from a server of
/// `model` with 3 slots speculating as `spec` says equal `want`, 6 at once.
fn serve_equals_run(model: &str, cases: &[(&str, f64, u64)], want: &[String], spec: &[&str]) {
    use common::http::{get, post, Server};
    let mut args = vec![
        "--model",
        model,
        "--parallel",
        "3",
        "-t",
        "2",
        "--draft-max",
        "4",
    ];
    args.extend_from_slice(spec);
    let srv = Server::start(&args);
    assert!(srv.log.contains("decodes speculatively"), "{}", srv.log);
    let addr = srv.addr.as_str();
    let got: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(p, temp, seed)| {
                let b = serde_json::json!({
                    "prompt": p, "temperature": temp, "seed": seed, "max_tokens": 24,
                })
                .to_string();
                s.spawn(move || {
                    let r = post(addr, "/v1/completions", &b);
                    assert_eq!(r.status, 200, "{}", r.body);
                    r.json()["choices"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    for ((got, want), case) in got.iter().zip(want).zip(cases) {
        assert_eq!(got, want, "{spec:?} {case:?}");
    }
    let m = get(addr, "/metrics").body;
    let proposed = metric(&m, "mllm_speculative_proposed_tokens_total");
    let accepted = metric(&m, "mllm_speculative_accepted_tokens_total");
    if spec.contains(&"mtp") {
        // The fixture's head is random: it proposes, the model rejects.
        assert!(proposed > 0, "{spec:?}: nothing proposed");
    } else {
        // Sampled answers reject some of the draft's greedy proposals.
        assert!(
            accepted > 0 && accepted < proposed,
            "{proposed} proposed, {accepted} accepted"
        );
    }
}

/// `mllm bench` timing speculation on `file` for `n` tokens, plus `extra`.
fn bench(model: &str, file: &str, n: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "bench",
        "-m",
        model,
        "-p",
        "0",
        "-n",
        n,
        "-r",
        "1",
        "-t",
        "2",
        "--spec-type",
        "ngram",
        "--prompt-file",
        file,
    ];
    args.extend_from_slice(extra);
    let out = mllm(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

#[test]
fn bench_reports_acceptance_beside_plain_decode() {
    let model = smollm2();
    let file = prompt("rewrite.txt");
    let (stdout, _) = bench(&model, &file, "24", &[]);
    for want in [
        "tg24 plain",
        "tg24 ngram",
        "speculation (ngram",
        "acceptance",
        "tokens per step",
    ] {
        assert!(stdout.contains(want), "no `{want}` in:\n{stdout}");
    }
    let (stdout, _) = bench(&model, &file, "8", &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let r = &v["speculative"]["results"][0];
    assert_eq!(v["speculative"]["spec_type"], "ngram");
    assert!(
        r["proposed"].as_u64().is_some() && r["tokens_per_step"].as_f64().is_some(),
        "{v}"
    );
    // Lookup runs no model of its own.
    assert_eq!(r["draft_steps"].as_u64(), Some(0), "{v}");
}

#[test]
fn unusable_settings_are_refused_with_what_to_do() {
    let model = smollm2();
    let other = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let other = other.to_str().expect("utf-8");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "-m", &model, "-p", "hi", "--spec-type", "mtp"],
            "has no `mtp_forward`",
        ),
        (
            vec!["run", "-m", &model, "-p", "hi", "--spec-type", "eagle"],
            "use ngram, draft or mtp",
        ),
        (
            vec![
                "run",
                "-m",
                &model,
                "-p",
                "hi",
                "--spec-type",
                "ngram",
                "--draft-max",
                "0",
            ],
            "--draft-max 0 is out of range",
        ),
        (
            vec!["run", "-m", &model, "-p", "hi", "--spec-type", "draft"],
            "needs --model-draft",
        ),
        (
            vec!["run", "-m", &model, "-p", "hi", "--model-draft", other],
            "must share the model's tokenizer",
        ),
        (
            vec!["bench", "-m", &model, "--spec-type", "ngram"],
            "--prompt-file",
        ),
    ];
    for (args, want) in cases {
        let out = mllm(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: no `{want}` in:\n{err}");
    }
}

/// A counter of `/metrics` (the first model's).
fn metric(body: &str, name: &str) -> u64 {
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
}

/// `serve --spec-type`: every slot speculates, all slots' verification
/// rows run in one batched step, and answers equal `mllm run` alone,
/// greedy and sampled, one at a time and 8 at once over 4 slots;
/// `/metrics` counts what was proposed and kept.
#[test]
fn serve_speculates_and_answers_as_run_does_alone_and_under_load() {
    use common::http::{get, post, Server};
    let model = smollm2();
    let quoting: Vec<String> = ["rewrite.txt", "type_hints.txt", "extract.txt"]
        .iter()
        .map(|f| std::fs::read_to_string(prompt(f)).expect("prompt file"))
        .map(|t| t.trim().to_string())
        .collect();
    let mut prompts: Vec<String> = quoting.clone();
    prompts.extend(
        [
            "Repeat this line three times: red, green, blue, yellow.",
            "Count from 1 to 20, separated by commas.",
            "What is the capital of France?",
            "Write the alphabet in capital letters.",
            "Say hello in Spanish.",
        ]
        .map(String::from),
    );
    let n = 32;
    let ns = n.to_string();
    let run = |p: &str, sampling: &[&str]| {
        let mut args = vec!["--model", &model, "--prompt", p, "-n", &ns, "-t", "2"];
        args.extend_from_slice(sampling);
        let (out, _) = run_ok(&args);
        out.strip_suffix('\n').unwrap_or(&out).to_string()
    };
    let greedy: Vec<String> = prompts.iter().map(|p| run(p, &["--temp", "0"])).collect();
    let sampled = run(&prompts[1], &["--temp", "0.8", "-s", "11"]);
    let body = |p: &str, temp: f64, seed: u64| {
        serde_json::json!({
            "messages": [{ "role": "user", "content": p }],
            "temperature": temp, "seed": seed, "max_tokens": n,
        })
        .to_string()
    };
    let answer = |addr: &str, b: &str| {
        let r = post(addr, "/v1/chat/completions", b);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    for extra in [
        &["--spec-type", "ngram"][..],
        &[
            "--model-draft",
            &model,
            "--draft-p-min",
            "0",
            "--draft-max",
            "6",
        ][..],
    ] {
        let mut args = vec!["--model", &model, "--parallel", "4", "-t", "2"];
        args.extend_from_slice(extra);
        let srv = Server::start(&args);
        assert!(srv.log.contains("decodes speculatively"), "{}", srv.log);
        let addr = srv.addr.as_str();
        // Alone (the quoting prompts).
        for (p, want) in prompts.iter().zip(&greedy).take(quoting.len()) {
            assert_eq!(
                &answer(addr, &body(p, 0.0, 0)),
                want,
                "{extra:?} alone: {p}"
            );
        }
        let alone = metric(
            &get(addr, "/metrics").body,
            "mllm_speculative_accepted_tokens_total",
        );
        assert!(alone > 0, "{extra:?}: nothing accepted alone");
        // 8 at once over 4 slots (the sampled one among them).
        let got: Vec<(usize, String)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let p = &prompts[i % prompts.len()];
                    let b = if i == 1 {
                        body(p, 0.8, 11)
                    } else {
                        body(p, 0.0, 0)
                    };
                    s.spawn(move || (i, answer(addr, &b)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("client"))
                .collect()
        });
        for (i, text) in got {
            let want = if i == 1 {
                &sampled
            } else {
                &greedy[i % prompts.len()]
            };
            assert_eq!(&text, want, "{extra:?} under load, request {i}");
        }
        let m = get(addr, "/metrics").body;
        let proposed = metric(&m, "mllm_speculative_proposed_tokens_total");
        let accepted = metric(&m, "mllm_speculative_accepted_tokens_total");
        let steps = metric(&m, "mllm_speculative_steps_total");
        assert!(
            accepted > alone && accepted <= proposed && steps > 0,
            "{extra:?}: {steps} steps, {proposed} proposed, {accepted} accepted"
        );
        // A draft's forward passes: at most one per step for what it
        // lacks and one per proposed token; lookup runs none.
        let draft = metric(&m, "mllm_speculative_draft_steps_total");
        if extra[0] == "--model-draft" {
            assert!(
                draft > 0 && draft <= steps + proposed,
                "{extra:?}: {draft} draft steps"
            );
        } else {
            assert_eq!(draft, 0, "{extra:?}");
        }
    }
}
