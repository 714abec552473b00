//! The executor seam: a `Trace` executor records the op sequence of a real
//! Qwen3 forward (the starting point of graph capture), and shows how many
//! native ops one decoded token costs.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use mllm_backends::CpuBackend;
use mllm_converter::HfModelDir;
use mllm_interpreter::{Eager, ForwardInputs, KvCache, Model, Trace};

#[test]
fn trace_records_one_decode_step() {
    let dir = HfModelDir::open(&fixture("gqa_tied_f32")).expect("fixture");
    let script = qwen3_script();
    let text = std::fs::read_to_string(&script).expect("script");
    let (prog, diags) = mllm_dsl::check(
        &script,
        &text,
        &mllm_runtime::assets::ScriptResolver::for_script(&script),
    );
    assert!(diags.is_empty());
    let mut exec = Trace::new(Eager::new(CpuBackend));
    let model = Model::load(
        Rc::new(prog),
        &dir.config,
        "config.json",
        Some(&dir.weights),
        &mut exec,
    )
    .expect("load");
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let run = |exec: &mut Trace<Eager<CpuBackend>>, ids: Vec<i32>, start: usize| {
        let inputs = ForwardInputs::text(&ids, start, cache.clone(), true).expect("inputs");
        model.run(exec, inputs).expect("forward")
    };
    run(&mut exec, vec![1, 2, 3, 4], 0);
    exec.entries.clear();
    run(&mut exec, vec![5], 4);
    let names: Vec<&str> = exec.entries.iter().map(|e| e.op.name()).collect();
    let count = |n: &str| names.iter().filter(|x| **x == n).count();
    let layers = 2;
    // Per layer: q, k, v, o and three MLP projections; plus the tied head.
    assert_eq!(count("linear"), layers * 7 + 1, "{names:?}");
    assert_eq!(count("sdpa"), layers);
    assert_eq!(count("apply_rope"), layers * 2);
    assert_eq!(count("rms_norm"), layers * 4 + 1);
    assert_eq!(count("embedding"), 1);
    // Decode attends over the 5 cached positions.
    let sdpa = exec
        .entries
        .iter()
        .find(|e| e.op.name() == "sdpa")
        .expect("sdpa");
    assert_eq!(sdpa.inputs[1][0], 5, "keys of the cache: {:?}", sdpa.inputs);
    eprintln!(
        "one decode token of a {layers}-layer Qwen3 = {} native ops",
        names.len()
    );
}
