//! The seam between the interpreter (or a compiled graph) and the hardware.
//!
//! A backend runs ops eagerly on tensors it holds, takes each checkpoint
//! weight once at load (`prepare_weight`: upload, repack), makes host values
//! resident (`upload`) and copies data back on request (`download`). It says
//! exactly which ops it has kernels for (`supports`); what happens to the
//! others is the executor's policy (`fallback.rs`: an error, or the CPU
//! after a warning per op kind), never the backend's secret.

use crate::error::{BackendError, Result};
use crate::infer::TensorMeta;
use crate::kv::KvCache;
use crate::op::Op;
use crate::tensor::Tensor;

pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;

    /// Whether a step's rows get the bits they would get in a step of any
    /// other size (a prompt cut into other chunks, other sequences beside
    /// it): what lets a cache share any prefix with another prompt without
    /// changing an answer. `cpu::chunk_invariant` for the CPU; no device
    /// backend promises it yet.
    fn chunk_invariant(&self) -> bool {
        false
    }

    /// Whether this backend has a kernel for `op`.
    fn supports(&self, op: &Op) -> bool {
        let _ = op;
        true
    }

    /// Runs `op`. Inputs are in the order `Op` documents; the output is a new
    /// tensor (or a view sharing an input's buffer).
    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor>;

    /// Whether `run_into` writes `op`'s result (typed `out`) into a
    /// caller's buffer: what a compiled graph may place in its arena.
    fn writes_into(&self, op: &Op, out: &TensorMeta) -> bool {
        let _ = (op, out);
        false
    }

    /// Runs `op` writing its f32 result into `out` (exactly the result's
    /// length, holding anything: every value must be written, none read)
    /// instead of a new buffer; `false` when this backend has no such path
    /// for `op` (the caller then uses `run`).
    fn run_into(&self, op: &Op, inputs: &[&Tensor], out: &mut [f32]) -> Result<bool> {
        let _ = (op, inputs, out);
        Ok(false)
    }

    /// Takes the checkpoint tensor `name` once, at load. The CPU keeps it as
    /// it is (zero-copy mmapped or blocks); a device uploads it, a backend
    /// with its own layouts repacks it here.
    fn prepare_weight(&self, name: &str, t: Tensor) -> Result<Tensor> {
        let _ = name;
        Ok(t)
    }

    /// Makes a host tensor (a script literal, a model input) resident.
    fn upload(&self, t: Tensor) -> Result<Tensor> {
        Ok(t)
    }

    /// A host copy of `t`'s data (for `to_list`, `item`, logits).
    fn download(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }

    /// Host copies of `op`'s inputs, for running it on the CPU when this
    /// backend has no kernel for it (`fallback.rs`). A backend may leave
    /// inputs the CPU kernel only reads the shape of on the device (the
    /// experts of a MoE layer that no id picks).
    fn host_inputs(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _ = op;
        inputs.iter().map(|t| self.download(t)).collect()
    }

    /// Ops run on the CPU in place of this backend's kernels so far, by
    /// op name (`fallback::CpuFallback` counts them; others run none).
    fn host_ops(&self) -> Vec<(&'static str, u64)> {
        vec![]
    }

    /// Appends `k [s, hk, dk]`, `v [s, hk, dv]` to layer `layer` of
    /// `cache`; returns every key and value the layer holds. The default
    /// keeps the cache in host memory; a device backend keeps its layers in
    /// device memory (`KvCache::device_layer`).
    fn kv_append(
        &self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (k, v) = (self.download(k)?, self.download(v)?);
        cache
            .append(layer, &k, &v)
            .map_err(|msg| BackendError::Invalid {
                op: "kv_cache",
                msg,
            })
    }
}

/// A backend shared by the model that holds its weights, the executors and
/// compiled graphs that run it (clones are cheap).
pub type SharedBackend = std::sync::Arc<dyn Backend>;

