//! The OpenCL backend from the command line: `mllm devices`, `mllm
//! test-backend`, and `--backend opencl` on exec and run (PoCL in CI).
//! `MLLM_SKIP_OPENCL=1` skips them knowingly (and says so).

mod common;

use common::*;

fn skip() -> bool {
    let s = std::env::var_os("MLLM_SKIP_OPENCL").is_some();
    if s {
        eprintln!("MLLM_SKIP_OPENCL is set: the OpenCL CLI was NOT tested");
    }
    s
}

#[test]
fn devices_lists_the_cpu_and_opencl_devices() {
    if skip() {
        return;
    }
    let out = mllm(&["devices"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.starts_with("cpu\n  0: "), "{s}");
    assert!(s.contains("opencl\n  0: "), "{s}");
    assert!(s.contains("fp16 arithmetic: "), "{s}");
}

#[test]
fn test_backend_reports_nmse_per_op_and_refuses_unknown_ops() {
    if skip() {
        return;
    }
    let out = mllm(&["test-backend", "--backend", "opencl", "--op", "rms_norm"]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let s = text(&out.stdout);
    assert!(s.contains("| rms_norm |"), "{s}");
    assert!(s.contains(" 0 failed"), "{s}");
    let out = mllm(&["test-backend", "--op", "no_such_op"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("unknown op `no_such_op`"));
    let out = mllm(&["test-backend", "--backend", "opencl", "--device", "99"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no OpenCL device 99"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn exec_on_opencl_gives_the_cpu_tokens() {
    if skip() {
        return;
    }
    let model = root().join("tests/fixtures/qwen3/gqa_tied_f32");
    let model = model.to_str().expect("utf-8");
    let args = |backend: &'static str| {
        vec![
            "exec",
            "qwen3",
            "--model",
            model,
            "--input-ids",
            "1,2,3",
            "--max-new-tokens",
            "6",
            "--backend",
            backend,
        ]
    };
    let cpu = mllm(&args("cpu"));
    let cl = mllm(&args("opencl"));
    assert!(
        cpu.status.success() && cl.status.success(),
        "{}",
        text(&cl.stderr)
    );
    assert_eq!(text(&cl.stdout), text(&cpu.stdout));
}

#[test]
fn run_and_bench_on_opencl_with_the_real_smollm2() {
    if skip() {
        return;
    }
    let gguf = smollm2();
    let out = mllm(&[
        "run",
        "--model",
        &gguf,
        "--prompt",
        "What is 2+2?",
        "--max-new-tokens",
        "8",
        "--temp",
        "0",
        "--backend",
        "opencl",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).trim().is_empty());
    let out = mllm(&[
        "bench",
        "--model",
        &gguf,
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "1",
        "--backend",
        "opencl",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("opencl"),
        "{}",
        text(&out.stdout)
    );
}

/// Ops without an OpenCL kernel (the MoE router's `topk`, the experts'
/// `moe_linear`) run on the CPU under the default `--fallback cpu`: one
/// warning per op kind, and `bench` counts them per decode step; under
/// `--fallback none` they are an error naming the op and the backend.
#[test]
fn ops_without_an_opencl_kernel_follow_the_fallback_policy() {
    if skip() {
        return;
    }
    let model = root().join("tests/fixtures/qwen3_moe/moe_f32");
    let model = model.to_str().expect("utf-8");
    let bench_args = |extra: &[&'static str]| {
        let mut v = vec![
            "bench",
            "--model",
            model,
            "-p",
            "4",
            "-n",
            "2",
            "-r",
            "1",
            "--backend",
            "opencl",
        ];
        v.extend_from_slice(extra);
        v
    };
    let bench = |fallback: &'static str| mllm(&bench_args(&["--fallback", fallback]));
    let out = bench("cpu");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    for op in ["topk", "moe_linear"] {
        let warning = format!("the opencl backend has no `{op}` kernel; running it on the CPU");
        assert_eq!(stderr.matches(&warning).count(), 1, "{op}: {stderr}");
        assert!(stdout.contains(&format!("{op} ")), "{stdout}");
    }
    assert!(
        stdout.contains("ops of each decode step have no opencl kernel and ran on the CPU"),
        "{stdout}"
    );
    let out = bench("none");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("opencl") && (stderr.contains("topk") || stderr.contains("moe_linear")),
        "{stderr}"
    );
    // On the CPU nothing falls back, so nothing is counted.
    let out = mllm(&["bench", "--model", model, "-p", "4", "-n", "2", "-r", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("on the host"));
    // `inspect --backend` counts the same ops from the captured step,
    // without running it.
    let json = |args: &[&str]| -> serde_json::Value {
        let out = mllm(args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_str(&text(&out.stdout)).expect("json")
    };
    let ran = json(&bench_args(&["--json"]));
    let step = json(&["inspect", model, "--backend", "opencl", "--json"]);
    let counted = &step["decode_step"];
    assert!(counted["host_ops"].as_u64() > Some(0), "{counted}");
    assert_eq!(counted["host_ops"], ran["host_ops_per_step"], "{counted}");
    assert_eq!(counted["host"], ran["host_ops"], "{counted}");
    let cpu = json(&["inspect", model, "--backend", "cpu", "--json"]);
    assert_eq!(cpu["decode_step"]["host_ops"], 0);
    assert_eq!(cpu["decode_step"]["ops"], counted["ops"]);
}
