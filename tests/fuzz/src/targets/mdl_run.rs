//! `.mdl` check + run: the input is a script. When it checks, each
//! parameterless function of the file runs (as `tests/lang` tests do, at
//! most eight), and when it declares the module of the tiny Qwen3 fixture
//! (`tests/fixtures/qwen3/gqa_tied_f32`, loaded once per process) it is
//! loaded against that checkpoint and runs a 3-token prefill and a 1-token
//! decode step through the KV cache. Errors are rendered. Runaway scripts
//! are stopped by the interpreter's own limits, set low here (`LIMITS`:
//! the tiny model's forward takes a few hundred steps and kilobytes) so
//! each run stays short; libFuzzer's -timeout and -malloc_limit_mb report
//! any work the limits miss.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::{CpuBackend, Tensor};
use mllm_converter::HfModelDir;
use mllm_interpreter::{Eager, Interp, KvCache, Model, ScriptLimits, Value};
use mllm_runtime::assets::ScriptResolver;

/// Steps and live tensor bytes per call (`MLLM_MAX_SCRIPT_STEPS` and
/// `MLLM_MAX_SCRIPT_MEMORY` for `Model::load`, which reads them).
const LIMITS: ScriptLimits = ScriptLimits {
    max_steps: 200_000,
    max_memory: 64 << 20,
};

thread_local! {
    static FIXTURE: &'static HfModelDir = Box::leak(Box::new(
        HfModelDir::open(&super::fixtures().join("qwen3/gqa_tied_f32"))
            .expect("the tiny Qwen3 fixture (tests/fixtures/qwen3/gqa_tied_f32)"),
    ));
}

fn run_model(prog: &Rc<mllm_dsl::Program>, dir: &HfModelDir) {
    let mut exec = Eager::new(CpuBackend);
    let model = match Model::load(
        prog.clone(),
        &dir.config,
        "config.json",
        Some(&dir.weights),
        &mut exec,
    ) {
        Ok(m) => m,
        Err(errors) => {
            for e in errors {
                let _ = e.render(&prog.sources, false);
            }
            return;
        }
    };
    let cache = Rc::new(RefCell::new(KvCache::new()));
    for (ids, start) in [(vec![1, 2, 3], 0), (vec![4], 3)] {
        let n = ids.len();
        let (Ok(input), Ok(pos)) = (
            Tensor::from_i32(ids, vec![n]),
            Tensor::from_i32((start..start + n as i32).collect(), vec![n]),
        ) else {
            return;
        };
        let r = model.forward(
            &mut exec,
            vec![
                ("input_ids", Value::Tensor(input)),
                ("positions", Value::Tensor(pos)),
                ("cache", Value::Cache(cache.clone())),
            ],
        );
        if let Err(e) = r {
            let _ = e.render(&prog.sources, false);
            return;
        }
    }
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (prog, diags) = mllm_dsl::check("fuzz.mdl", text, &ScriptResolver { dir: None });
    if !diags.is_empty() {
        return;
    }
    std::env::set_var("MLLM_MAX_SCRIPT_STEPS", LIMITS.max_steps.to_string());
    std::env::set_var("MLLM_MAX_SCRIPT_MEMORY", LIMITS.max_memory.to_string());
    let prog = Rc::new(prog);
    let mut exec = Eager::new(CpuBackend);
    let plain = prog
        .fns
        .iter()
        .filter(|f| f.source == prog.main && f.params.iter().all(|p| p.default.is_some()));
    for f in plain.take(8) {
        let mut it = Interp::with_limits(&prog, &mut exec, LIMITS);
        if let Err(e) = it.call_function(f, None, vec![], vec![]) {
            let _ = e.render(&prog.sources, false);
        }
    }
    if prog.module_by_name("Qwen3ForCausalLM").is_some() {
        FIXTURE.with(|dir| run_model(&prog, dir));
    }
}
