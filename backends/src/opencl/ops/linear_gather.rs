//! The rest of the `linear` family: batched `matmul` (the GEMM tiles of
//! `linear.cl` with b read as `[k, n]`) and `embedding` (a row gather that
//! dequantizes the picked rows of any device table dtype).

use std::sync::Arc;

use super::{i32_arg, kernels_for, u32_arg, unit_offset, GEMM_T, PROGRAM, TILE};
use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::opencl::{invalid, Arg, ClMem, OpenClBackend};
use crate::tensor::Tensor;

/// `matmul`: a `[.., m, k]` @ b `[.., k, n]`, b shared when its batch
/// dims are all 1; the batch is the third grid dimension.
pub(super) fn matmul(cl: &OpenClBackend, inputs: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    const OP: &str = "matmul";
    let (a, b) = (inputs[0], inputs[1]);
    let (ra, rb) = (a.shape().len(), b.shape().len());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let batch: usize = a.shape()[..ra - 2].iter().product();
    let b_batched = !b.shape()[..rb - 2].iter().all(|&d| d == 1);
    let y = cl.empty(out)?;
    let (aw, bw);
    let (am, a_off) = if a.dtype() == DType::F32 {
        (OpenClBackend::mem(a)?, unit_offset(OP, a)?)
    } else {
        aw = widen(cl, a)?;
        (&*aw, 0)
    };
    let (bm, b_off) = if b.dtype() == DType::F32 {
        (OpenClBackend::mem(b)?, unit_offset(OP, b)?)
    } else {
        bw = widen(cl, b)?;
        (&*bw, 0)
    };
    // The kernel indexes one batch's operands with 32-bit products.
    i32_arg(OP, m.max(k) * k.max(n))?;
    let args = [
        Arg::Mem(am),
        Arg::U32(a_off),
        Arg::Mem(bm),
        Arg::U32(b_off),
        Arg::U32(if b_batched { u32_arg(OP, k * n)? } else { 0 }),
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::I32(i32_arg(OP, m)?),
        Arg::I32(i32_arg(OP, k)?),
        Arg::I32(i32_arg(OP, n)?),
    ];
    let global = [n.div_ceil(TILE) * GEMM_T, m.div_ceil(TILE) * GEMM_T, batch];
    cl.ctx.launch(
        PROGRAM,
        "linear_matmul",
        &global,
        Some(&[GEMM_T, GEMM_T, 1]),
        &args,
    )?;
    Ok(y)
}

/// `t` (f16 or i32, which the CPU's matmul also takes) widened to f32 in a
/// scratch buffer.
fn widen(cl: &OpenClBackend, t: &Tensor) -> Result<Arc<ClMem>> {
    const OP: &str = "matmul";
    let kind = match t.dtype() {
        DType::F16 => 1,
        DType::I32 => 2,
        other => {
            return Err(invalid(
                OP,
                format!("the OpenCL matmul does not read {other}"),
            ))
        }
    };
    let count = t.numel();
    let tmp = cl.ctx.alloc(count * 4)?;
    let args = [
        Arg::Mem(OpenClBackend::mem(t)?),
        Arg::U32(unit_offset(OP, t)?),
        Arg::I32(kind),
        Arg::Mem(&tmp),
        Arg::I32(i32_arg(OP, count)?),
    ];
    cl.ctx
        .launch(PROGRAM, "linear_widen", &[count], Some(&[64]), &args)?;
    Ok(tmp)
}

/// `embedding`: rows of table `w [v, d]` picked by `ids`. The ids are
/// downloaded (a few bytes) and checked first, as the CPU checks them: an
/// id outside the table is the same error here, never an out-of-bounds
/// read (the kernel also refuses such ids, writing zeros).
pub(super) fn embedding(
    cl: &OpenClBackend,
    inputs: &[&Tensor],
    out: &TensorMeta,
) -> Result<Tensor> {
    const OP: &str = "embedding";
    let (w, ids) = (inputs[0], inputs[1]);
    let (v, d) = (w.shape()[0], w.shape()[1]);
    let kern = kernels_for(OP, w.dtype())?;
    if !d.is_multiple_of(w.dtype().block_size()) {
        return Err(invalid(
            OP,
            format!("{} rows of {d} values are not whole blocks", w.dtype()),
        ));
    }
    let nids = ids.numel();
    let im = OpenClBackend::mem(ids)?;
    let mut raw = vec![0u8; nids * 4];
    cl.ctx.read(im, ids.offset() * 4, &mut raw)?;
    let idx: Vec<i32> = bytemuck::pod_collect_to_vec(&raw);
    if let Some(&id) = idx.iter().find(|&&id| id < 0 || id as usize >= v) {
        return Err(invalid(
            OP,
            format!("token id {id} is outside the vocabulary of {v}"),
        ));
    }
    let y = cl.empty(out)?;
    i32_arg(OP, nids.saturating_mul(d))?;
    let args = [
        Arg::Mem(OpenClBackend::mem(w)?),
        Arg::U32(unit_offset(OP, w)?),
        Arg::Mem(im),
        Arg::U32(u32_arg(OP, ids.offset())?),
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::I32(i32_arg(OP, d)?),
        Arg::I32(i32_arg(OP, v)?),
        Arg::I32(i32_arg(OP, nids)?),
    ];
    cl.ctx
        .launch(PROGRAM, kern.embed, &[d, nids], Some(&[64, 1]), &args)?;
    Ok(y)
}
