//! `mllm graph SCRIPT --model PATH --seq N [--context C] [--passes all|none]
//! [--out FILE]`: captures the script's forward for N tokens against a KV
//! cache of C rows and writes the graph as text (what an NPU would get),
//! with node, value and arena counts before and after the passes.

use mllm_backends::CpuBackend;
use mllm_graph::{passes, plan_memory, text, Graph};

use crate::model_files::{self, load_model};
use crate::{CliError, CliResult};

pub struct GraphArgs {
    pub script: String,
    pub model: String,
    pub seq: usize,
    pub context: usize,
    pub passes: String,
    pub out: Option<String>,
}

fn counts(what: &str, g: &Graph) -> String {
    let plan = plan_memory(g);
    format!(
        "{what}: {}; arena {} bytes for {} buffers ({} bytes if each were allocated)",
        text::summary(g),
        plan.arena_bytes,
        plan.buffers,
        plan.total_bytes
    )
}

pub fn run(a: GraphArgs) -> CliResult<()> {
    let run_passes = match a.passes.as_str() {
        "all" => true,
        "none" => false,
        other => {
            return Err(CliError(format!(
                "error: --passes takes `all` or `none`, not `{other}`"
            )))
        }
    };
    if a.seq == 0 || a.context == 0 {
        return Err(CliError(
            "error: --seq and --context must be at least 1".into(),
        ));
    }
    let files = model_files::open(&a.model)?;
    let model = load_model(&files, Some(&a.script))?;
    let raw = mllm_interpreter::compile::capture(&model, &CpuBackend, a.seq, a.context, true)
        .map_err(|e| CliError(format!("error: cannot capture {}: {e}", a.script)))?;
    eprintln!("{}", counts("captured", &raw));
    let g = if run_passes {
        // What compiled execution runs: first the work on small weights
        // alone (norm gains 1 + w) done once against this model's weights.
        let weights: std::collections::HashMap<&str, &mllm_backends::Tensor> =
            model.weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let g = passes::fold_params::fold_params(&raw, &|n| weights.get(n).map(|t| (*t).clone()))
            .map_err(|e| CliError(format!("error: {e}")))?;
        let g = passes::all(g).map_err(|e| CliError(format!("error: {e}")))?;
        let mut names: Vec<&str> = vec!["fold_params"];
        names.extend(passes::ALL.iter().map(|(n, _)| *n));
        let label = format!("after passes ({})", names.join(", "));
        eprintln!("{}", counts(&label, &g));
        g
    } else {
        raw
    };
    let body = text::to_text(&g);
    match &a.out {
        Some(path) => std::fs::write(path, body)
            .map_err(|e| CliError(format!("error: cannot write {path}: {e}")))?,
        None => print!("{body}"),
    }
    Ok(())
}
