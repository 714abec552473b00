//! Shape and dtype rules of the mixture-of-experts ops (`TopK`, `Gather`,
//! `MoeLinear`), as `Op::infer` applies them.

use super::{check_dim, f32_input, keep_int, meta, TensorMeta};
use crate::dtype::DType;
use crate::error::{dtype_err, invalid, shape_err, Result};

/// `x [.., n]` (f32) -> i32 `[.., k]`, `1 <= k <= n`.
pub(super) fn topk(x: &TensorMeta, k: usize) -> Result<TensorMeta> {
    f32_input("topk", x)?;
    let n = x.last();
    if x.rank() == 0 || k == 0 || k > n {
        return shape_err(
            "topk",
            format!("k = {k} of rows of {n} in {:?} (1 <= k <= n)", x.shape),
        );
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().unwrap_or(&mut 0) = k;
    meta(shape, DType::I32)
}

/// `x`, `idx` (i32, x's rank and sizes outside `dim`) -> idx's shape.
pub(super) fn gather(x: &TensorMeta, idx: &TensorMeta, dim: usize) -> Result<TensorMeta> {
    check_dim("gather", x, dim)?;
    if idx.dtype != DType::I32 {
        return dtype_err(
            "gather",
            format!("indexes must be i32, found {}", idx.dtype),
        );
    }
    let fits =
        idx.rank() == x.rank() && (0..x.rank()).all(|d| d == dim || idx.shape[d] == x.shape[d]);
    if !fits {
        return shape_err(
            "gather",
            format!(
                "indexes {:?} must have the rank and, outside dimension {dim}, the sizes of {:?}",
                idx.shape, x.shape
            ),
        );
    }
    meta(idx.shape.clone(), keep_int(x.dtype))
}

/// `Op::MoeLinear`: `x [t, k]` or `[t, s, k]`, `ids i32 [t, s]`, then one
/// `[e, n, k]` weight or `e` weights `[n, k]` -> f32 `[t, s, n]`.
pub(super) fn moe_linear(inputs: &[TensorMeta]) -> Result<TensorMeta> {
    let op = "moe_linear";
    if inputs.len() < 3 {
        return invalid(
            op,
            format!(
                "takes x, ids and at least one expert weight, got {} tensors",
                inputs.len()
            ),
        );
    }
    let (x, ids, ws) = (&inputs[0], &inputs[1], &inputs[2..]);
    f32_input(op, x)?;
    if ids.dtype != DType::I32 || ids.rank() != 2 {
        return dtype_err(op, format!("ids must be i32 [tokens, slots], found {ids}"));
    }
    let (t, s) = (ids.shape[0], ids.shape[1]);
    let x_fits = match x.rank() {
        2 => x.shape[0] == t,
        3 => x.shape[..2] == ids.shape[..],
        _ => false,
    };
    if !x_fits {
        return shape_err(
            op,
            format!(
                "x {:?} must be [{t}, k] or [{t}, {s}, k] for ids {:?}",
                x.shape, ids.shape
            ),
        );
    }
    let k = x.last();
    // One stacked weight `[e, n, k]`, or one `[n, k]` per expert.
    let (e, n, k_w) = match ws {
        [w] if w.rank() == 3 => (w.shape[0], w.shape[1], w.shape[2]),
        _ => {
            let first = &ws[0];
            if let Some(w) = ws.iter().find(|w| w.rank() != 2 || w.shape != first.shape) {
                return shape_err(
                    op,
                    format!(
                        "expert weights must be one [experts, out, in] tensor or [out, in] tensors of one shape; found {:?} beside {:?}",
                        w.shape, first.shape
                    ),
                );
            }
            (ws.len(), first.shape[0], first.shape[1])
        }
    };
    if k_w != k || e == 0 {
        return shape_err(
            op,
            format!(
                "{e} experts of [{n}, {k_w}] do not take x {:?} (its last dim must be their in-features)",
                x.shape
            ),
        );
    }
    if let Some(w) = ws
        .iter()
        .find(|w| !w.dtype.is_float() && !w.dtype.is_quantized())
    {
        return dtype_err(
            op,
            format!("expert weights must be float, found {}", w.dtype),
        );
    }
    meta(vec![t, s, n], DType::F32)
}
