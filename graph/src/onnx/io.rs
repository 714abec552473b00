//! `io.json`: what a runtime needs to drive an exported graph without
//! reading it: every input and output (name, dtype, shape, meaning), the
//! KV layers and how the host advances the cache.

use serde_json::{json, Value};

use super::proto::{type_name, DataType};
use super::ExportOptions;
use crate::ir::Graph;

/// One graph input or output as ONNX declares it.
pub struct Port {
    pub name: String,
    pub elem: DataType,
    pub shape: Vec<usize>,
}

fn meaning(name: &str, seq: usize, context: usize) -> String {
    let layer = name.rsplit('.').next().unwrap_or("?");
    match name {
        "input_ids" => format!("the {seq} token ids of this step"),
        "positions" => format!(
            "the absolute position of each of the {seq} tokens (past_len, past_len+1, ... for text)"
        ),
        "past_len" => format!(
            "rows of the past buffers that hold earlier tokens (0 for a first chunk; at most {context})"
        ),
        n if n.starts_with("rope_cos") || n.starts_with("rope_sin") => format!(
            "the rotary {} table of this step's {seq} tokens: row i is row positions[i] of {n}.bin (see `rope`)",
            if n.starts_with("rope_cos") { "cosine" } else { "sine" }
        ),
        "logits" => format!("next-token logits for each of the {seq} tokens"),
        n if n.starts_with("past_key.") => format!(
            "layer {layer}'s cached keys [context, kv_heads, head_dim]: rows 0..past_len valid, the rest ignored"
        ),
        n if n.starts_with("past_value.") => format!(
            "layer {layer}'s cached values [context, kv_heads, head_dim]: rows 0..past_len valid, the rest ignored"
        ),
        n if n.starts_with("present_key.") => format!(
            "layer {layer}'s keys of this step's {seq} tokens, to store at rows past_len..past_len+{seq} of past_key.{layer}"
        ),
        n if n.starts_with("present_value.") => format!(
            "layer {layer}'s values of this step's {seq} tokens, to store at rows past_len..past_len+{seq} of past_value.{layer}"
        ),
        _ => "a graph input of the script".into(),
    }
}

fn ports(ps: &[Port], seq: usize, context: usize) -> Value {
    ps.iter()
        .map(|p| {
            json!({
                "name": p.name,
                "dtype": type_name(p.elem),
                "shape": p.shape,
                "meaning": meaning(&p.name, seq, context),
            })
        })
        .collect()
}

/// The io.json document of an export; `seq`: tokens per step (None for a
/// graph without token ids, such as a single op).
pub fn document(
    g: &Graph,
    opts: &ExportOptions,
    seq: Option<usize>,
    inputs: &[Port],
    outputs: &[Port],
    data_file: &str,
    domains: &[(String, i64)],
) -> Value {
    let context = g.context;
    let n = seq.unwrap_or(0);
    let mut doc = json!({
        "format": "onnx",
        "model": "model.onnx",
        "external_data": data_file,
        "opsets": domains.iter().map(|(d, v)| json!({"domain": d, "version": v})).collect::<Vec<_>>(),
        "seq": seq,
        "quant": opts.quant.name(),
        "target": opts.target.name(),
        "inputs": ports(inputs, n, context),
        "outputs": ports(outputs, n, context),
    });
    if seq.is_none() {
        return doc;
    }
    if opts.no_cache {
        doc["graph"] = json!("prefill without a cache");
        doc["positions"] = json!(format!("fixed 0..{n} inside the graph"));
    } else {
        doc["graph"] = json!("one step with the KV cache as inputs and outputs");
        doc["context"] = json!(context);
        doc["kv_cache"] = json!({
            "layers": g.kv.iter().map(|l| json!({
                "layer": l.layer,
                "past_key": format!("past_key.{}", l.layer),
                "past_value": format!("past_value.{}", l.layer),
                "present_key": format!("present_key.{}", l.layer),
                "present_value": format!("present_value.{}", l.layer),
            })).collect::<Vec<_>>(),
            "host": format!(
                "Keep zeroed float32 past buffers of {context} rows per layer and past_len = 0. Each step: feed input_ids, positions, past_len and the buffers; copy present_key.N / present_value.N (the step's {n} rows) into rows past_len..past_len+{n} of past_key.N / past_value.N; past_len += {n}. A step needs past_len + {n} <= {context}."
            ),
        });
    }
    doc
}
