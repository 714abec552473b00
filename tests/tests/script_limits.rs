//! A `.mdl` script that runs without end or allocates without bound is
//! stopped by the interpreter's step and memory limits
//! (`interpreter/src/limits.rs`) with a clear error at its line, and
//! legitimate work under the same limits is not.

use std::time::{Duration, Instant};

use mllm_backends::CpuBackend;
use mllm_interpreter::{Eager, Interp, RtError, ScriptLimits, Value};

/// Checks `text` and runs its function `main` under `limits`.
fn run(text: &str, limits: ScriptLimits) -> (Result<Value, RtError>, String) {
    let (prog, diags) = mllm_dsl::check("limits.mdl", text, &mllm_dsl::NoImports);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    let f = prog
        .fns
        .iter()
        .find(|f| f.name == "main")
        .expect("a main function");
    let mut exec = Eager::new(CpuBackend);
    let mut it = Interp::with_limits(&prog, &mut exec, limits);
    let r = it.call_function(f, None, vec![], vec![]);
    let shown = match &r {
        Ok(_) => String::new(),
        Err(e) => e.render(&prog.sources, false),
    };
    (r, shown)
}

fn limits(max_steps: u64, max_memory: u64) -> ScriptLimits {
    ScriptLimits {
        max_steps,
        max_memory,
    }
}

fn expect_err(text: &str, l: ScriptLimits, code: &str, line: &str) -> String {
    let (r, shown) = run(text, l);
    let err = r.expect_err("the limit stops the script");
    assert_eq!(err.code, code, "{shown}");
    assert!(shown.contains(line), "expected {line} in:\n{shown}");
    shown
}

#[test]
fn nested_loops_without_end_hit_the_step_limit() {
    // 10^15 iterations: forever, as far as anyone waiting is concerned.
    let text = "fn main() {\n  let n = 0\n  for i in 0..100000 {\n    for j in 0..100000 {\n      for k in 0..100000 {\n        n = n + 1\n      }\n    }\n  }\n  return n\n}\n";
    let t0 = Instant::now();
    let shown = expect_err(
        text,
        limits(2_000_000, 1 << 30),
        "mdl::run::step_limit",
        "limits.mdl:",
    );
    assert!(shown.contains("more than 2000000 steps"), "{shown}");
    assert!(shown.contains("MLLM_MAX_SCRIPT_STEPS"), "{shown}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

#[test]
fn recursion_that_doubles_hits_the_step_limit() {
    // Within the call depth limit, but 2^40 calls.
    let text = "fn f(n) {\n  if n == 0 { return 1 }\n  return f(n - 1) + f(n - 1)\n}\nfn main() {\n  return f(40)\n}\n";
    expect_err(
        text,
        limits(1_000_000, 1 << 30),
        "mdl::run::step_limit",
        "limits.mdl:",
    );
}

#[test]
fn lists_and_strings_doubling_in_a_loop_are_refused() {
    let list =
        "fn main() {\n  let a = [0]\n  for i in 0..64 {\n    a = a + a\n  }\n  return len(a)\n}\n";
    let shown = expect_err(
        list,
        ScriptLimits::default(),
        "mdl::run::memory_limit",
        "limits.mdl:4:",
    );
    assert!(shown.contains("a list of 33554432 items"), "{shown}");
    let string =
        "fn main() {\n  let s = \"ab\"\n  for i in 0..64 {\n    s = s + s\n  }\n  return s\n}\n";
    expect_err(
        string,
        ScriptLimits::default(),
        "mdl::run::memory_limit",
        "limits.mdl:4:",
    );
}

#[test]
fn a_tensor_doubling_in_a_loop_hits_the_memory_limit() {
    let text = "fn main() {\n  let x = zeros([1024])\n  for i in 0..40 {\n    x = concat([x, x], 0)\n  }\n  return x\n}\n";
    let shown = expect_err(
        text,
        limits(1_000_000, 64 << 20),
        "mdl::run::memory_limit",
        "limits.mdl:4:",
    );
    assert!(shown.contains("over the limit of 64.0 MiB"), "{shown}");
    assert!(shown.contains("MLLM_MAX_SCRIPT_MEMORY"), "{shown}");
}

#[test]
fn tensors_kept_alive_count_and_tensors_dropped_do_not() {
    // 4 MiB a tensor: 100 of them kept is 400 MiB, over 64 MiB ...
    let keep = "fn main() {\n  let kept = []\n  for i in 0..100 {\n    kept = kept + [zeros([1048576])]\n  }\n  return len(kept)\n}\n";
    expect_err(
        keep,
        limits(1_000_000, 64 << 20),
        "mdl::run::memory_limit",
        "limits.mdl:4:",
    );
    // ... but 100 made and dropped one at a time never hold more than two.
    let drop = "fn main() {\n  let total = 0.0\n  for i in 0..100 {\n    let y = zeros([1048576]) + 1.0\n    total = total + y[0].item()\n  }\n  return total\n}\n";
    let (r, shown) = run(drop, limits(1_000_000, 64 << 20));
    match r {
        Ok(Value::Float(v)) => assert_eq!(v, 100.0),
        other => panic!("expected 100.0, got {other:?}\n{shown}"),
    }
}

#[test]
fn ordinary_scripts_run_under_the_default_limits() {
    let text = "fn main() {\n  let x = arange(0, 1000)\n  let s = 0\n  for i in 0..1000 {\n    s = s + i\n  }\n  return s + len([j * 2 for j in 0..100000])\n}\n";
    let (r, shown) = run(text, ScriptLimits::default());
    match r {
        Ok(Value::Int(v)) => assert_eq!(v, 499_500 + 100_000),
        other => panic!("expected an int, got {other:?}\n{shown}"),
    }
}
