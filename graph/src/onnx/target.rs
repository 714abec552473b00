//! Who an export is shaped for. Each target may rewrite the graph (IR to
//! IR, before the common lowering) and add files of its own beside
//! `model.onnx`; the generic target is standard ONNX for onnxruntime and
//! any converter. The vendors' targets live in `targets/`, one file each:
//! `qnn` (Qualcomm's converter and the Hexagon HTP: rope tables as inputs,
//! rank <= 4, quantization overrides, the SDK's commands) and `ascend`
//! (Huawei's ATC: a supported opset, the `atc` command line).

use std::path::Path;

use mllm_backends::weights::WeightSource;
use serde_json::Value;

use super::io::Port;
use super::targets::{ascend, qnn, RopeTable};
use super::weights::QuantMode;
use crate::ir::Graph;
use crate::{GraphError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Target {
    /// Standard ONNX, opset 17, static shapes.
    #[default]
    Generic,
    /// Qualcomm QNN (`qnn-onnx-converter`, Hexagon HTP).
    Qnn,
    /// Huawei Ascend (`atc --framework=5`).
    Ascend,
}

/// What a target's rewrite learned that its files need (the rotary tables
/// it turned into inputs).
#[derive(Debug, Default)]
pub struct Extras {
    pub rope: Vec<RopeTable>,
}

/// What an export wrote, as a target's own files see it.
pub struct Written<'a> {
    pub g: &'a Graph,
    pub src: &'a dyn WeightSource,
    /// Every parameter planned as an f32 initializer: (checkpoint name,
    /// stored transposed, ONNX initializer name).
    pub params: Vec<(String, bool, String)>,
    pub inputs: &'a [Port],
    pub outputs: &'a [Port],
    pub dir: &'a Path,
    pub seq: Option<usize>,
    pub opset: i64,
    pub extras: &'a Extras,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Generic => "generic",
            Target::Qnn => "qnn",
            Target::Ascend => "ascend",
        }
    }

    /// Refuses option combinations the target's tools cannot take.
    pub fn check(self, quant: QuantMode) -> Result<()> {
        match (self, quant) {
            (Target::Qnn, QuantMode::Keep) => Err(GraphError(
                "--target qnn takes --quant dequantize: the graph holds float weights (exactly what our kernels compute) and quant_overrides.json carries their encodings for qnn-onnx-converter".into(),
            )),
            (Target::Ascend, QuantMode::Keep) => Err(GraphError(
                "--target ascend takes --quant dequantize: ATC reads float ONNX (opset <= 18; blocked DequantizeLinear needs opset 21) and quantizes with AMCT".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The target's rewrites of the graph before lowering.
    pub fn prepare(self, g: Graph) -> Result<(Graph, Extras)> {
        match self {
            Target::Generic | Target::Ascend => Ok((g, Extras::default())),
            Target::Qnn => qnn::prepare(g),
        }
    }

    /// Writes the target's own files after `model.onnx` and adds what a
    /// host needs to know to `io.json` (`doc`).
    pub fn finish(self, w: &Written, doc: &mut Value) -> Result<()> {
        match self {
            Target::Generic => Ok(()),
            Target::Qnn => qnn::finish(w, doc),
            Target::Ascend => ascend::finish(w, doc),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Target, String> {
        match s {
            "generic" => Ok(Target::Generic),
            "qnn" => Ok(Target::Qnn),
            "ascend" => Ok(Target::Ascend),
            _ => Err(format!(
                "--target takes `generic`, `qnn` or `ascend`, not `{s}`"
            )),
        }
    }
}
