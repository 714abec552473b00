//! Scripts that pass the checker but are wrong at run time (a mutated
//! qwen3.mdl) fail with errors, never a panic, when loaded and run on a real
//! checkpoint.

mod common;

use std::rc::Rc;

use common::*;
use mllm_backends::{CpuBackend, Tensor};
use mllm_converter::HfModelDir;
use mllm_interpreter::{Eager, Model, Value};
use mllm_runtime::assets::ScriptResolver;
use proptest::prelude::*;

fn words(src: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    for c in src.chars() {
        if c.is_alphanumeric() || c == '_' || c == '.' {
            cur.push(c);
        } else {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        }
    }
    out.push(cur);
    out
}

#[derive(Debug, Clone)]
enum M {
    /// Replace word `a` by word `b` (both indexes into the word list).
    Swap(usize, usize),
    Number(usize, i64),
    Drop(usize),
}

fn run_script(text: &str, dir: &HfModelDir) {
    let script = qwen3_script();
    let (prog, diags) = mllm_dsl::check(&script, text, &ScriptResolver::for_script(&script));
    if !diags.is_empty() {
        return;
    }
    let prog = Rc::new(prog);
    let mut exec = Eager::new(CpuBackend);
    let Ok(model) = Model::load(
        prog.clone(),
        &dir.config,
        "config.json",
        Some(&dir.weights),
        &mut exec,
    ) else {
        return;
    };
    let cache = Rc::new(std::cell::RefCell::new(mllm_interpreter::KvCache::new()));
    for (ids, start) in [(vec![1, 2, 3], 0), (vec![4], 3)] {
        let n = ids.len();
        let input = Tensor::from_i32(ids, vec![n]).expect("ids");
        let pos = Tensor::from_i32((start..start + n as i32).collect(), vec![n]).expect("pos");
        let r = model.forward(
            &mut exec,
            vec![
                ("input_ids", Value::Tensor(input)),
                ("positions", Value::Tensor(pos)),
                ("cache", Value::Cache(cache.clone())),
            ],
        );
        if let Err(e) = r {
            // Errors render without panicking too.
            let _ = e.render(&prog.sources, false);
            return;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn mutated_scripts_fail_cleanly(muts in proptest::collection::vec(
        prop_oneof![
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| M::Swap(a, b)),
            (any::<usize>(), -3i64..300).prop_map(|(a, n)| M::Number(a, n)),
            any::<usize>().prop_map(M::Drop),
        ], 1..4)) {
        let src = std::fs::read_to_string(qwen3_script()).expect("script");
        let dir = HfModelDir::open(&fixture("gqa_tied_f32")).expect("fixture");
        let mut w = words(&src);
        let idx: Vec<usize> = (0..w.len()).filter(|&i| w[i].chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_')).collect();
        for m in &muts {
            match m {
                M::Swap(a, b) => {
                    let (a, b) = (idx[a % idx.len()], idx[b % idx.len()]);
                    w[a] = w[b].clone();
                }
                M::Number(a, n) => w[idx[a % idx.len()]] = n.to_string(),
                M::Drop(a) => w[idx[a % idx.len()]].clear(),
            }
        }
        run_script(&w.concat(), &dir);
    }
}
