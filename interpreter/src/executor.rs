//! The executor seam: the evaluator hands every tensor-producing step to an
//! `Executor`: native ops, constants made from script literals, model
//! inputs, checkpoint weights (once, at load), KV-cache appends, and reads of
//! tensor data back to the host. Nothing the interpreter computes with
//! bypasses it, so a device backend or a graph capture sees all of it.
//!
//! `Eager` runs everything on a backend now; `Trace` records the op sequence
//! (counts per step); graph capture (`crate::capture`) records an SSA graph.

use mllm_backends::{Backend, BackendError, CpuBackend, Op, Tensor, TensorMeta};

use crate::cache::KvCache;

pub trait Executor {
    /// Runs one native op.
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError>;

    /// A tensor the interpreter made from script values (literals, scalars
    /// of mixed arithmetic, index lists).
    fn constant(&mut self, t: Tensor) -> Result<Tensor, BackendError>;

    /// A named input of the function a runner calls (`input_ids`, ...).
    fn input(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError>;

    /// The checkpoint tensor at `name`, once, while the model is built.
    fn weight(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError>;

    /// Host data of `t` (for `to_list`, `item`, integer indexes from tensors).
    fn read(&mut self, t: &Tensor) -> Result<Tensor, BackendError>;

    /// Appends `k [s, hk, dk]`, `v [s, hk, dv]` to layer `layer` of `cache`;
    /// returns every key and value the layer holds.
    fn kv_append(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), BackendError>;

    /// The state tensors of recurrent layer `layer` of `cache` (Gated
    /// DeltaNet's conv and delta-rule states), `None` before the first
    /// write. `shapes`: the state's types as the script declares them
    /// (`recurrent_state(shapes)`; the caller starts from zeros of them when
    /// this gives `None`). Eager executors read the cache; a graph capture
    /// makes the state graph inputs of the declared types, and refuses a
    /// state declared without them.
    fn state_read(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        shapes: Option<&[TensorMeta]>,
    ) -> Result<Option<Vec<Tensor>>, BackendError> {
        let _ = shapes;
        Ok(cache.state(layer).map(<[Tensor]>::to_vec))
    }

    /// A side output the script hands the runner (`emit(name, x)`): the
    /// final hidden states an MTP head reads. Ignored unless the executor
    /// was asked to keep them.
    fn emit(&mut self, name: &str, t: &Tensor) -> Result<(), BackendError> {
        let _ = (name, t);
        Ok(())
    }

    /// Whether `emit(name, ..)` is kept (the `keeps` builtin).
    fn keeps(&self, name: &str) -> bool {
        let _ = name;
        false
    }

    /// Replaces that state with `states`, covering `tokens` more positions.
    fn state_write(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        states: Vec<Tensor>,
        tokens: usize,
    ) -> Result<(), BackendError> {
        cache
            .set_state(layer, states, tokens)
            .map_err(|msg| BackendError::Invalid {
                op: "set_state",
                msg,
            })
    }
}

/// Runs everything eagerly on a backend.
/// An op its backend has no kernel for is an error naming both; running
/// such ops on the CPU is the fallback policy's, applied to the backend
/// (`mllm_backends::fallback`), so compiled graphs follow it too.
pub struct Eager<B: Backend> {
    pub backend: B,
    /// Check every op's output and every model input for NaN and
    /// infinities (`--check-numerics`); the first one is an error.
    pub check_numerics: bool,
    /// The side outputs (`emit`) of the steps run since the runner last
    /// took them, in order; `None`: not kept.
    pub emitted: Option<Vec<(String, Tensor)>>,
}

impl<B: Backend> Eager<B> {
    pub fn new(backend: B) -> Eager<B> {
        Eager {
            backend,
            check_numerics: false,
            emitted: None,
        }
    }
}

impl Eager<CpuBackend> {
    pub fn cpu() -> Eager<CpuBackend> {
        Eager::new(CpuBackend)
    }
}

impl<B: Backend> Eager<B> {
    fn run_op(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        if self.backend.supports(op) {
            return self.backend.run(op, inputs);
        }
        Err(mllm_backends::backend::unsupported(op, self.backend.name()))
    }

    /// `check_numerics` for one op, on host copies of device tensors.
    fn check_output(&self, op: &Op, inputs: &[&Tensor], out: &Tensor) -> Result<(), BackendError> {
        let host = |t: &Tensor| match t.device() {
            Some(_) => self.backend.download(t),
            None => Ok(t.clone()),
        };
        let out = host(out)?;
        if crate::numerics::first_non_finite(&out).is_none() {
            return Ok(());
        }
        let ins: Vec<Tensor> = inputs.iter().map(|t| host(t)).collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = ins.iter().collect();
        crate::numerics::check_op_output(op, &refs, &out)
    }
}

impl<B: Backend> Executor for Eager<B> {
    #[inline]
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        let out = self.run_op(op, inputs)?;
        if self.check_numerics {
            self.check_output(op, inputs, &out)?;
        }
        Ok(out)
    }

    fn constant(&mut self, t: Tensor) -> Result<Tensor, BackendError> {
        self.backend.upload(t)
    }

    fn input(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        if self.check_numerics {
            if let Some((at, v)) = crate::numerics::first_non_finite(&t) {
                return Err(BackendError::NonFinite {
                    op: "input",
                    msg: format!(
                        "non-finite value: the input `{name}` ({} {:?}) holds {} at flat index {at}",
                        t.dtype().name(),
                        t.shape(),
                        crate::numerics::describe_value(v)
                    ),
                });
            }
        }
        self.backend.upload(t)
    }

    fn weight(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        self.backend.prepare_weight(name, t)
    }

    fn read(&mut self, t: &Tensor) -> Result<Tensor, BackendError> {
        self.backend.download(t)
    }

    fn kv_append(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), BackendError> {
        // The CPU keeps the cache in host memory; a device backend keeps
        // its layers in device memory behind this same call.
        self.backend.kv_append(cache, layer, k, v)
    }

    fn emit(&mut self, name: &str, t: &Tensor) -> Result<(), BackendError> {
        if let Some(kept) = self.emitted.as_mut() {
            kept.push((name.to_string(), t.clone()));
        }
        Ok(())
    }

    fn keeps(&self, _name: &str) -> bool {
        self.emitted.is_some()
    }
}

/// One recorded op call: the op and the shapes that flowed through it.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    pub op: Op,
    pub inputs: Vec<Vec<usize>>,
    pub output: Vec<usize>,
}

