//! The OpenCL backend: device tensors (`Buffer::Device` over a `ClMem`),
//! kernels written in OpenCL C (`kernels/*.cl`, embedded at build time,
//! built once per device on first use), weights uploaded once at load
//! (`prepare_weight`), the KV cache in device memory (`kv_append`), and
//! transfers only for inputs and what the host reads (`download`).
//!
//! Device dtypes: f32 (every activation), i32 (ids, argmax), f16 (weights,
//! an f16 KV cache) and the ggml blocks q4_0, q4_1, q8_0, q4_K, q5_K and q6_K, kept as
//! the file has them and dequantized inside the matmul kernels. Other
//! checkpoint dtypes are widened at upload (bf16 to f32, the other
//! quantized types to f16) so that every model runs.
//!
//! Arithmetic is f32 everywhere; `cl_khr_fp16` is reported (`mllm devices`)
//! and passed to kernels as `HAS_FP16`, but no kernel computes in half yet.
//!
//! Ops are grouped by family (`ops/*.rs`), one launcher file beside one
//! `.cl` file each; `supports` lists exactly the ops with kernels, and the
//! conformance suite (`crate::conformance`) compares each against the CPU.

mod context;
pub mod device;
mod kernels;
mod ops;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use half::f16;

use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{BackendError, Result};
use crate::infer::TensorMeta;
use crate::kv::KvCache;
use crate::op::Op;
use crate::quant::QuantType;
use crate::tensor::{Buffer, DeviceMem, Tensor};

pub use context::{Arg, ClMem, Ctx};
pub use device::DeviceInfo;

pub const NAME: &str = "opencl";

/// The OpenCL backend on one device. Clones share the device context, and
/// every backend made for one device index shares one context (tensors of
/// one context cannot be used by another's kernels).
#[derive(Clone)]
pub struct OpenClBackend {
    pub ctx: Arc<Ctx>,
}

fn contexts() -> &'static Mutex<HashMap<usize, Arc<Ctx>>> {
    static C: OnceLock<Mutex<HashMap<usize, Arc<Ctx>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        op,
        msg: msg.into(),
    }
}

/// Quantized types kept as blocks on the device (the matmul and embedding
/// kernels read them); others are widened to f16 at upload.
pub fn device_quant(q: QuantType) -> bool {
    matches!(
        q,
        QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q8_0
            | QuantType::Q4_K
            | QuantType::Q5_K
            | QuantType::Q6_K
    )
}

impl OpenClBackend {
    /// The backend on device `n` of `mllm devices`' list.
    pub fn new(n: usize) -> Result<OpenClBackend> {
        let mut all = contexts()
            .lock()
            .map_err(|_| invalid("opencl", "device setup panicked"))?;
        if let Some(ctx) = all.get(&n) {
            return Ok(OpenClBackend { ctx: ctx.clone() });
        }
        let ctx = Arc::new(Ctx::new(device::pick(n)?)?);
        // Compile errors surface now, and the first step does not pay for
        // compiling.
        ctx.build_all()?;
        all.insert(n, ctx.clone());
        Ok(OpenClBackend { ctx })
    }

    /// Builds every kernel program now (a load does this so that the first
    /// step is not slowed by compiling).
    pub fn warm_up(&self) -> Result<()> {
        self.ctx.build_all()
    }

    /// The device allocation behind `t` (an error for host tensors and
    /// other backends' tensors).
    pub fn mem(t: &Tensor) -> Result<&ClMem> {
        t.device()
            .and_then(|d| d.mem.downcast_ref::<ClMem>())
            .ok_or_else(|| {
                invalid(
                    "opencl",
                    format!(
                        "a {} tensor {:?} is not in OpenCL memory",
                        t.dtype(),
                        t.shape()
                    ),
                )
            })
    }

    /// A new device tensor for `meta` (contents undefined until a kernel
    /// writes them).
    pub fn empty(&self, meta: &TensorMeta) -> Result<Tensor> {
        let bytes = meta
            .dtype
            .storage_bytes(&meta.shape)
            .ok_or_else(|| invalid("opencl", format!("{meta} has no whole blocks")))?;
        let mem = self.ctx.alloc(bytes)?;
        wrap(mem, meta.dtype, meta.shape.clone())
    }

    /// `t` in device memory: itself when it already is, else an upload.
    pub fn on_device(&self, t: &Tensor) -> Result<Tensor> {
        if t.device().is_some() {
            Self::mem(t)?;
            return Ok(t.clone());
        }
        self.upload(t.clone())
    }
}

/// A device tensor over all of `mem`.
pub fn wrap(mem: Arc<ClMem>, dtype: DType, shape: Vec<usize>) -> Result<Tensor> {
    let len = crate::tensor::numel(&shape)?;
    let buf = Buffer::Device(DeviceMem {
        backend: NAME,
        dtype,
        len,
        mem,
    });
    Tensor::from_buffer(Arc::new(buf), 0, shape)
}

