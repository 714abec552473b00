//! A model's step as a static ONNX graph (`mllm export`): the script's
//! forward captured for `seq` tokens, against a KV cache of `context` rows
//! or none, written by `mllm_graph::onnx` for a generic runtime or shaped
//! for Qualcomm's or Huawei's converters.

use std::path::Path;

use mllm_backends::{CpuBackend, DType};
use mllm_graph::onnx::{self, ExportOptions};
pub use mllm_graph::onnx::{Exported, QuantMode, Target};

use crate::model_files::{self, LoadOptions};
use crate::{Error, Result};

/// Rows of the past buffers when no context is given.
pub const DEFAULT_CONTEXT: usize = 1024;

/// What to export: the step's shape and the graph's form.
pub struct ExportRequest<'a> {
    /// A model script, or a built-in script's name.
    pub script: &'a str,
    pub seq: usize,
    /// Rows of the KV inputs (`None`: `DEFAULT_CONTEXT`); must be `None`
    /// with `no_cache`.
    pub context: Option<usize>,
    /// A first-chunk graph, `input_ids` -> `logits`, without KV inputs.
    pub no_cache: bool,
    pub quant: QuantMode,
    pub target: Target,
}

fn usage(msg: impl std::fmt::Display) -> Error {
    Error::generate(msg.to_string())
}

/// Captures and writes `model`'s step to `out` (`model.onnx`, its external
/// data, `io.json` and the target's files). Every argument is checked
/// before anything is loaded: a refused combination writes nothing.
pub fn export_onnx(model: &str, req: &ExportRequest, out: &Path) -> Result<Exported> {
    req.target.check(req.quant).map_err(|e| usage(e.0))?;
    if req.seq == 0 {
        return Err(usage("--seq must be at least 1"));
    }
    if req.no_cache && req.context.is_some() {
        return Err(usage(
            "--context sizes the KV inputs, which a --no-cache graph does not have",
        ));
    }
    // A no-cache graph is captured against a cache it then drops.
    let context = if req.no_cache {
        req.seq
    } else {
        req.context.unwrap_or(DEFAULT_CONTEXT)
    };
    if context < req.seq {
        return Err(usage(format!(
            "--context {context} cannot hold a step of --seq {} tokens",
            req.seq
        )));
    }
    let files = model_files::open_with(
        model,
        LoadOptions {
            // QNN writes float weights too, but reads the checkpoint's
            // quantized types and scales for its quantization overrides.
            dequantize: req.quant == QuantMode::Dequantize && req.target != Target::Qnn,
            ..LoadOptions::default()
        },
    )?;
    let loaded = model_files::load_model(&files, Some(req.script))?;
    let graph = mllm_interpreter::compile::capture_with_kv(
        &loaded,
        &CpuBackend,
        req.seq,
        context,
        false,
        DType::F32,
        false,
    )
    .map_err(|e| Error::generate(format!("cannot capture {}: {e}", req.script)))?;
    // The checkpoint's tensors are read again while writing: free the
    // loaded copies first.
    drop(loaded);
    let opts = ExportOptions {
        quant: req.quant,
        target: req.target,
        no_cache: req.no_cache,
    };
    onnx::export(graph, files.weights.as_ref(), &opts, out)
        .map_err(|e| Error::generate(format!("cannot export {model}: {e}")))
}
