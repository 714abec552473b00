//! `mllm graph SCRIPT --model PATH --seq N [--context C] [--passes all|none]
//! [--out FILE]`: captures the script's forward for N tokens against a KV
//! cache of C rows and writes the graph as text (what an NPU would get),
//! with node, value and arena counts before and after the passes.

use mllm_runtime::captured::{self, plan_memory, text, Graph};

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
            return Err(CliError::invalid(format!(
                "--passes takes `all` or `none`, not `{other}`"
            )))
        }
    };
    let files = model_files::open(&a.model)?;
    let model = load_model(&files, Some(&a.script))?;
    let raw = captured::capture(&model, a.seq, a.context)?;
    eprintln!("{}", counts("captured", &raw));
    let g = if run_passes {
        let g = captured::optimize(&model, &raw)?;
        let label = format!("after passes ({})", captured::pass_names().join(", "));
        eprintln!("{}", counts(&label, &g));
        g
    } else {
        raw
    };
    let body = text::to_text(&g);
    match &a.out {
        Some(path) => std::fs::write(path, body)
            .map_err(|e| CliError::invalid(format!("cannot write {path}: {e}")))?,
        None => print!("{body}"),
    }
    Ok(())
}
