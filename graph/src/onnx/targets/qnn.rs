//! `--target qnn`: the export shaped as Qualcomm's `qnn-onnx-converter` and
//! the Hexagon HTP want it.
//! - Static shapes and the KV cache as I/O, as every export has them.
//! - No arithmetic on positions: the rotary tables of the step are inputs
//!   (`rope`), fed by the host from `rope_cos.bin` / `rope_sin.bin`
//!   (`--no-cache` graphs have them as constants already).
//! - Rank <= 4 for every value of the graph; a value of higher rank is
//!   refused by op and shape (the lowering itself stays at rank <= 4).
//! - Linears are MatMul against `[in, out]` weights (the converter turns a
//!   MatMul with a constant operand into FullyConnected). A 1x1 Conv form
//!   is not written: ONNX Conv is NCHW, so each linear would need a
//!   Transpose on either side that the converter's NHWC layout pass then
//!   has to cancel; nothing measured says HTP gains from it yet.
//! - Quantized checkpoint weights are float in the graph (exactly what our
//!   kernels compute) and `quant_overrides.json` (`overrides`) gives their
//!   encodings, so the converter re-quantizes them to the same codes.
//! - `README.txt` holds the converter, model-library and HTP
//!   context-binary commands for the files written, with the real inputs.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::super::target::{Extras, Written};
use super::{overrides, rope, write_file};
use crate::ir::{Def, Graph};
use crate::{GraphError, Result};

/// The highest rank HTP takes.
pub const MAX_RANK: usize = 4;
pub const OVERRIDES_FILE: &str = "quant_overrides.json";
pub const README_FILE: &str = "README.txt";

pub fn prepare(g: Graph) -> Result<(Graph, Extras)> {
    let (g, rope) = rope::tables_as_inputs(g)?;
    check_ranks(&g)?;
    Ok((g, Extras { rope }))
}

/// Refuses a graph with a value of rank above `MAX_RANK`, naming it.
pub fn check_ranks(g: &Graph) -> Result<()> {
    for (i, v) in g.values.iter().enumerate() {
        if v.meta.rank() <= MAX_RANK {
            continue;
        }
        let what = match &v.def {
            Def::Node { op, .. } => format!("%{i} ({})", op.name()),
            Def::Input { name } => format!("input `{name}`"),
            Def::Param { name } => format!("parameter `{name}`"),
            Def::Const { .. } => format!("constant %{i}"),
        };
        return Err(GraphError(format!(
            "--target qnn: {what} is {} of rank {}; HTP takes rank <= {MAX_RANK}",
            v.meta,
            v.meta.rank()
        )));
    }
    Ok(())
}

