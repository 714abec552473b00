//! The CPU backend: `Op::infer` checks shapes and dtypes of every op, then a
//! dispatch calls into the kernel files (one family each, each with its
//! reference twin): `compute.rs` for the arithmetic ops, `shape_ops.rs` for
//! layout ops, casts and constants; `conv1d.rs` and `delta_rule.rs` hold
//! Gated DeltaNet's ops.

/// Steps of at most this many rows give every row exactly the bits a step
/// of that row alone gives (quantized and float linears, attention over a
/// cache): what lets speculative decoding verify up to `ROW_INVARIANT_STEP
/// - 1` proposed tokens in one step without changing any answer, and a
/// server batch its slots. Larger steps keep that where `chunk_invariant`
/// says so. `backends/tests/row_invariance.rs` holds it to this.
pub const ROW_INVARIANT_STEP: usize = 32;

/// Whether steps of any number of rows give every row the bits a one-row
/// step gives on this CPU, so that a prompt's logits do not depend on how
/// it was cut into chunks: attention runs its SIMD kernels, which sum in
/// one order for any number of queries (`attn_order`), and Arm's i8mm
/// tiles (which take steps above `ROW_INVARIANT_STEP` rows and sum in
/// another order) do not run. Linears compute each row alone otherwise.
pub fn chunk_invariant() -> bool {
    attn_tiled::path().is_some() && qlinear::Isa::best() != qlinear::Isa::NeonI8mm
}

pub mod attention;
mod attn_one;
pub mod attn_order;
mod attn_simd;
mod attn_tiled;
mod compute;
pub mod conv1d;
pub mod delta_rule;
pub mod delta_simd;
pub mod denormals;
pub mod elementwise;
pub mod exp_sum;
pub mod fused;
pub mod gather;
mod into;
pub mod layout;
pub mod linear;
pub mod linear_tile;
pub mod merged;
pub mod moe;
pub mod norm;
pub mod pool;
pub mod qlinear;
pub mod reduce;
pub mod rope;
mod shape_ops;
pub mod simd;
#[cfg(test)]
pub(crate) mod testutil;
pub mod topk;
pub mod vmath;

use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{BackendError, Result};
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::tensor::Tensor;

/// Multi-threaded through rayon's global pool (size it with
/// `rayon::ThreadPoolBuilder` before the first op).
#[derive(Default, Clone, Copy, Debug)]
pub struct CpuBackend;

/// Whether weights are interleaved at load: the fast path for them is
/// the AVX-512 VNNI or AVX2 one (`qlinear/x16.rs`, `x16_avx2.rs`), and
/// `MLLM_REPACK=0` turns it off.
pub fn repacks() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        matches!(
            qlinear::Isa::best(),
            qlinear::Isa::Avx512Vnni | qlinear::Isa::Avx2
        ) && std::env::var("MLLM_REPACK").map_or(true, |v| v.trim() != "0")
    })
}

/// The interleaved copy of `t`, when `repacks()` and `t` is a Q4_0 / Q4_1 / Q8_0
/// matrix of whole 16-row groups, or a stack of such matrices `[e, n, k]`
/// (MoE experts: groups never straddle two experts, so expert `i` stays
/// the rows `i * n ..` that `Op::MoeLinear` reads).
fn repack(t: &Tensor) -> Result<Option<Tensor>> {
    let Some(ty) = t.dtype().quant() else {
        return Ok(None);
    };
    let Some(packed_ty) = crate::quant::packed::packed_of(ty) else {
        return Ok(None);
    };
    let (rows, n, k) = match *t.shape() {
        [n, k] => (n, n, k),
        [e, n, k] => (e * n, n, k),
        _ => return Ok(None),
    };
    if !repacks() || !n.is_multiple_of(crate::quant::packed::ROWS) {
        return Ok(None);
    }
    let (bytes, _) = t.quant_bytes()?;
    let packed =
        crate::quant::packed::pack(ty, bytes, rows, k).map_err(|msg| BackendError::Invalid {
            op: "prepare_weight",
            msg,
        })?;
    Tensor::from_quant(packed, packed_ty, t.shape().to_vec()).map(Some)
}

