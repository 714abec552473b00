//! The executor seam: the evaluator hands every native op to an `Executor`.
//! `Eager` runs it on a backend now; `Trace` runs it and records the op
//! sequence, the starting point for capturing a static graph for an NPU.

use mllm_backends::{Backend, BackendError, Op, Tensor};

pub trait Executor {
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError>;
}

/// Runs ops eagerly on a backend.
pub struct Eager<B: Backend> {
    pub backend: B,
}

impl<B: Backend> Executor for Eager<B> {
    #[inline]
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        self.backend.run(op, inputs)
    }
}

/// One recorded op call: the op and the shapes that flowed through it.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    pub op: Op,
    pub inputs: Vec<Vec<usize>>,
    pub output: Vec<usize>,
}

/// Wraps another executor and records every call.
pub struct Trace<E: Executor> {
    pub inner: E,
    pub entries: Vec<TraceEntry>,
}

impl<E: Executor> Trace<E> {
    pub fn new(inner: E) -> Trace<E> {
        Trace {
            inner,
            entries: vec![],
        }
    }
}

impl<E: Executor> Executor for Trace<E> {
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        let out = self.inner.run(op, inputs)?;
        self.entries.push(TraceEntry {
            op: op.clone(),
            inputs: inputs.iter().map(|t| t.shape().to_vec()).collect(),
            output: out.shape().to_vec(),
        });
        Ok(out)
    }
}
