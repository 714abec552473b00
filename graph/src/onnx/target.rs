//! Who an export is shaped for. Each target may rewrite the graph (IR to
//! IR: linears as 1x1 convolutions, rank limits, rope tables as inputs)
//! before the common lowering, and may add files of its own; the generic
//! target is standard ONNX for onnxruntime and any converter. The QNN and
//! Ascend targets (issue #12) come as variants here, each with its own
//! file of graph rewrites.

use crate::ir::Graph;
use crate::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Target {
    /// Standard ONNX, opset 17, static shapes.
    #[default]
    Generic,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Generic => "generic",
        }
    }

    /// The target's rewrites of the graph before lowering.
    pub fn prepare(self, g: Graph) -> Result<Graph> {
        match self {
            Target::Generic => Ok(g),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Target, String> {
        match s {
            "generic" => Ok(Target::Generic),
            "qnn" | "ascend" => Err(format!(
                "--target {s} is not implemented yet (it comes with the {s} route); --target generic writes standard ONNX"
            )),
            _ => Err(format!("--target takes `generic`, not `{s}`")),
        }
    }
}
