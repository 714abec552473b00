//! The `mllm` binary's step modes (eager, graphs by default, compiled), KV-cache
//! types, `mllm graph` and `bench -d`: what the graph capture work added to
//! the command line.

mod common;

use std::process::Command;

use common::{mllm, root, smollm2, text};

/// The real SmolLM2 answers the same text eagerly, through captured graphs
/// (the default), with `--compiled` (the prompt renders to 32 tokens with
/// the chat template: one power-of-two piece, so the same step shapes as
/// the eager prompt; other lengths split into pieces whose float sums may
/// differ in the last bits and flip a near tie), and starts the same
/// answer with an f16 KV cache; a backend this build lacks is
/// a clear error.
#[test]
fn step_modes_and_kv_types_answer_alike() {
    let model = smollm2();
    let answer = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--model",
            &model,
            "--prompt",
            "Capital of France",
            "--temp",
            "0",
            "-n",
            "12",
        ];
        args.extend_from_slice(extra);
        let out = mllm(&args);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let eager = answer(&["--eager"]);
    assert!(!eager.trim().is_empty());
    assert_eq!(answer(&[]), eager, "graphs (the default)");
    assert_eq!(answer(&["--compiled"]), eager, "compiled");
    // An f16 cache rounds keys and values to 11 bits: through the int8
    // activation rounding of 30 layers that moves logits by ~0.1, so the
    // greedy answers agree at first and may part at a near tie (here after
    // "welcome to my"). How close the caches stay is measured in
    // tests/tests/kv_dtypes.rs; here the flag must work and start alike.
    let f16 = answer(&["--kv-type", "f16"]);
    let words = |s: &str| s.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    assert_eq!(
        words(&f16),
        words(&eager),
        "f16 cache: {f16:?} vs {eager:?}"
    );
    for (args, want) in [
        (
            &["--backend", "opencl", "--device", "99"][..],
            "no OpenCL device 99",
        ),
        (&["--backend", "cpu", "--device", "1"][..], "one device (0)"),
        (&["--backend", "npu"][..], "unknown backend"),
        (&["--kv-type", "q4_0"][..], "f32, f16, q8_0"),
        (&["--eager", "--compiled"][..], "cannot be used with"),
    ] {
        let mut a = vec!["run", "--model", &model, "--prompt", "hi"];
        a.extend_from_slice(args);
        let out = mllm(&a);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `mllm graph` prints the captured graph with its counts, and writes it
/// to a file with `--out`.
#[test]
fn graph_prints_a_captured_decode_step() {
    let model = "tests/fixtures/qwen3/gqa_tied_f32";
    let out = mllm(&[
        "graph",
        "qwen3",
        "--model",
        model,
        "--seq",
        "1",
        "--context",
        "64",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let g = text(&out.stdout);
    assert!(g.contains("%0 = input \"input_ids\" : i32[1]"), "{g}");
    assert!(
        g.contains("param \"model.layers.1.mlp.down_proj.weight\""),
        "{g}"
    );
    assert!(g.contains("input \"past_key.1\" : f32[64, 2, 16]"), "{g}");
    assert!(
        g.contains("cached_sdpa{") && g.contains("gated_act{act: Silu}"),
        "{g}"
    );
    assert!(g.contains("output \"logits\""), "{g}");
    let err = text(&out.stderr);
    assert!(
        err.contains("captured:") && err.contains("after passes") && err.contains("arena"),
        "{err}"
    );
    let raw = mllm(&[
        "graph", "qwen3", "--model", model, "--seq", "4", "--passes", "none",
    ]);
    assert!(raw.status.success(), "{}", text(&raw.stderr));
    assert!(
        !text(&raw.stdout).contains("gated_act"),
        "no passes, no fusion"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("g.txt");
    let out = mllm(&[
        "graph",
        "qwen3",
        "--model",
        model,
        "--seq",
        "2",
        "--out",
        path.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(std::fs::read_to_string(&path)
        .expect("written")
        .contains("input \"positions\" : i32[2]"));
    let bad = mllm(&[
        "graph", "qwen3", "--model", model, "--seq", "1", "--passes", "some",
    ]);
    assert!(!bad.status.success() && text(&bad.stderr).contains("`all` or `none`"));
}

/// `bench -d` times tests after a context, reports peak RSS; an unknown
/// `MLLM_QLINEAR_ISA` is an error, not silently ignored.
#[test]
fn bench_depth_peak_rss_and_isa_errors() {
    let model = "tests/fixtures/qwen3/gqa_tied_f32";
    let out = mllm(&[
        "bench", "--model", model, "-p", "8", "-n", "4", "-d", "0,16", "-r", "1", "-t", "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    for row in [
        "| pp8 |",
        "| pp8 @ d16 |",
        "| tg4 |",
        "| tg4 @ d16 |",
        "peak RSS",
    ] {
        assert!(t.contains(row), "{row}: {t}");
    }
    let json = mllm(&[
        "bench",
        "--model",
        model,
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "--json",
        "--kv-type",
        "f16",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(v["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
    assert_eq!(v["kv_type"], "f16");
    let bad = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args(["bench", "--model", model, "-p", "8", "-n", "2", "-r", "1"])
        .current_dir(root())
        .env("MLLM_QLINEAR_ISA", "sse9")
        .output()
        .expect("run mllm");
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("MLLM_QLINEAR_ISA=sse9 names no kernel path"),
        "{}",
        text(&bad.stderr)
    );
}

/// Qwen3.5's recurrent (Gated DeltaNet) layers carry their state as graph
/// I/O, so the default path steps through graphs with no "running
/// eagerly" warning, and `mllm exec --compiled` (every step a graph)
/// gives the eager greedy ids.
#[test]
fn qwen3_5_runs_as_graphs_without_falling_back() {
    let model = "tests/fixtures/qwen3_5/qwen3_5_f32";
    let out = mllm(&["bench", "--model", model, "-p", "8", "-n", "4", "-r", "1"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("running eagerly"), "{err}");
    assert!(
        text(&out.stdout).contains("cpu (graph)"),
        "{}",
        text(&out.stdout)
    );
    let exec = |extra: &str| {
        let mut args = vec![
            "exec",
            "qwen3_5",
            "--model",
            model,
            "--input-ids",
            "1,5,9,13,17,21,25",
            "--max-new-tokens",
            "6",
        ];
        args.push(extra);
        let out = mllm(&args);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{extra}: {err}");
        assert!(!err.contains("running eagerly"), "{extra}: {err}");
        text(&out.stdout)
    };
    assert_eq!(exec("--compiled"), exec("--eager"));
}
