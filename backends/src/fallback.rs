//! What an executor does with an op its backend has no kernel for: the
//! policy `--fallback` names. A backend's `supports` reports exactly its
//! kernels; `Fallback::None` makes any other op an error naming it and the
//! backend, `Fallback::Cpu` (the default) wraps the backend in
//! `CpuFallback`, which runs such ops with the CPU's kernels on host copies
//! of their inputs (`Backend::host_inputs`), uploads the result, says so
//! once per op kind on stderr and counts them (`host_ops`, which `mllm
//! bench` reports per step). The eager executor and compiled graphs both
//! run whatever backend they are given, so both follow the policy.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::backend::{Backend, SharedBackend};
use crate::cpu::CpuBackend;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::kv::KvCache;
use crate::op::Op;
use crate::tensor::Tensor;

/// `--fallback`: where ops without a kernel on the chosen backend go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// To the CPU, after one warning per op kind.
    #[default]
    Cpu,
    /// Nowhere: the op is an error.
    None,
}

impl Fallback {
    pub fn name(self) -> &'static str {
        match self {
            Fallback::Cpu => "cpu",
            Fallback::None => "none",
        }
    }

    /// `backend` under this policy: wrapped in `CpuFallback` unless the
    /// policy is `None` or the backend is the CPU (which has every kernel).
    pub fn apply(self, backend: SharedBackend) -> SharedBackend {
        match self {
            Fallback::Cpu if backend.name() != CpuBackend.name() => {
                std::sync::Arc::new(CpuFallback::new(backend))
            }
            _ => backend,
        }
    }
}

impl std::str::FromStr for Fallback {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Fallback, String> {
        match s {
            "cpu" => Ok(Fallback::Cpu),
            "none" => Ok(Fallback::None),
            other => Err(format!(
                "unknown fallback `{other}`: `cpu` (run ops the backend has no kernel for on the CPU) or `none` (an error)"
            )),
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend whose missing kernels run on the CPU, announced and counted.
pub struct CpuFallback<B> {
    inner: B,
    /// Ops run on the host so far, by name (the first of each warns).
    host: Mutex<BTreeMap<&'static str, u64>>,
}

impl<B: Backend> CpuFallback<B> {
    pub fn new(inner: B) -> CpuFallback<B> {
        CpuFallback {
            inner,
            host: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn on_host(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let first = {
            // A poisoned count only loses statistics, never the op.
            let mut host = self.host.lock().unwrap_or_else(|p| p.into_inner());
            let n = host.entry(op.name()).or_insert(0);
            *n += 1;
            *n == 1
        };
        if first {
            eprintln!(
                "warning: the {} backend has no `{}` kernel; running it on the CPU (--fallback none makes this an error)",
                self.inner.name(),
                op.name()
            );
        }
        let host = self.inner.host_inputs(op, inputs)?;
        let refs: Vec<&Tensor> = host.iter().collect();
        let out = CpuBackend.run(op, &refs)?;
        self.inner.upload(out)
    }
}

impl<B: Backend> Backend for CpuFallback<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn chunk_invariant(&self) -> bool {
        self.inner.chunk_invariant()
    }

    /// Every op: those without a kernel run on the CPU.
    fn supports(&self, _op: &Op) -> bool {
        true
    }

    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        if self.inner.supports(op) {
            self.inner.run(op, inputs)
        } else {
            self.on_host(op, inputs)
        }
    }

    fn writes_into(&self, op: &Op, out: &TensorMeta) -> bool {
        self.inner.supports(op) && self.inner.writes_into(op, out)
    }

    fn run_into(&self, op: &Op, inputs: &[&Tensor], out: &mut [f32]) -> Result<bool> {
        if self.inner.supports(op) {
            self.inner.run_into(op, inputs, out)
        } else {
            Ok(false)
        }
    }

    fn prepare_weight(&self, name: &str, t: Tensor) -> Result<Tensor> {
        self.inner.prepare_weight(name, t)
    }

    fn upload(&self, t: Tensor) -> Result<Tensor> {
        self.inner.upload(t)
    }

    fn download(&self, t: &Tensor) -> Result<Tensor> {
        self.inner.download(t)
    }

    fn host_inputs(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.inner.host_inputs(op, inputs)
    }

    fn host_ops(&self) -> Vec<(&'static str, u64)> {
        let host = self.host.lock().unwrap_or_else(|p| p.into_inner());
        host.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn kv_append(
        &self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        self.inner.kv_append(cache, layer, k, v)
    }
}

/// The smallest backend that needs the fallback, for the tests of the
/// policy here and of the executors that apply it.
#[doc(hidden)]
pub mod testing {
    use crate::{Backend, CpuBackend, Op, Result, Tensor};

    /// Kernels for binary ops only (the CPU's); any other op is refused.
    pub struct BinaryOnly;

    impl Backend for BinaryOnly {
        fn name(&self) -> &'static str {
            "binary-only"
        }
        fn supports(&self, op: &Op) -> bool {
            matches!(op, Op::Binary(_))
        }
        fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
            assert!(self.supports(op), "ran an op it has no kernel for");
            CpuBackend.run(op, inputs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::BinaryOnly;
    use super::*;
    use crate::op::{BinaryOp, UnaryOp};

    #[test]
    fn missing_kernels_run_on_the_cpu_and_are_counted() {
        let x = Tensor::from_f32(vec![-1.0, 2.0], vec![2]).expect("x");
        let b = CpuFallback::new(BinaryOnly);
        let relu = Op::Unary(UnaryOp::Relu);
        for _ in 0..3 {
            let y = b.run(&relu, &[&x]).expect("runs on the cpu");
            assert_eq!(y.f32s().expect("f32"), &[0.0, 2.0]);
        }
        let sum = b
            .run(&Op::Binary(BinaryOp::Add), &[&x, &x])
            .expect("kernel");
        assert_eq!(sum.f32s().expect("f32"), &[-2.0, 4.0]);
        assert_eq!(
            b.host_ops(),
            vec![("unary", 3)],
            "the kernel op is not counted"
        );
        assert!(!b.writes_into(&relu, &TensorMeta::of(&x)));
    }

    #[test]
    fn the_policy_parses_and_leaves_the_cpu_alone() {
        assert_eq!("cpu".parse::<Fallback>(), Ok(Fallback::Cpu));
        assert_eq!("none".parse::<Fallback>(), Ok(Fallback::None));
        assert!("gpu".parse::<Fallback>().unwrap_err().contains("`cpu`"));
        let cpu: SharedBackend = std::sync::Arc::new(CpuBackend);
        let same = Fallback::Cpu.apply(cpu.clone());
        assert!(std::sync::Arc::ptr_eq(&cpu, &same));
        let wrapped = Fallback::Cpu.apply(std::sync::Arc::new(BinaryOnly));
        assert!(wrapped.supports(&Op::Unary(UnaryOp::Exp)));
        let strict = Fallback::None.apply(std::sync::Arc::new(BinaryOnly));
        assert!(!strict.supports(&Op::Unary(UnaryOp::Exp)));
    }
}
