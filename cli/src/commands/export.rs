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
//! rotary tables). The work is `mllm_runtime::export`.

use std::path::PathBuf;

use mllm_runtime::export::{export_onnx, ExportRequest, Exported, QuantMode, Target};

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

fn usage(msg: String) -> CliError {
    CliError::invalid(msg.to_string())
}

pub fn run(a: ExportArgs) -> CliResult<Exported> {
    if a.format != "onnx" {
        return Err(usage(format!("--format takes `onnx`, not `{}`", a.format)));
    }
    let req = ExportRequest {
        script: &a.script,
        seq: a.seq,
        context: a.context,
        no_cache: a.no_cache,
        quant: a.quant.parse::<QuantMode>().map_err(usage)?,
        target: a.target.parse::<Target>().map_err(usage)?,
    };
    let done = export_onnx(&a.model, &req, &a.out)?;
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
            CliError::invalid(format!("--check: cannot run {python} ({e}); the graph was written but NOT checked (set MLLM_PYTHON to a Python with onnxruntime)"
            ))
        })?;
    match res.status.code() {
        Some(0) => Ok(format!(
            "checked: onnxruntime {} loads {}",
            String::from_utf8_lossy(&res.stdout).trim(),
            model.display()
        )),
        Some(3) => Err(CliError::invalid(format!("--check: onnxruntime is not installed for {python}; the graph was written but NOT checked (`pip install onnxruntime`, or set MLLM_PYTHON to a Python that has it)"
        ))),
        _ => {
            let err = String::from_utf8_lossy(&res.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            Err(CliError::invalid(format!("--check: onnxruntime cannot load {}:\n{}",
                model.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )))
        }
    }
}
