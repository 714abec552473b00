//! The seam between the interpreter and the hardware.

use crate::error::Result;
use crate::op::Op;
use crate::tensor::Tensor;

/// A device that runs ops eagerly. Inputs are in the order `Op` documents;
/// outputs are new tensors (or views sharing the input's buffer).
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor>;
}
