//! End-to-end tests of the `mllm` binary: the CLI contract other work
//! depends on, and clear errors (never a panic) on bad input.

mod common;

use std::process::Command;

use common::{mllm, root, smollm2, text};

fn reference_json(case: &str) -> serde_json::Value {
    let p = root()
        .join("tests/fixtures/qwen3")
        .join(case)
        .join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("reference.json")).expect("json")
}

fn ids(v: &serde_json::Value) -> String {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn exec_prints_greedy_ids_and_writes_logits() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_path = dir.path().join("logits.safetensors");
    let case = "untied_bf16_ropeparams";
    let r = reference_json(case);
    let prompt = ids(&r["prompt_ids"]);
    let model = format!("tests/fixtures/qwen3/{case}");
    let out = mllm(&[
        "exec",
        "models/qwen3.mdl",
        "--model",
        &model,
        "--input-ids",
        &prompt,
        "--max-new-tokens",
        "10",
        "--logits-out",
        out_path.to_str().expect("utf-8"),
        "--threads",
        "2",
    ]);
    assert!(out.status.success(), "exec failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), ids(&r["greedy_ids"]));
    let bytes = std::fs::read(&out_path).expect("logits file");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    assert_eq!(st.names(), vec!["logits"]);
    let t = st.tensor("logits").expect("logits");
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    let n = r["prompt_ids"].as_array().expect("ids").len();
    assert_eq!(t.shape(), [n, 131]);
}

/// `mllm exec` with `--pixel-values`: the reference file of a Qwen3-VL
/// fixture holds `pixel_values` and `image_grid_thw` as the HF processor
/// outputs them (and more, which exec ignores).
#[test]
fn exec_runs_the_builtin_script_from_any_folder() {
    let dir = tempfile::tempdir().expect("tmp");
    let model = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let out = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args([
            "exec",
            "qwen3",
            "--model",
            model.to_str().expect("utf-8"),
            "--input-ids",
            "1,2,3",
            "--max-new-tokens",
            "3",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim().split(',').count(), 3);
}

#[test]
fn check_accepts_shipped_scripts_and_reports_all_errors() {
    let out = mllm(&[
        "check",
        "models/qwen3.mdl",
        "models/qwen3_vl.mdl",
        "stdlib/nn.mdl",
        "stdlib/vision.mdl",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.mdl");
    std::fs::write(&bad, "config C { n: int }\nmodule M(c: C) {\n  fn forward(x) {\n    return foo(x) + c.m\n  }\n}\n").expect("write");
    let out = mllm(&["check", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("mdl::check::unknown_name"), "{err}");
    assert!(err.contains("mdl::check::unknown_field"), "{err}");
    assert!(err.contains("2 errors"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_inputs_get_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "exec",
                "models/qwen3.mdl",
                "--model",
                "/nonexistent/dir",
                "--input-ids",
                "1",
            ],
            "/nonexistent/dir does not exist",
        ),
        (
            &[
                "exec",
                "models/qwen3.mdl",
                "--model",
                "tests/fixtures/qwen3/gqa_tied_f32",
                "--input-ids",
                "1,x",
            ],
            "not a token id",
        ),
        (
            &[
                "exec",
                "models/qwen3.mdl",
                "--model",
                "tests/fixtures/qwen3/gqa_tied_f32",
                "--input-ids",
                "1,100000",
            ],
            "outside the vocabulary",
        ),
        (
            &[
                "exec",
                "nosuchmodel",
                "--model",
                "tests/fixtures/qwen3/gqa_tied_f32",
                "--input-ids",
                "1",
            ],
            "not a built-in model script",
        ),
        (&["check", "/nonexistent.mdl"], "does not exist"),
    ];
    for (args, want) in cases {
        let out = mllm(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in:\n{err}");
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
    }
}

/// With `--dequantize` the run is transformers' arithmetic (its greedy answer
/// is "The capital of France is Paris."). By default the quantized kernels
/// round activations to 8 bits, as llama.cpp does, and on this prompt the
/// first token has a top-2 margin of only 0.08: they answer differently (and
/// so does llama.cpp), so the default run is checked for a streamed answer
/// and its summary only.
#[test]
fn run_answers_a_question_with_the_real_model() {
    let model = smollm2();
    let out = mllm(&[
        "run",
        "--model",
        &model,
        "--prompt",
        "What is the capital of France?",
        "--temp",
        "0",
        "-n",
        "8",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).trim().is_empty(), "no answer");
    let out = mllm(&[
        "run",
        "--model",
        &model,
        "--dequantize",
        "--prompt",
        "What is the capital of France?",
        "--temp",
        "0",
        "-n",
        "32",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answer = text(&out.stdout);
    assert!(answer.contains("Paris"), "answer: {answer}");
    let err = text(&out.stderr);
    assert!(
        err.contains("tok/s") && err.contains("load"),
        "summary line: {err}"
    );
}

#[test]
fn same_seed_same_text() {
    let model = smollm2();
    let args = [
        "run",
        "--model",
        &model,
        "--prompt",
        "Tell me a story.",
        "--temp",
        "1.0",
        "--seed",
        "7",
        "-n",
        "12",
    ];
    let a = mllm(&args);
    let b = mllm(&args);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(text(&a.stdout), text(&b.stdout));
}

#[test]
fn tokenize_and_template_commands() {
    let model = smollm2();
    let out = mllm(&["tokenize", "--model", &model, "--text", "Hello world"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ids = text(&out.stdout).trim().to_string();
    let back = mllm(&["tokenize", "--model", &model, "--decode", &ids]);
    // The text, then one newline (a terminal's prompt starts on its own line).
    assert_eq!(text(&back.stdout), "Hello world\n");
    let dir = tempfile::tempdir().expect("tmp");
    let msgs = dir.path().join("m.json");
    std::fs::write(&msgs, r#"[{"role": "user", "content": "Hi"}]"#).expect("write");
    let out = mllm(&[
        "template",
        "--model",
        &model,
        "--messages",
        msgs.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).ends_with("<|im_start|>assistant\n"),
        "{}",
        text(&out.stdout)
    );
    let out = mllm(&[
        "template",
        "--model",
        &model,
        "--messages",
        msgs.to_str().expect("utf-8"),
        "--no-generation-prompt",
    ]);
    assert!(
        text(&out.stdout).ends_with("Hi<|im_end|>\n"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn chat_keeps_the_cache_between_turns() {
    use std::io::Write;
    let model = smollm2();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mllm"))
        // f32 numerics on the dequantized weights: the quantized kernels'
        // first token differs on this prompt (see run_answers_...).
        .args([
            "chat",
            "--model",
            &model,
            "--dequantize",
            "--temp",
            "0",
            "-n",
            "24",
        ])
        .current_dir(root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"What is the capital of France?\nAnd of Italy?\n/exit\n")
        .expect("write");
    let out = child.wait_with_output().expect("chat");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    // The second turn computes only its new tokens.
    let turns: Vec<&str> = err.lines().filter(|l| l.contains("computed")).collect();
    assert_eq!(turns.len(), 2, "{err}");
    let parse = |l: &str| -> (usize, usize) {
        let p: usize = l
            .split("prompt ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .expect("prompt count");
        let c: usize = l
            .split('(')
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .expect("computed count");
        (p, c)
    };
    let (p2, c2) = parse(turns[1]);
    assert!(
        c2 < p2 / 2,
        "second turn recomputed {c2} of {p2} tokens: {err}"
    );
    assert!(text(&out.stdout).contains("Paris"), "{}", text(&out.stdout));
}

#[test]
fn model_file_errors_are_clear() {
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("broken.gguf");
    let real = std::fs::read(smollm2()).expect("read");
    std::fs::write(&bad, &real[..4096]).expect("write");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "run".into(),
                "--model".into(),
                "/nonexistent.gguf".into(),
                "--prompt".into(),
                "hi".into(),
            ],
            "does not exist",
        ),
        (
            vec![
                "run".into(),
                "--model".into(),
                bad.display().to_string(),
                "--prompt".into(),
                "hi".into(),
            ],
            "broken.gguf",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = mllm(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn template_errors_and_missing_templates_are_explained() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
    }
    let msgs = dir.path().join("m.json");
    std::fs::write(&msgs, r#"[{"role": "user", "content": "Hi"}]"#).expect("write");
    let d = dir.path().to_str().expect("utf-8").to_string();
    let m = msgs.to_str().expect("utf-8").to_string();
    // No template at all.
    let out = mllm(&["template", "--model", &d, "--messages", &m]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no chat template"),
        "{}",
        text(&out.stderr)
    );
    // A template that raises, and one that does not compile.
    for (tpl, want) in [
        (
            "{{ raise_exception('only system and user roles') }}",
            "only system and user roles",
        ),
        ("{% for m in messages %}", "tokenizer_config.json"),
    ] {
        let cfg = serde_json::json!({ "chat_template": tpl });
        std::fs::write(dir.path().join("tokenizer_config.json"), cfg.to_string()).expect("write");
        let out = mllm(&["template", "--model", &d, "--messages", &m]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "expected `{want}` in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // run without a tokenizer says so.
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).expect("rm");
    let out = mllm(&["run", "--model", &d, "--prompt", "hi"]);
    assert!(
        text(&out.stderr).contains("has no tokenizer"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn unknown_architecture_is_explained() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    std::fs::copy(
        src.join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .expect("copy");
    let cfg = std::fs::read_to_string(src.join("config.json"))
        .expect("config")
        .replace("Qwen3ForCausalLM", "MysteryForCausalLM")
        .replace("\"qwen3\"", "\"mystery\"");
    std::fs::write(dir.path().join("config.json"), cfg).expect("write");
    let tok = root().join(".cache/npm/qwen3/tokenizer.json");
    assert!(tok.is_file(), "run `bash tests/fetch_assets.sh` first");
    std::fs::copy(tok, dir.path().join("tokenizer.json")).expect("copy tokenizer");
    let out = mllm(&[
        "run",
        "--model",
        dir.path().to_str().expect("utf-8"),
        "--prompt",
        "hi",
        "--raw",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MysteryForCausalLM") && err.contains("--script"),
        "{err}"
    );
}

#[test]
fn random_checkpoint_then_bench() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().join("m");
    let d = d.to_str().expect("utf-8");
    let out = mllm(&[
        "random-checkpoint",
        "--preset",
        "smollm2-135m",
        "--layers",
        "1",
        "--out",
        d,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = mllm(&[
        "bench", "--model", d, "-p", "8", "-n", "4", "-r", "2", "-t", "2", "--json", "-b", "3",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&text(&out.stdout)).expect("bench JSON");
    let results = j["results"].as_array().expect("results");
    let tests: Vec<&str> = results
        .iter()
        .map(|r| r["test"].as_str().expect("test"))
        .collect();
    assert_eq!(tests, ["pp8", "tg4", "tg4 x3"]);
    for r in results {
        assert!(r["avg_ts"].as_f64().expect("avg") > 0.0);
        assert_eq!(r["samples_ts"].as_array().expect("samples").len(), 2);
    }
    assert_eq!(j["weights_dtype"], "bf16");
    let out = mllm(&["random-checkpoint", "--preset", "nope", "--out", d]);
    assert!(
        text(&out.stderr).contains("unknown preset"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn convert_inspect_and_run_a_self_contained_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("smol.mllm");
    let out_s = out.to_str().expect("utf-8");
    let r = mllm(&["convert", &smollm2(), out_s, "-q", "q4_1", "--verify"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    for f in [
        out_s.to_string(),
        smollm2(),
        "tests/fixtures/qwen3/gqa_tied_f32".to_string(),
    ] {
        let r = mllm(&["inspect", &f]);
        assert!(r.status.success(), "inspect {f}: {}", text(&r.stderr));
        assert!(
            text(&r.stdout).contains("model.") || text(&r.stdout).contains("blk."),
            "inspect {f}: {}",
            text(&r.stdout)
        );
        let j = mllm(&["inspect", &f, "--json"]);
        let _: serde_json::Value =
            serde_json::from_str(&text(&j.stdout)).expect("inspect --json is JSON");
    }
    // The .mllm alone (moved away from everything else) answers.
    let alone = tempfile::tempdir().expect("tmp");
    let moved = alone.path().join("m.mllm");
    std::fs::rename(&out, &moved).expect("move");
    let r = mllm(&[
        "run",
        "--model",
        moved.to_str().expect("utf-8"),
        "--dequantize",
        "--prompt",
        "What is the capital of France?",
        "--temp",
        "0",
        "-n",
        "12",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(text(&r.stdout).contains("Paris"), "{}", text(&r.stdout));
    // Bad requests are explained.
    let r = mllm(&["convert", &smollm2(), out_s, "-q", "q3_zz"]);
    assert_eq!(r.status.code(), Some(1));
    assert!(text(&r.stderr).contains("q3_zz"), "{}", text(&r.stderr));
    let truncated = dir.path().join("t.mllm");
    let bytes = std::fs::read(&moved).expect("read");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let r = mllm(&[
        "run",
        "--model",
        truncated.to_str().expect("utf-8"),
        "--prompt",
        "hi",
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r.stderr));
    assert!(!text(&r.stderr).contains("panicked"), "{}", text(&r.stderr));
}

/// `mllm run --image` on the tiny Qwen3-VL: streams an answer with a
/// summary; an unreadable image is a clear error. (Token-level agreement
/// with transformers: tests/tests/run_images.rs.)
/// `mllm chat --image`: the first answer is `run --image`'s; `/image PATH`
/// adds an image to the next turn (the whole conversation, both images, is
/// computed again); a bad image is reported and the chat goes on.
/// `mllm bench --image-size`: a prompt after a synthetic image, beside a
/// text-only prompt of the same length.
#[test]
fn bench_with_an_image() {
    let model = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let out = mllm(&[
        "bench",
        "--model",
        model.to_str().expect("utf-8"),
        "--image-size",
        "64",
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    // 64x64 at this processor's 4096-pixel minimum: a 4x4 patch grid, 4 tokens.
    assert!(
        table.contains("img64+pp8") && table.contains("pp14"),
        "{table}"
    );
    assert!(
        text(&out.stderr).contains("vision encoder"),
        "{}",
        text(&out.stderr)
    );
}

/// `vision-preprocess` takes a converted .mllm as well as a directory, and
/// both give the same file.
#[test]
fn vision_preprocess_from_a_converted_file() {
    let f = root().join("tests/fixtures/qwen3_vl");
    let dir = f.join("p16_m2_tied_published");
    let img = f.join("run_images/a_160x120.png");
    let tmp = tempfile::tempdir().expect("tmp");
    let m = tmp.path().join("vl.mllm");
    let s = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    assert!(mllm(&["convert", &s(&dir), &s(&m), "-q", "q8_0"])
        .status
        .success());
    let (a, b) = (
        tmp.path().join("a.safetensors"),
        tmp.path().join("b.safetensors"),
    );
    for (model, out) in [(&dir, &a), (&m, &b)] {
        let r = mllm(&[
            "vision-preprocess",
            "--model",
            &s(model),
            "--image",
            &s(&img),
            "--out",
            &s(out),
        ]);
        assert!(r.status.success(), "{}", text(&r.stderr));
    }
    assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
}
