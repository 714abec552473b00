//! A model's step as a static graph, for the tools that look at one rather
//! than run it: `mllm graph` (the graph as text, before and after the
//! passes compiled execution runs) and `mllm inspect --backend` (which ops
//! of a decode step a backend has no kernel for, so the fallback policy
//! runs them on the host).

use std::collections::HashMap;

use mllm_backends::{CpuBackend, Tensor};
use mllm_graph::ir::Def;
use mllm_graph::passes;
pub use mllm_graph::{plan_memory, text, Graph};
use mllm_interpreter::Model;

use crate::{Error, Result};

/// The forward for `seq` tokens against a KV cache of `context` rows,
/// captured on the CPU (the last position's logits only).
pub fn capture(model: &Model, seq: usize, context: usize) -> Result<Graph> {
    if seq == 0 || context == 0 {
        return Err(Error::generate(
            "a step needs at least 1 token and a context of at least 1",
        ));
    }
    mllm_interpreter::compile::capture(model, &CpuBackend, seq, context, true)
        .map_err(|e| Error::generate(format!("cannot capture the model's step: {e}")))
}

/// The passes compiled execution runs, in order, by name.
pub fn pass_names() -> Vec<&'static str> {
    let mut names = vec!["fold_params"];
    names.extend(passes::ALL.iter().map(|(n, _)| *n));
    names
}

/// `raw` as compiled execution runs it: the work on small weights alone
/// folded against `model`'s weights (norm gains `1 + w`), then every pass.
pub fn optimize(model: &Model, raw: &Graph) -> Result<Graph> {
    let weights: HashMap<&str, &Tensor> =
        model.weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let g = passes::fold_params::fold_params(raw, &|n| weights.get(n).map(|t| (*t).clone()))?;
    Ok(passes::all(g)?)
}

/// `g`'s op nodes that compute (views share their source's data).
pub fn compute_ops(g: &Graph) -> usize {
    g.values
        .iter()
        .filter(|v| matches!(&v.def, Def::Node { op, .. } if !mllm_graph::plan::is_view(op)))
        .count()
}

/// The op nodes of `g` that `backend` has no kernel for, counted by op
/// name (what `--fallback cpu` runs on the host at every such step).
pub fn host_ops(g: &Graph, backend: &dyn mllm_backends::Backend) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = vec![];
    for v in &g.values {
        let Def::Node { op, .. } = &v.def else {
            continue;
        };
        if backend.supports(op) {
            continue;
        }
        match counts.iter_mut().find(|(n, _)| *n == op.name()) {
            Some(c) => c.1 += 1,
            None => counts.push((op.name(), 1)),
        }
    }
    counts.sort();
    counts
}