/// The bytes of a host tensor in the dtype the device keeps it in.
fn host_bytes(t: &Tensor) -> Result<(Vec<u8>, DType)> {
    Ok(match t.dtype() {
        DType::F32 => (bytemuck::cast_slice(t.f32s()?).to_vec(), DType::F32),
        DType::I32 => (bytemuck::cast_slice(t.i32s()?).to_vec(), DType::I32),
        DType::BF16 => (bytemuck::cast_slice(&t.to_f32_vec()?).to_vec(), DType::F32),
        DType::F16 => match t.floats()? {
            crate::tensor::FloatSlice::F16(h) => (bytemuck::cast_slice(h).to_vec(), DType::F16),
            _ => unreachable_dtype()?,
        },
        DType::Quant(q) if device_quant(q) => (t.quant_bytes()?.0.to_vec(), t.dtype()),
        // Exactly Q8_0 blocks (the same f16 scale, codes that fit an i8):
        // the device's Q8_0 kernels compute the file's values.
        // TQ2_0's ternary codes under its f16 `d` likewise (8 Q8_0 blocks
        // per super-block).
        DType::Quant(q @ (QuantType::Q5_0 | QuantType::IQ4_NL | QuantType::TQ2_0)) => {
            let repack = match q {
                QuantType::Q5_0 => crate::quant::q5::repack_q5_0_to_q8_0,
                QuantType::TQ2_0 => crate::quant::tq::repack_tq2_0_to_q8_0,
                _ => crate::quant::iq4::repack_iq4_nl_to_q8_0,
            };
            let src = t.quant_bytes()?.0;
            let blocks =
                src.len() / q.type_size() * (q.block_size() / QuantType::Q8_0.block_size());
            let mut out = vec![0u8; blocks * QuantType::Q8_0.type_size()];
            repack(src, &mut out).map_err(|e| invalid("opencl", e))?;
            (out, DType::Quant(QuantType::Q8_0))
        }
        // MXFP4 whose every power-of-two scale is an f16 (real models'):
        // the Q8_0 blocks of the same values, 8.5 bits a weight. Other
        // scales (2^-128..2^127): f32 holds them.
        DType::Quant(QuantType::MXFP4) => match mxfp4_as_q8_0(t)? {
            Some(q8) => (q8, DType::Quant(QuantType::Q8_0)),
            None => (bytemuck::cast_slice(&t.to_f32_vec()?).to_vec(), DType::F32),
        },
        // Q6_K / Q8_KS blocks scaled by a power of two (IQ3_XXS, IQ1, IQ2
        // files): their steps of `d / 2` or `d / 8` are not all f16s (nor
        // IQ2's 16-bit `d * (2 s + 1) / 8`); f32 keeps them.
        DType::Quant(QuantType::Q6KScaled { .. } | QuantType::Q8KS { .. }) => {
            (bytemuck::cast_slice(&t.to_f32_vec()?).to_vec(), DType::F32)
        }
        DType::Quant(_) => {
            let v: Vec<f16> = t.to_f32_vec()?.into_iter().map(f16::from_f32).collect();
            (bytemuck::cast_slice(&v).to_vec(), DType::F16)
        }
    })
}

/// `t`'s MXFP4 blocks as Q8_0 blocks, when every scale is an f16.
fn mxfp4_as_q8_0(t: &Tensor) -> Result<Option<Vec<u8>>> {
    let src = t.quant_bytes()?.0;
    let blocks = src.len() / QuantType::MXFP4.type_size();
    let mut out = vec![0u8; blocks * QuantType::Q8_0.type_size()];
    Ok(crate::quant::mxfp4::repack_mxfp4_to_q8_0(src, &mut out)
        .ok()
        .map(|()| out))
}

fn unreachable_dtype() -> Result<(Vec<u8>, DType)> {
    Err(invalid("opencl", "f16 tensor without f16 storage"))
}

impl Backend for OpenClBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, op: &Op) -> bool {
        ops::supports(op)
    }

    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
        let out = op.infer(&metas)?;
        let dev: Vec<Tensor> = inputs
            .iter()
            .map(|t| self.on_device(t))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = dev.iter().collect();
        ops::run(self, op, &refs, &out)
    }

    fn host_inputs(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        ops::host::inputs(self, op, inputs)
    }

    fn prepare_weight(&self, _name: &str, t: Tensor) -> Result<Tensor> {
        let d = self.upload(t.clone())?;
        // The host copy is not read again: let a file mapping drop it.
        t.release_storage();
        Ok(d)
    }

    fn upload(&self, t: Tensor) -> Result<Tensor> {
        if t.device().is_some() {
            Self::mem(&t)?;
            return Ok(t);
        }
        let (bytes, dtype) = host_bytes(&t)?;
        let mem = self.ctx.alloc(bytes.len())?;
        self.ctx.write(&mem, 0, &bytes)?;
        wrap(mem, dtype, t.shape().to_vec())
    }

    fn download(&self, t: &Tensor) -> Result<Tensor> {
        if t.device().is_none() {
            return Ok(t.clone());
        }
        let mem = Self::mem(t)?;
        let dtype = t.dtype();
        let (bs, ts) = (dtype.block_size(), dtype.size());
        let (start, len) = (t.offset() / bs * ts, t.numel() / bs * ts);
        let mut bytes = vec![0u8; len];
        self.ctx.read(mem, start, &mut bytes)?;
        let shape = t.shape().to_vec();
        match dtype {
            DType::F32 => Tensor::from_f32(bytemuck::pod_collect_to_vec(&bytes), shape),
            DType::I32 => Tensor::from_i32(bytemuck::pod_collect_to_vec(&bytes), shape),
            DType::F16 => Tensor::from_f16(bytemuck::pod_collect_to_vec(&bytes), shape),
            DType::BF16 => Tensor::from_bf16(bytemuck::pod_collect_to_vec(&bytes), shape),
            DType::Quant(q) => Tensor::from_quant(bytes, q, shape),
        }
    }

    fn kv_append(
        &self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        ops::kv::append(self, cache, layer, k, v)
    }
}
