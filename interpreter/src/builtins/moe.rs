//! The mixture-of-experts builtins: `topk` (a router's choice: indexes by
//! `Op::TopK`, then their values by `Op::Gather`), `gather` (torch.gather)
//! and `moe_linear` (`Op::MoeLinear` over one stacked `[e, n, k]` weight or
//! a list of `[n, k]` expert weights). `None` for a builtin of another
//! family.

use std::rc::Rc;

use mllm_backends::{DType, Op, Tensor};
use mllm_dsl::builtins::Builtin;

use super::args::{type_err, Args};
use super::convert::to_tensor;
use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::value::Value;

pub(super) fn call(it: &mut Interp, b: Builtin, a: &Args) -> RtResult<Option<Value>> {
    let v = match b {
        Builtin::TopK => {
            let x = a.tensor(0)?;
            let k = a.int(1)?;
            let k = usize::try_from(k).map_err(|_| {
                RtError::new(
                    "mdl::run::shape",
                    format!("topk: k must not be negative, got {k}"),
                )
            })?;
            let idx = it.op(Op::TopK { k }, &[&x])?;
            let dim = x.rank().saturating_sub(1);
            let values = it.op(Op::Gather { dim }, &[&x, &idx])?;
            Value::Tuple(Rc::new(vec![Value::Tensor(values), Value::Tensor(idx)]))
        }
        Builtin::Gather => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x)?;
            let idx = to_tensor(it, a.get(2).unwrap_or(&Value::None), Some(DType::I32))?;
            Value::Tensor(it.op(Op::Gather { dim }, &[&x, &idx])?)
        }
        Builtin::MoeLinear => {
            let x = a.tensor(0)?;
            let ids = to_tensor(it, a.get(1).unwrap_or(&Value::None), Some(DType::I32))?;
            let weights = expert_weights(b, a.get(2))?;
            let mut inputs: Vec<&Tensor> = vec![&x, &ids];
            inputs.extend(weights.iter());
            Value::Tensor(it.op(Op::MoeLinear, &inputs)?)
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

/// One stacked tensor, or a (non-empty) list or tuple of tensors.
fn expert_weights(b: Builtin, w: Option<&Value>) -> RtResult<Vec<Tensor>> {
    let want = "a tensor [experts, out, in] or a list of [out, in] tensors";
    match w {
        Some(Value::Tensor(t)) => Ok(vec![t.clone()]),
        Some(l @ (Value::List(items) | Value::Tuple(items))) => {
            if items.is_empty() {
                return Err(RtError::new(
                    "mdl::run::shape",
                    "moe_linear: the list of expert weights is empty",
                ));
            }
            items
                .iter()
                .map(|v| match v {
                    Value::Tensor(t) => Ok(t.clone()),
                    _ => Err(type_err(b, "weights", want, l)),
                })
                .collect()
        }
        Some(v) => Err(type_err(b, "weights", want, v)),
        None => Err(RtError::new(
            "mdl::run::arity",
            "`moe_linear` needs `weights`",
        )),
    }
}