impl<T: Backend + ?Sized> Backend for std::sync::Arc<T> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn chunk_invariant(&self) -> bool {
        (**self).chunk_invariant()
    }
    fn supports(&self, op: &Op) -> bool {
        (**self).supports(op)
    }
    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        (**self).run(op, inputs)
    }
    fn prepare_weight(&self, name: &str, t: Tensor) -> Result<Tensor> {
        (**self).prepare_weight(name, t)
    }
    fn writes_into(&self, op: &Op, out: &TensorMeta) -> bool {
        (**self).writes_into(op, out)
    }
    fn run_into(&self, op: &Op, inputs: &[&Tensor], out: &mut [f32]) -> Result<bool> {
        (**self).run_into(op, inputs, out)
    }
    fn upload(&self, t: Tensor) -> Result<Tensor> {
        (**self).upload(t)
    }
    fn download(&self, t: &Tensor) -> Result<Tensor> {
        (**self).download(t)
    }
    fn host_inputs(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        (**self).host_inputs(op, inputs)
    }
    fn host_ops(&self) -> Vec<(&'static str, u64)> {
        (**self).host_ops()
    }
    fn kv_append(
        &self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        (**self).kv_append(cache, layer, k, v)
    }
}

/// Names `--backend` accepts, in this build.
#[cfg(feature = "opencl")]
pub const BACKEND_NAMES: &[&str] = &["cpu", "opencl"];
#[cfg(not(feature = "opencl"))]
pub const BACKEND_NAMES: &[&str] = &["cpu"];

/// Whether NPU runtime `name` (`qnn`, `ascend`) is in this build. They run
/// whole exported graphs (`mllm_backends::npu`), not ops: `--backend qnn`
/// takes the export directory as `--model`, and `by_name` gives no op
/// backend for them.
pub fn npu_built(name: &str) -> bool {
    (name == "qnn" && cfg!(feature = "qnn")) || (name == "ascend" && cfg!(feature = "ascend"))
}

/// Whether `name` is a backend of this build (`--backend NAME`), without
/// starting it.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    if BACKEND_NAMES.contains(&name) || npu_built(name) {
        return Ok(());
    }
    match name {
        "opencl" => Err(
            "this build has no OpenCL backend (built without the `opencl` feature); use --backend cpu"
                .to_string(),
        ),
        "qnn" => Err(
            "this build has no qnn backend: rebuild with --features qnn and QNN_SDK_ROOT set (docs/npu_runtime.md)"
                .to_string(),
        ),
        "ascend" => Err(
            "this build has no ascend backend: rebuild with --features ascend and ASCEND_TOOLKIT_HOME set (docs/npu_runtime.md)"
                .to_string(),
        ),
        _ => {
            let npus = ["qnn", "ascend"].into_iter().filter(|n| npu_built(n));
            let names: Vec<&str> = BACKEND_NAMES.iter().copied().chain(npus).collect();
            Err(format!(
                "unknown backend `{name}`; this build has: {}",
                names.join(", ")
            ))
        }
    }
}

/// The backend called `name` on device `device` (`--backend NAME
/// --device N`; the CPU has one device, 0).
pub fn by_name(name: &str, device: usize) -> std::result::Result<SharedBackend, String> {
    check_name(name)?;
    match name {
        "cpu" if device == 0 => Ok(std::sync::Arc::new(crate::cpu::CpuBackend)),
        "cpu" => Err(format!("the cpu backend has one device (0), not {device}")),
        #[cfg(feature = "opencl")]
        "opencl" => crate::opencl::OpenClBackend::new(device)
            .map(|b| std::sync::Arc::new(b) as SharedBackend)
            .map_err(|e| e.to_string()),
        "qnn" | "ascend" => Err(format!(
            "{name} runs whole exported graphs, not single ops: `mllm run --backend {name} --model EXPORT_DIR` (docs/npu_runtime.md)"
        )),
        other => Err(format!("unknown backend `{other}`")),
    }
}

/// The error a backend gives for an op it has no kernel for.
pub fn unsupported(op: &Op, backend: &'static str) -> BackendError {
    BackendError::Unsupported {
        op: op.name(),
        backend,
    }
}
