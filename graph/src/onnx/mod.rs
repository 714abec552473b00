//! ONNX export of captured graphs: a static-shape standard ONNX model
//! (opset 17, default domain) that onnxruntime and the NPU vendors'
//! converters read, with the weights as external data beside it and an
//! `io.json` that says how to drive it.
//!
//! The pipeline, one file each: `prefill` (the `--no-cache`
//! specialisation), the passes fold, cse and dce (the fusing passes are
//! not run: their fused ops lower too, but standard ops are what
//! converters pattern-match), `target` (per-target graph rewrites and
//! files; the vendors' own in `targets/`: qnn, ascend), `lower`
//! (our ops as ONNX nodes, one file per op family, through `builder`),
//! `weights` + `quant` (parameters read from the checkpoint, widened or
//! kept quantized), `external` (the data file), `io` (io.json). Message
//! types come from ONNX's own `onnx.proto` (`proto`).

pub mod proto;

mod builder;
mod external;
mod io;
mod lower;
mod prefill;
mod quant;
mod target;
pub mod targets;
mod weights;

use std::path::{Path, PathBuf};

use mllm_backends::weights::WeightSource;
use mllm_backends::DType;
use prost::Message;

use crate::ir::Graph;
use crate::passes::{cse, dce, fold};
use crate::{GraphError, Result};
use io::Port;
use lower::Ctx;
use proto::{value_info, DataType, GraphProto, ModelProto, OperatorSetIdProto};

pub use target::{Extras, Target};
pub use weights::QuantMode;

pub const MODEL_FILE: &str = "model.onnx";
pub const DATA_FILE: &str = "model.onnx.data";
pub const IO_FILE: &str = "io.json";

#[derive(Clone, Copy, Debug)]
pub struct ExportOptions {
    pub quant: QuantMode,
    pub target: Target,
    /// A first-chunk graph without KV I/O (`input_ids` -> `logits`).
    pub no_cache: bool,
}

impl Default for ExportOptions {
    fn default() -> ExportOptions {
        ExportOptions {
            quant: QuantMode::Dequantize,
            target: Target::Generic,
            no_cache: false,
        }
    }
}

/// What an export wrote.
#[derive(Debug)]
pub struct Exported {
    pub model: PathBuf,
    pub data: PathBuf,
    pub io: PathBuf,
    pub nodes: usize,
    pub initializers: usize,
    pub data_bytes: u64,
}

/// The graph an export lowers: the no-cache specialisation when asked,
/// fold/cse/dce, then the target's rewrites (and what they learned).
pub fn prepare(g: Graph, opts: &ExportOptions) -> Result<(Graph, Extras)> {
    let g = if opts.no_cache {
        prefill::without_cache(&g)?
    } else {
        g
    };
    let g = crate::passes::run(
        g,
        &[("fold", fold::fold), ("cse", cse::cse), ("dce", dce::dce)],
    )?;
    opts.target.prepare(g)
}

