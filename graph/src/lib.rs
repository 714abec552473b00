//! mllm-graph owns the captured static graph: an SSA IR whose nodes are the
//! backends' `Op`s over value ids, with typed values, parameters named by
//! their checkpoint names (referenced, never copied), and explicit named
//! inputs and outputs, the KV cache among them as an NPU runtime wants it.
//! It holds the verifier, the passes (one file each, `Graph -> Graph`), the
//! memory planner and the compiled executor that replays a graph on any
//! `Backend` without the interpreter. It knows `mllm-backends` only: the
//! capture that produces graphs lives in the interpreter.

pub mod exec;
pub mod ir;
pub mod onnx;
pub mod passes;
pub mod plan;
pub mod text;
pub mod verify;

pub use exec::Compiled;
pub use ir::{Def, GValue, Graph, KvLayer, StateLayer, ValueId};
pub use plan::{plan_memory, plan_memory_with, MemoryPlan};

/// A graph that cannot be built, checked or run, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphError(pub String);

impl std::fmt::Display for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GraphError {}

impl From<mllm_backends::BackendError> for GraphError {
    fn from(e: mllm_backends::BackendError) -> GraphError {
        GraphError(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, GraphError>;

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(GraphError(msg.into()))
}