/// Wraps another executor and records every op call.
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

    fn constant(&mut self, t: Tensor) -> Result<Tensor, BackendError> {
        self.inner.constant(t)
    }

    fn input(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        self.inner.input(name, t)
    }

    fn weight(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        self.inner.weight(name, t)
    }

    fn read(&mut self, t: &Tensor) -> Result<Tensor, BackendError> {
        self.inner.read(t)
    }

    fn kv_append(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), BackendError> {
        self.inner.kv_append(cache, layer, k, v)
    }

    fn state_read(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        shapes: Option<&[TensorMeta]>,
    ) -> Result<Option<Vec<Tensor>>, BackendError> {
        self.inner.state_read(cache, layer, shapes)
    }

    fn state_write(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        states: Vec<Tensor>,
        tokens: usize,
    ) -> Result<(), BackendError> {
        self.inner.state_write(cache, layer, states, tokens)
    }

    fn emit(&mut self, name: &str, t: &Tensor) -> Result<(), BackendError> {
        self.inner.emit(name, t)
    }

    fn keeps(&self, name: &str) -> bool {
        self.inner.keeps(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mllm_backends::fallback::testing::BinaryOnly;
    use mllm_backends::{BinaryOp, UnaryOp};

    #[test]
    fn unsupported_ops_are_errors_or_run_on_the_cpu_never_silently_dropped() {
        let x = Tensor::from_f32(vec![-1.0, 2.0], vec![2]).expect("x");
        let relu = Op::Unary(UnaryOp::Relu);
        let mut strict = Eager::new(BinaryOnly);
        let err = strict.run(&relu, &[&x]).expect_err("no relu kernel");
        assert_eq!(
            err,
            BackendError::Unsupported {
                op: "unary",
                backend: "binary-only"
            }
        );
        assert!(strict.run(&Op::Binary(BinaryOp::Add), &[&x, &x]).is_ok());
        let mut lenient = Eager::new(mllm_backends::fallback::CpuFallback::new(BinaryOnly));
        let y = lenient.run(&relu, &[&x]).expect("runs on the cpu");
        assert_eq!(y.f32s().expect("f32"), &[0.0, 2.0]);
        assert_eq!(lenient.backend.host_ops(), vec![("unary", 1)]);
    }
}
