//! Shape and dtype rules of the linear-attention ops of Gated DeltaNet
//! (`CausalConv1d`, `GatedDeltaRule`), as `Op::infer` applies them.

use super::{f32_input, meta, TensorMeta};
use crate::dtype::DType;
use crate::error::{dtype_err, shape_err, Result};

/// `x [t, c]` (f32), `w [c, kernel]` (a float dtype), `state [kernel - 1,
/// c]` (f32) -> f32 `[t + kernel - 1, c]`.
pub(super) fn causal_conv1d(inputs: &[TensorMeta]) -> Result<TensorMeta> {
    let op = "causal_conv1d";
    let (x, w, state) = (&inputs[0], &inputs[1], &inputs[2]);
    f32_input(op, x)?;
    f32_input(op, state)?;
    if !matches!(w.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return dtype_err(
            op,
            format!("weights must be f32, f16 or bf16, found {}", w.dtype),
        );
    }
    let fits = x.rank() == 2
        && w.rank() == 2
        && w.shape[0] == x.shape[1]
        && w.shape[1] >= 1
        && state.shape == [w.shape[1] - 1, x.shape[1]];
    if !fits {
        return shape_err(
            op,
            format!(
                "x {:?}, w {:?}, state {:?}: want x [t, c], w [c, kernel], state [kernel - 1, c]",
                x.shape, w.shape, state.shape
            ),
        );
    }
    meta(vec![x.shape[0] + w.shape[1] - 1, x.shape[1]], DType::F32)
}

/// `q`, `k [t, hk, dk]`, `v [t, hv, dv]`, `g`, `beta [t, hv]`, `state [hv,
/// dk, dv]` (all f32, `hv` a multiple of `hk`) -> f32 `[t * hv * dv + hv *
/// dk * dv]`.
pub(super) fn gated_delta_rule(inputs: &[TensorMeta]) -> Result<TensorMeta> {
    let op = "gated_delta_rule";
    for t in inputs {
        f32_input(op, t)?;
    }
    let (q, k, v, g, beta, state) = (
        &inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4], &inputs[5],
    );
    let fits = q.rank() == 3 && v.rank() == 3 && k.shape == q.shape && {
        let (t, hk, dk) = (q.shape[0], q.shape[1], q.shape[2]);
        let (hv, dv) = (v.shape[1], v.shape[2]);
        v.shape[0] == t
            && hk > 0
            && hv % hk == 0
            && g.shape == [t, hv]
            && beta.shape == [t, hv]
            && state.shape == [hv, dk, dv]
    };
    if !fits {
        return shape_err(
            op,
            format!(
                "q {:?}, k {:?}, v {:?}, g {:?}, beta {:?}, state {:?}: want q and k [t, hk, dk], \
                 v [t, hv, dv] (hv a multiple of hk), g and beta [t, hv], state [hv, dk, dv]",
                q.shape, k.shape, v.shape, g.shape, beta.shape, state.shape
            ),
        );
    }
    let (t, dk, hv, dv) = (q.shape[0], q.shape[2], v.shape[1], v.shape[2]);
    meta(vec![t * hv * dv + hv * dk * dv], DType::F32)
}
