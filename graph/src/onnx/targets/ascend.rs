//! `--target ascend`: an ONNX that Huawei's ATC (`atc --framework=5`)
//! takes, and its command line. ATC (CANN 7 and later) reads ONNX 1.12
//! models of opsets 9..18 (its operator list gives each op's versions); the
//! export stays at opset 17 with IR 8 and only ops of that list (MatMul,
//! Gather, Softmax, Where, Expand, Less, Cast, Slice, Concat, Transpose,
//! Reshape, ReduceMean, Sqrt, Reciprocal, Sigmoid, Cos, Sin, ...), static
//! shapes, no custom domains; quantized weights are exported dequantized
//! (ATC quantizes through AMCT, and blocked DequantizeLinear is opset 21).
//! `README.txt` holds the exact `atc` line with `--input_shape` built from
//! the graph's real inputs.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::super::target::Written;
use super::write_file;
use crate::{GraphError, Result};

/// The highest default-domain opset ATC reads.
pub const MAX_OPSET: i64 = 18;
pub const README_FILE: &str = "README.txt";

/// `--input_shape` for these inputs: `name:d0,d1;name:d0`.
pub fn input_shape(w: &Written) -> String {
    w.inputs
        .iter()
        .map(|p| {
            let d: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
            format!("{}:{}", p.name, d.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// The `atc` line for the model in the export's directory.
pub fn atc_command(w: &Written) -> String {
    format!(
        "atc --model=model.onnx --framework=5 --output=model --input_format=ND --input_shape=\"{}\" --soc_version=${{SOC_VERSION}} --log=error",
        input_shape(w)
    )
}

pub fn finish(w: &Written, doc: &mut Value) -> Result<()> {
    if w.opset > MAX_OPSET {
        return Err(GraphError(format!(
            "--target ascend: the graph needs opset {}, ATC reads opsets up to {MAX_OPSET}",
            w.opset
        )));
    }
    let cmd = atc_command(w);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "mllm export --target ascend: {}, for Huawei's ATC (CANN 7 or later: ONNX opsets 9..18).\n",
        if w.inputs.iter().any(|p| p.name == "past_len") {
            "one step with the KV cache as inputs and outputs (io.json says how the host drives it)"
        } else {
            "a first-chunk graph without a cache (input_ids -> logits)"
        }
    );
    let _ = writeln!(s, "Files: model.onnx (opset {}, IR 8, static shapes), model.onnx.data (weights, keep it beside model.onnx), io.json.\n", w.opset);
    let _ = writeln!(s, "Inputs:");
    for p in w.inputs {
        let _ = writeln!(
            s,
            "  {} {} {:?}",
            p.name,
            super::super::proto::type_name(p.elem),
            p.shape
        );
    }
    let _ = writeln!(
        s,
        "\n# SOC_VERSION: `npu-smi info` Name prefixed with Ascend (e.g. Ascend310P3, Ascend910B1)"
    );
    let _ = writeln!(s, "{cmd}");
    let _ = writeln!(s, "# writes model.om; float32 ops may run as float16 under ATC's default --precision_mode (add --precision_mode=must_keep_origin_dtype to keep float32)");
    let _ = writeln!(
        s,
        "\nNot run here: ATC needs the CANN toolkit; the export is checked with onnxruntime (docs/npu.md)."
    );
    write_file(w.dir, README_FILE, s.as_bytes())?;
    doc["ascend"] = json!({
        "atc": cmd,
        "input_shape": input_shape(w),
        "max_opset": MAX_OPSET,
        "readme": README_FILE,
    });
    Ok(())
}
