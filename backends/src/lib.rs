//! mllm-backends owns tensors and the devices that compute on them: `Tensor`
//! and `DType`, the op vocabulary (`Op`), the `Backend` trait, and the CPU
//! backend with a reference twin for every kernel. It knows nothing of the
//! .mdl language or of checkpoint file formats; `Op::infer` (infer.rs) holds
//! the shape and dtype rules every backend and graph capture share; `weights::WeightSource` is the
//! one interface a checkpoint reader implements.

pub mod backend;
pub mod conformance;
pub mod cpu;
pub mod dtype;
pub mod env_limit;
pub mod error;
pub mod fallback;
pub mod infer;
pub mod kv;
pub mod npu;
pub mod op;
#[cfg(feature = "opencl")]
pub mod opencl;
pub mod quant;
pub mod tensor;
pub mod weights;

pub use backend::{Backend, SharedBackend};
pub use cpu::CpuBackend;
pub use dtype::DType;
pub use error::{BackendError, Result};
pub use infer::TensorMeta;
pub use kv::KvCache;
pub use op::{BinaryOp, Op, ReduceOp, UnaryOp};
pub use tensor::{Buffer, ByteOwner, DeviceMem, FloatSlice, OwnedBytes, Tensor};
