//! The interface between checkpoint readers and whoever binds weights.

use crate::dtype::DType;
use crate::tensor::Tensor;

/// What a checkpoint says about one tensor before it is loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// A set of named tensors (a safetensors directory, a GGUF file, a .mllm file).
pub trait WeightSource {
    /// A short description for messages ("safetensors dir /path (2 shards)").
    fn describe(&self) -> String;
    /// All tensor names, sorted.
    fn names(&self) -> Vec<String>;
    fn info(&self, name: &str) -> Option<TensorInfo>;
    /// The tensor, without copying where the storage allows it.
    fn load(&self, name: &str) -> Result<Tensor, String>;
}