/// Exports captured graph `g` (parameters read from `weights`) into `dir`:
/// `model.onnx`, `model.onnx.data` and `io.json`, replacing them.
pub fn export(
    g: Graph,
    weights: &dyn WeightSource,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<Exported> {
    opts.target.check(opts.quant)?;
    let (g, extras) = prepare(g, opts)?;
    export_prepared_with(&g, &extras, weights, opts, dir)
}

/// `export` of a graph already prepared (tests export fused graphs this way).
pub fn export_prepared(
    g: &Graph,
    weights: &dyn WeightSource,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<Exported> {
    export_prepared_with(g, &Extras::default(), weights, opts, dir)
}

/// `export_prepared` with what the target's rewrites learned.
pub fn export_prepared_with(
    g: &Graph,
    extras: &Extras,
    weights: &dyn WeightSource,
    opts: &ExportOptions,
    dir: &Path,
) -> Result<Exported> {
    opts.target.check(opts.quant)?;
    // Tokens per step (None for a graph that takes no token ids).
    let seq = g
        .input("input_ids")
        .and_then(|i| g.values[i].meta.shape.first().copied());
    // Opset 17 unless a kept weight needs blocked DequantizeLinear (21).
    let opset = match opts.quant {
        QuantMode::Dequantize => proto::OPSET,
        QuantMode::Keep => quant::opset_for(g.values.iter().filter_map(|v| match &v.def {
            crate::ir::Def::Param { name } => weights.info(name).map(|i| i.dtype),
            _ => None,
        })),
    };
    let mut c = Ctx::new(g, weights::Weights::new(weights, opts.quant), opset);
    for name in g
        .inputs()
        .map(|(n, _)| n)
        .chain(g.outputs.iter().map(|(n, _)| n.as_str()))
    {
        c.b.reserve(name);
    }
    let mut inputs = vec![];
    for (name, id) in g.inputs() {
        let m = &g.values[id].meta;
        let elem = match m.dtype {
            // Integer inputs are int64, as ONNX models' token ids usually are.
            DType::I32 => {
                let cast = c.b.cast(name, DataType::Int32);
                c.bind(id, cast);
                DataType::Int64
            }
            DType::F32 => {
                c.bind(id, name.to_string());
                DataType::Float
            }
            d => {
                return Err(GraphError(format!(
                    "graph input `{name}` is {d}; the export takes f32 and i32 inputs (an f32 KV cache)"
                )))
            }
        };
        inputs.push(Port {
            name: name.to_string(),
            elem,
            shape: m.shape.clone(),
        });
    }
    for i in 0..g.values.len() {
        c.lower(i)?;
    }
    let mut outputs = vec![];
    for (name, o) in &g.outputs {
        let v = c.value(*o)?;
        // Each output its own name, even when two outputs are one value.
        c.b.node_into("Identity", &[&v], name, vec![]);
        let m = &g.values[*o].meta;
        outputs.push(Port {
            name: name.clone(),
            elem: if m.dtype == DType::I32 {
                DataType::Int32
            } else {
                DataType::Float
            },
            shape: m.shape.clone(),
        });
    }

    std::fs::create_dir_all(dir)
        .map_err(|e| GraphError(format!("cannot create {}: {e}", dir.display())))?;
    let external = external::write(dir, DATA_FILE, &c.w.pending, weights)?;
    let data_bytes = std::fs::metadata(dir.join(DATA_FILE)).map_or(0, |m| m.len());
    let domains = vec![(String::new(), opset)];
    let nodes = c.b.nodes.len();
    let mut initializer = std::mem::take(&mut c.b.inline);
    initializer.extend(external);
    let initializers = initializer.len();
    let graph = GraphProto {
        node: std::mem::take(&mut c.b.nodes),
        name: Some("mllm".into()),
        initializer,
        input: inputs
            .iter()
            .map(|p| value_info(&p.name, p.elem, &p.shape))
            .collect(),
        output: outputs
            .iter()
            .map(|p| value_info(&p.name, p.elem, &p.shape))
            .collect(),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(proto::ir_version(opset)),
        opset_import: domains
            .iter()
            .map(|(d, v)| OperatorSetIdProto {
                domain: Some(d.clone()),
                version: Some(*v),
            })
            .collect(),
        producer_name: Some("mllm".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph),
        ..Default::default()
    };
    let write = |file: &str, bytes: &[u8]| {
        let p = dir.join(file);
        std::fs::write(&p, bytes)
            .map_err(|e| GraphError(format!("cannot write {}: {e}", p.display())))
            .map(|_| p)
    };
    let model_path = write(MODEL_FILE, &model.encode_to_vec())?;
    let mut doc = io::document(g, opts, seq, &inputs, &outputs, DATA_FILE, &domains);
    let written = target::Written {
        g,
        src: weights,
        params: c.w.params(),
        inputs: &inputs,
        outputs: &outputs,
        dir,
        seq,
        opset,
        extras,
    };
    opts.target.finish(&written, &mut doc)?;
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| GraphError(format!("cannot encode io.json: {e}")))?;
    let io_path = write(IO_FILE, text.as_bytes())?;
    Ok(Exported {
        model: model_path,
        data: dir.join(DATA_FILE),
        io: io_path,
        nodes,
        initializers,
        data_bytes,
    })
}
