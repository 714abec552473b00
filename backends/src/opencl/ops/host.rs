//! What the executor's CPU fallback (`crate::fallback`) downloads for an op
//! this backend has no kernel for: the inputs, except that `MoeLinear`
//! downloads only the experts its ids pick (a stacked `[e, n, k]` weight
//! is split into per-expert views first): the weights of a MoE layer are
//! far larger than what one step uses. The ops without kernels here are
//! `TopK`, `Gather`, `MoeLinear`, `CausalConv1d`, `GatedDeltaRule` and
//! attention with a sliding window (`supports` says no to each).

use crate::backend::Backend;
use crate::error::Result;
use crate::op::Op;
use crate::opencl::OpenClBackend;
use crate::tensor::Tensor;

/// Host copies of `op`'s inputs for the CPU's kernel.
pub fn inputs(cl: &OpenClBackend, op: &Op, x: &[&Tensor]) -> Result<Vec<Tensor>> {
    match op {
        Op::MoeLinear if x.len() >= 2 => moe_inputs(cl, x),
        _ => x.iter().map(|t| cl.download(t)).collect(),
    }
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
