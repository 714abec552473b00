//! `mllm inspect FILE --backend NAME`: how many ops of the model's decode
//! step (captured as compiled execution runs it) have no kernel on a
//! backend, so that `--fallback cpu` runs them on the host at every step.

use mllm_runtime::captured;
use serde_json::{json, Value};

use crate::model_files::{self, load_model};
use crate::CliResult;

/// The context the step is captured against (its op count does not depend
/// on it).
const CONTEXT: usize = 64;

pub struct StepOps {
    pub backend: &'static str,
    pub ops: usize,
    pub host: Vec<(&'static str, usize)>,
}

impl StepOps {
    pub fn of(path: &str, backend: &str, device: usize) -> CliResult<StepOps> {
        let b = mllm_runtime::model_files::backend_by_name(backend, device)?;
        let files = model_files::open(path)?;
        let model = load_model(&files, None)?;
        let raw = captured::capture(&model, 1, CONTEXT)?;
        let g = captured::optimize(&model, &raw)
            .map_err(|e| e.context("optimizing the captured step"))?;
        Ok(StepOps {
            backend: b.name(),
            ops: captured::compute_ops(&g),
            host: captured::host_ops(&g, b.as_ref()),
        })
    }

    fn on_host(&self) -> usize {
        self.host.iter().map(|(_, n)| n).sum()
    }

    pub fn text(&self) -> String {
        let list: Vec<String> = self
            .host
            .iter()
            .map(|(op, n)| format!("{op} {n}"))
            .collect();
        let detail = if list.is_empty() {
            String::new()
        } else {
            format!(": {}", list.join(", "))
        };
        format!(
            "decode step on {}: {} ops, {} without a kernel there (on the host under --fallback cpu){detail}\n",
            self.backend,
            self.ops,
            self.on_host()
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "backend": self.backend,
            "ops": self.ops,
            "host_ops": self.on_host(),
            "host": self.host.iter().map(|(op, n)| json!({"op": op, "count": n})).collect::<Vec<_>>(),
        })
    }
}
