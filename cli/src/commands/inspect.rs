//! `mllm inspect FILE [--json]`: what a checkpoint holds, for `.mllm`, GGUF,
//! safetensors (a file or a Hugging Face directory) and PyTorch zip
//! checkpoints: a metadata summary (GGUF key/values with arrays shortened),
//! then every tensor's name, dtype, shape and size, then totals. Each
//! format is read into one `Report`, printed as text or JSON, so the two
//! outputs always agree. With `--backend NAME`, the model is also loaded
//! and its decode step captured (`step_ops.rs`): how many of its ops that
//! backend has no kernel for.

use mllm_runtime::inspect::Report;
use serde_json::{json, Value};

use super::convert::human_bytes;
use crate::CliResult;

/// `backend`: also count the decode step's ops without a kernel on it.
pub fn run(path: &str, json_out: bool, backend: Option<(&str, usize)>) -> CliResult<()> {
    let report = mllm_runtime::inspect::report(path)?;
    let step = match backend {
        Some((name, device)) => Some(super::step_ops::StepOps::of(path, name, device)?),
        None => None,
    };
    if json_out {
        println!("{}", to_json(path, &report, step.map(|s| s.json())));
    } else {
        print!("{}", to_text(path, &report));
        if let Some(s) = step {
            print!("{}", s.text());
        }
    }
    Ok(())
}
fn totals(r: &Report) -> (usize, u64, u64) {
    let bytes = r.rows.iter().map(|x| x.bytes).sum();
    let params = r
        .rows
        .iter()
        .map(|x| x.shape.iter().product::<usize>() as u64)
        .sum();
    (r.rows.len(), bytes, params)
}

fn to_text(path: &str, r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{path}: {}", r.format);
    let kw = r
        .summary
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0)
        .min(40);
    for (k, v) in &r.summary {
        let _ = writeln!(s, "  {k:kw$}  {v}");
    }
    let shapes: Vec<String> = r.rows.iter().map(|x| format!("{:?}", x.shape)).collect();
    let nw = r
        .rows
        .iter()
        .map(|x| x.name.len())
        .max()
        .unwrap_or(0)
        .min(64);
    let dw = r.rows.iter().map(|x| x.dtype.len()).max().unwrap_or(0);
    let sw = shapes.iter().map(String::len).max().unwrap_or(0);
    let _ = writeln!(s, "tensors:");
    for (x, shape) in r.rows.iter().zip(&shapes) {
        let note = x
            .note
            .as_ref()
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {:nw$}  {:dw$}  {:sw$}  {:>10}{note}",
            x.name,
            x.dtype,
            shape,
            human_bytes(x.bytes)
        );
    }
    let (n, bytes, params) = totals(r);
    let _ = writeln!(
        s,
        "total: {n} tensors, {} ({bytes} bytes), {params} params",
        human_bytes(bytes)
    );
    s
}

fn to_json(path: &str, r: &Report, step: Option<Value>) -> String {
    let (n, bytes, params) = totals(r);
    let tensors: Vec<Value> = r
        .rows
        .iter()
        .map(|x| {
            let mut o =
                json!({"name": x.name, "dtype": x.dtype, "shape": x.shape, "bytes": x.bytes});
            if let Some(note) = &x.note {
                o["note"] = json!(note);
            }
            o
        })
        .collect();
    let mut doc = json!({
        "path": path,
        "format": r.format,
        "metadata": r.meta,
        "tensors": tensors,
        "totals": {"tensors": n, "bytes": bytes, "params": params},
    });
    if let Some(step) = step {
        doc["decode_step"] = step;
    }
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}
