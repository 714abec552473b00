//! What this build and machine compute on, for `mllm devices` and `mllm
//! test-backend`: the CPU's quantized-kernel instruction set (and one forced
//! with `MLLM_QLINEAR_ISA`), the OpenCL devices (builds with the `opencl`
//! feature), the op vocabulary and the op conformance suite a backend is
//! checked with.

use crate::{Error, Result};
use mllm_backends::cpu::qlinear::Isa;

/// The instruction set the CPU's quantized kernels use (`avx2`,
/// `avx512vnni`, `neon-dot`, ...).
pub fn cpu_kernels() -> &'static str {
    Isa::best().name()
}

/// Fails when `MLLM_QLINEAR_ISA` names a path this CPU does not have, or
/// none at all: checked once, before any kernel runs.
pub fn check_forced_isa() -> Result<()> {
    Isa::forced().map(|_| ()).map_err(Error::invalid)
}

/// The OpenCL devices, numbered as `--device N` counts them.
#[cfg(feature = "opencl")]
pub fn opencl_devices() -> Result<Vec<mllm_backends::opencl::device::DeviceInfo>> {
    mllm_backends::opencl::device::list().map_err(|e| Error::unsupported(e.to_string()))
}

/// Every op's name, as the conformance suite and `--op` spell them.
pub fn op_names() -> &'static [&'static str] {
    mllm_backends::Op::ALL_NAMES
}

/// The op conformance suite: cases, running them on a backend, the ops
/// without a case.
pub use mllm_backends::conformance;