/// Float weights up to this size are copied out of a mapped file.
const SMALL_WEIGHT_BYTES: usize = 1 << 20;

/// A small float weight borrowed from a mapped file (norm gains, biases),
/// copied into memory of its own and its file range released. Read in
/// place, each such weight kept its file page mapped, and a kernel that
/// maps page-cache folios of up to 2 MiB at a fault kept the whole folio:
/// a Qwen3-0.6B GGUF's 85 norm weights (~0.4 MiB) held 170 MiB resident.
fn owned_if_small(t: Tensor) -> Result<Tensor> {
    use crate::tensor::{Buffer, FloatSlice};
    let Buffer::Bytes {
        owner, start, len, ..
    } = &**t.buffer()
    else {
        return Ok(t);
    };
    if *len > SMALL_WEIGHT_BYTES || t.dtype().is_quantized() || t.dtype() == DType::I32 {
        return Ok(t);
    }
    let shape = t.shape().to_vec();
    let copy = match t.floats()? {
        FloatSlice::F32(s) => Tensor::from_f32(s.to_vec(), shape)?,
        FloatSlice::F16(s) => Tensor::from_f16(s.to_vec(), shape)?,
        FloatSlice::BF16(s) => Tensor::from_bf16(s.to_vec(), shape)?,
    };
    owner.release(*start, *len);
    Ok(copy)
}

/// Sets `v` to `n` copies of `x` and returns them, reusing `v`'s capacity:
/// how the kernels' per-thread scratch buffers are reset without
/// allocating once they have grown.
pub(crate) fn refill<T: Copy>(v: &mut Vec<T>, n: usize, x: T) -> &mut [T] {
    v.clear();
    v.resize(n, x);
    v
}

fn f32_of<'a>(op: &'static str, t: &'a Tensor) -> Result<&'a [f32]> {
    t.f32s().map_err(|_| BackendError::DType {
        op,
        msg: format!("expected an f32 activation, found {}", t.dtype()),
    })
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn chunk_invariant(&self) -> bool {
        chunk_invariant()
    }

    fn writes_into(&self, op: &Op, out: &TensorMeta) -> bool {
        into::writes_into(op, out)
    }

    /// Q4_0, Q4_1 and Q8_0 matrices whose rows come in groups of 16 are
    /// interleaved (`quant::packed`) when the AVX-512 VNNI kernels run
    /// (`MLLM_REPACK=0` keeps every weight as it is); the mapped original's
    /// pages are released, so the copy does not double the memory.
    fn prepare_weight(&self, _name: &str, t: Tensor) -> Result<Tensor> {
        match repack(&t)? {
            Some(packed) => {
                t.release_storage();
                Ok(packed)
            }
            None => owned_if_small(t),
        }
    }

    fn run_into(&self, op: &Op, inputs: &[&Tensor], out: &mut [f32]) -> Result<bool> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
        let meta = op.infer(&metas)?;
        into::run_into(op, inputs, &meta, out)
    }

    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
        let out = op.infer(&metas)?;
        match op {
            Op::Linear
            | Op::Matmul
            | Op::Embedding
            | Op::RmsNorm { .. }
            | Op::LayerNorm { .. }
            | Op::ApplyRope
            | Op::Sdpa { .. }
            | Op::CachedSdpa { .. }
            | Op::GatedAct { .. }
            | Op::AddRmsNorm { .. }
            | Op::MergedLinear { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Softmax { .. }
            | Op::Reduce { .. }
            | Op::Argmax { .. }
            | Op::TopK { .. }
            | Op::MoeLinear
            | Op::CausalConv1d
            | Op::GatedDeltaRule
            | Op::Where => compute::run(op, inputs, out),
            Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::IndexSelect { .. }
            | Op::Gather { .. }
            | Op::Cast { .. }
            | Op::Arange { .. }
            | Op::Full { .. } => shape_ops::run(op, inputs, out),
        }
    }
}
