//! Ops the OpenCL backend has no kernels for yet, run on the host with the
//! CPU backend's kernels: the mixture-of-experts ops `TopK`, `Gather` and
//! `MoeLinear`, Gated DeltaNet's `CausalConv1d` and `GatedDeltaRule`, and
//! attention with a sliding window. The inputs are downloaded, the result uploaded, so a script
//! using them runs on this backend (slower) instead of failing; the
//! numbers are the CPU's exactly.
//!
//! `MoeLinear` downloads only the experts its ids pick (a stacked
//! `[e, n, k]` weight is split into per-expert views first): the weights of
//! a MoE layer are far larger than what one step uses.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::opencl::OpenClBackend;
use crate::tensor::Tensor;

pub fn supports(op: &Op) -> bool {
    match op {
        Op::TopK { .. } | Op::Gather { .. } | Op::MoeLinear => true,
        // Gated DeltaNet's recurrence and conv (no OpenCL kernels yet).
        Op::CausalConv1d | Op::GatedDeltaRule => true,
        // Sliding-window attention (no OpenCL kernel takes a window yet).
        Op::Sdpa { window, .. } | Op::CachedSdpa { window, .. } => *window > 0,
        _ => false,
    }
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], _out: &TensorMeta) -> Result<Tensor> {
    let host = match op {
        Op::MoeLinear => moe_inputs(cl, x)?,
        _ => x.iter().map(|t| cl.download(t)).collect::<Result<_>>()?,
    };
    let refs: Vec<&Tensor> = host.iter().collect();
    cl.upload(CpuBackend.run(op, &refs)?)
}

/// `x`, `ids` and the picked experts on the host; the experts no id picks
/// stay device views (the CPU kernel reads only their shapes).
fn moe_inputs(cl: &OpenClBackend, x: &[&Tensor]) -> Result<Vec<Tensor>> {
    let (xs, ids) = (cl.download(x[0])?, cl.download(x[1])?);
    let experts: Vec<Tensor> = match &x[2..] {
        [w] if w.rank() == 3 => {
            let (e, n, k) = (w.shape()[0], w.shape()[1], w.shape()[2]);
            (0..e)
                .map(|i| w.narrow0(i, i + 1)?.reshaped(vec![n, k]))
                .collect::<Result<_>>()?
        }
        ws => ws.iter().map(|&w| w.clone()).collect(),
    };
    let mut used = vec![false; experts.len()];
    for &id in ids.i32s()? {
        // Ids outside the experts are left for the CPU kernel to report.
        if let Some(u) = usize::try_from(id).ok().and_then(|i| used.get_mut(i)) {
            *u = true;
        }
    }
    let mut out = vec![xs, ids];
    for (w, picked) in experts.into_iter().zip(used) {
        out.push(if picked { cl.download(&w)? } else { w });
    }
    Ok(out)
}