fn dims(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub fn finish(w: &Written, doc: &mut Value) -> Result<()> {
    let mut files = vec![
        super::super::MODEL_FILE.to_string(),
        super::super::DATA_FILE.to_string(),
        super::super::IO_FILE.to_string(),
    ];
    let mut tables = vec![];
    for t in &w.extras.rope {
        let (cf, sf) = (
            format!("{}.bin", t.cos_input),
            format!("{}.bin", t.sin_input),
        );
        for (file, v) in [(&cf, &t.cos), (&sf, &t.sin)] {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            write_file(w.dir, file, &bytes)?;
            files.push(file.clone());
        }
        tables.push(json!({
            "cos_input": t.cos_input, "sin_input": t.sin_input,
            "cos_file": cf, "sin_file": sf,
            "rows": t.rows, "width": t.width, "dtype": "float32",
            "host": format!(
                "{} = rows positions[0..N] of {cf} (little-endian float32 [{}, {}], row p for position p), {} likewise from {sf}; positions of a step are past_len .. past_len+N-1{}",
                t.cos_input, t.rows, t.width, t.sin_input,
                if t.position_rows > 1 {
                    format!(" (text positions: the graph was captured with {} rows of multimodal positions, all equal for text; tokens of an image need tables the host computes from their own positions)", t.position_rows)
                } else {
                    String::new()
                }
            ),
        }));
    }
    let over = overrides::build(w.src, &w.params)?;
    let mut encodings = vec![];
    if let Some((o, layouts)) = &over {
        let text = serde_json::to_string_pretty(o)
            .map_err(|e| GraphError(format!("cannot encode {OVERRIDES_FILE}: {e}")))?;
        write_file(w.dir, OVERRIDES_FILE, text.as_bytes())?;
        files.push(OVERRIDES_FILE.into());
        for l in layouts {
            encodings.push(json!({
                "name": l.name, "channel_axis": l.channel_axis,
                "block_axis": l.block_axis, "block_size": l.block_size,
            }));
        }
    }
    write_file(w.dir, README_FILE, readme(w, over.is_some()).as_bytes())?;
    files.push(README_FILE.into());
    if !tables.is_empty() {
        doc["rope"] = json!(tables);
        if let Some(kv) = doc.get_mut("kv_cache") {
            kv["host"] = json!(format!(
                "{} The rotary tables of the step replace positions: feed rows past_len..past_len+N of the rope tables (see `rope`).",
                kv["host"].as_str().unwrap_or("")
            ));
        }
    }
    doc["qnn"] = json!({
        "max_rank": MAX_RANK,
        "linears": "MatMul against [in, out] weights named CHECKPOINT_NAME.T",
        "quantization_overrides": over.as_ref().map(|_| OVERRIDES_FILE),
        "encodings": encodings,
        "readme": README_FILE,
        "files": files,
    });
    Ok(())
}

fn readme(w: &Written, quantized: bool) -> String {
    let mut s = String::new();
    let graph = if w.extras.rope.is_empty() && !w.inputs.iter().any(|p| p.name == "past_len") {
        "a first-chunk graph without a cache (input_ids -> logits)".to_string()
    } else {
        format!(
            "one step of {} tokens with the KV cache as inputs and outputs (io.json says how the host drives it)",
            w.seq.unwrap_or(0)
        )
    };
    let _ = writeln!(
        s,
        "mllm export --target qnn: {graph}, for Qualcomm's qnn-onnx-converter and the Hexagon HTP.\n"
    );
    let _ = writeln!(s, "Files: model.onnx (opset {}, static shapes, rank <= {MAX_RANK}), model.onnx.data (weights), io.json (inputs, outputs, host loop){}{}.\n",
        w.opset,
        if w.extras.rope.is_empty() { "" } else { ", rope_*.bin (rotary tables, row p for position p)" },
        if quantized { ", quant_overrides.json (the encodings of our quantized weights)" } else { "" });
    let _ = writeln!(s, "Inputs:");
    for p in w.inputs {
        let _ = writeln!(
            s,
            "  {} {} [{}]",
            p.name,
            super::super::proto::type_name(p.elem),
            dims(&p.shape)
        );
    }
    let _ = writeln!(s, "Outputs:");
    for p in w.outputs {
        let _ = writeln!(
            s,
            "  {} {} [{}]",
            p.name,
            super::super::proto::type_name(p.elem),
            dims(&p.shape)
        );
    }
    let input_dims: String = w
        .inputs
        .iter()
        .map(|p| format!("  --input_dim {} {} \\\n", p.name, dims(&p.shape)))
        .collect();
    let _ = writeln!(
        s,
        "\ninput_list.txt (yours to record): one calibration step per line, `NAME:=PATH` for every input above, each PATH a raw little-endian file of that input's dtype and shape, dumped from a host loop (tests/onnx/check.py is one) over representative prompts.\n"
    );
    let _ = writeln!(
        s,
        "# 1. ONNX -> QNN model source (qnn/model.cpp, qnn/model.bin)"
    );
    let quant_args = if quantized {
        "  --quantization_overrides quant_overrides.json \\\n  --input_list input_list.txt \\\n  --act_bitwidth 16 \\\n  --bias_bitwidth 32\n"
    } else {
        "  --input_list input_list.txt \\\n  --act_bitwidth 16 \\\n  --weights_bitwidth 8 \\\n  --bias_bitwidth 32\n"
    };
    let _ = write!(
        s,
        "qnn-onnx-converter \\\n  --input_network model.onnx \\\n  --output_path qnn/model.cpp \\\n{input_dims}{quant_args}"
    );
    if quantized {
        let _ = writeln!(s, "# (weights only, no calibration: replace --input_list and --act_bitwidth by --float_fallback --float_bitwidth 16; layers without an encoding then run in fp16)");
    } else {
        let _ = writeln!(
            s,
            "# (float on HTP instead: drop the last four options and pass --float_bitwidth 16)"
        );
    }
    let _ = writeln!(
        s,
        "# (SDKs before QAIRT 2.x spell them --act_bw, --weight_bw, --bias_bw, --float_bw)\n"
    );
    let _ = writeln!(s, "# 2. model library for the host that builds the context");
    let _ = writeln!(s, "qnn-model-lib-generator -c qnn/model.cpp -b qnn/model.bin -o qnn/lib -t x86_64-linux-clang\n");
    let _ = writeln!(s, "# 3. HTP context binary (what the device loads)");
    let _ = writeln!(s, "qnn-context-binary-generator \\\n  --backend \"$QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnHtp.so\" \\\n  --model qnn/lib/x86_64-linux-clang/libmodel.so \\\n  --binary_file model_htp \\\n  --output_dir qnn/ctx");
    let _ = writeln!(s, "\nNot run here: these commands need the QNN SDK; the export is checked with onnxruntime (docs/npu.md).");
    s
}

#[cfg(test)]
mod tests {
    use mllm_backends::{DType, Op, TensorMeta};

    use super::check_ranks;
    use crate::ir::{Def, Graph};

    #[test]
    fn values_above_rank_four_are_refused_by_op_and_shape() {
        let mut g = Graph::default();
        let x = g.push(
            TensorMeta::new(vec![2, 3, 4, 5], DType::F32),
            Def::Input { name: "x".into() },
        );
        assert!(check_ranks(&g).is_ok());
        let y = g
            .node(
                Op::Reshape {
                    shape: vec![2, 3, 2, 2, 5],
                },
                vec![x],
            )
            .expect("reshape");
        g.outputs.push(("y".into(), y));
        let err = check_ranks(&g).expect_err("rank 5").0;
        assert!(
            err.contains("%1 (reshape)") && err.contains("rank 5") && err.contains("rank <= 4"),
            "{err}"
        );
    }
}
