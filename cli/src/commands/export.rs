//! `mllm export SCRIPT --model PATH --format onnx --seq N [--context C]
//! [--no-cache] [--quant keep|dequantize] [--target generic|qnn|ascend] --out DIR`:
//! captures the script's forward for N tokens and writes it as a static
//! ONNX model (`DIR/model.onnx`, weights in `DIR/model.onnx.data`, I/O in
//! `DIR/io.json`). With the cache, the past keys/values of C rows,
//! `positions` and `past_len` are inputs and the step's new rows outputs
//! (`--seq 1` is the decode graph); `--no-cache` is a first-chunk graph,
//! `input_ids` -> `logits`. `--target qnn` and `--target ascend` shape the
//! graph for Qualcomm's and Huawei's converters and add their files
//! (README.txt with the vendor's commands, QNN's quantization overrides and
//! rotary tables). The work is `mllm_graph::onnx`.

use std::path::PathBuf;

use mllm_backends::{CpuBackend, DType};
use mllm_graph::onnx::{self, ExportOptions, Exported, QuantMode, Target};

use crate::model_files::{self, LoadOptions};
use crate::{CliError, CliResult};

pub struct ExportArgs {
    pub script: String,
    pub model: String,
    pub format: String,
    pub seq: usize,
    pub context: Option<usize>,
    pub no_cache: bool,
    pub quant: String,
    pub target: String,
    pub out: PathBuf,
}

/// Rows of the past buffers when `--context` is not given.
pub const DEFAULT_CONTEXT: usize = 1024;

fn usage(msg: String) -> CliError {
    CliError(format!("error: {msg}"))
}

pub fn run(a: ExportArgs) -> CliResult<Exported> {
    if a.format != "onnx" {
        return Err(usage(format!("--format takes `onnx`, not `{}`", a.format)));
    }
    let quant: QuantMode = a.quant.parse().map_err(usage)?;
    let target: Target = a.target.parse().map_err(usage)?;
    // Before anything is loaded: a refused combination writes nothing.
    target.check(quant).map_err(|e| usage(e.0))?;
    if a.seq == 0 {
        return Err(usage("--seq must be at least 1".into()));
    }
    if a.no_cache && a.context.is_some() {
        return Err(usage(
            "--context sizes the KV inputs, which a --no-cache graph does not have".into(),
        ));
    }
    // A no-cache graph is captured against a cache it then drops.
    let context = if a.no_cache {
        a.seq
    } else {
        a.context.unwrap_or(DEFAULT_CONTEXT)
    };
    if context < a.seq {
        return Err(usage(format!(
            "--context {context} cannot hold a step of --seq {} tokens",
            a.seq
        )));
    }
    let files = model_files::open_with(
        &a.model,
        LoadOptions {
            // QNN writes float weights too, but reads the checkpoint's
            // quantized types and scales for its quantization overrides.
            dequantize: quant == QuantMode::Dequantize && target != Target::Qnn,
            ..LoadOptions::default()
        },
    )?;
    let model = model_files::load_model(&files, Some(&a.script))?;
    let graph = mllm_interpreter::compile::capture_with_kv(
        &model,
        &CpuBackend,
        a.seq,
        context,
        false,
        DType::F32,
    )
    .map_err(|e| CliError(format!("error: cannot capture {}: {e}", a.script)))?;
    // The checkpoint's tensors are read again while writing: free the
    // loaded copies first.
    drop(model);
    let opts = ExportOptions {
        quant,
        target,
        no_cache: a.no_cache,
    };
    let done = onnx::export(graph, files.weights.as_ref(), &opts, &a.out)
        .map_err(|e| CliError(format!("error: cannot export {}: {e}", a.model)))?;
    eprintln!(
        "exported {} nodes, {} initializers ({:.1} MB external data) to {}",
        done.nodes,
        done.initializers,
        done.data_bytes as f64 / 1e6,
        a.out.display()
    );
    Ok(done)
}

/// Loads the exported graph in onnxruntime (`--check`) with `$MLLM_PYTHON`
/// or `python3`; what onnxruntime said, or why nothing was checked.
pub fn check(out: &std::path::Path) -> CliResult<String> {
    let python = std::env::var("MLLM_PYTHON").unwrap_or_else(|_| "python3".into());
    let model = out.join("model.onnx");
    let script = "import sys\ntry:\n    import onnxruntime as ort\nexcept ImportError:\n    sys.exit(3)\nort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\nprint(ort.__version__)\n";
    let res = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(&model)
        .output()
        .map_err(|e| {
            CliError(format!(
                "error: --check: cannot run {python} ({e}); the graph was written but NOT checked (set MLLM_PYTHON to a Python with onnxruntime)"
            ))
        })?;
    match res.status.code() {
        Some(0) => Ok(format!(
            "checked: onnxruntime {} loads {}",
            String::from_utf8_lossy(&res.stdout).trim(),
            model.display()
        )),
        Some(3) => Err(CliError(format!(
            "error: --check: onnxruntime is not installed for {python}; the graph was written but NOT checked (`pip install onnxruntime`, or set MLLM_PYTHON to a Python that has it)"
        ))),
        _ => {
            let err = String::from_utf8_lossy(&res.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            Err(CliError(format!(
                "error: --check: onnxruntime cannot load {}:\n{}",
                model.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )))
        }
    }
}
