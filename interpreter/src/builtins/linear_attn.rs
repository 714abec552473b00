//! The linear-attention builtins of Gated DeltaNet (Qwen3.5):
//! `causal_conv1d` and `gated_delta_rule` (the ops of the same names) and a
//! recurrent layer's state in the cache (`recurrent_state`,
//! `set_recurrent_state`, through the executor so a graph capture sees
//! them). `None` for a builtin of another family.

use std::rc::Rc;

use mllm_backends::{Op, Tensor};
use mllm_dsl::builtins::Builtin;

use super::args::{type_err, Args};
use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::value::Value;

pub(super) fn call(it: &mut Interp, b: Builtin, a: &Args) -> RtResult<Option<Value>> {
    let v = match b {
        Builtin::CausalConv1d => {
            let (x, w, s) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            Value::Tensor(it.op(Op::CausalConv1d, &[&x, &w, &s])?)
        }
        Builtin::GatedDeltaRule => {
            let ins = (0..6).map(|i| a.tensor(i)).collect::<RtResult<Vec<_>>>()?;
            let refs: Vec<&Tensor> = ins.iter().collect();
            Value::Tensor(it.op(Op::GatedDeltaRule, &refs)?)
        }
        Builtin::RecurrentState => {
            let (cache, layer) = layer_cache(b, a)?;
            let got = it
                .exec
                .state_read(&mut cache.borrow_mut(), layer)
                .map_err(|e| RtError::new("mdl::run::cache", e.to_string()))?;
            match got {
                Some(ts) => Value::List(Rc::new(ts.into_iter().map(Value::Tensor).collect())),
                None => Value::None,
            }
        }
        Builtin::SetRecurrentState => {
            let (cache, layer) = layer_cache(b, a)?;
            let want = "a list of tensors";
            let states = match a.get(1) {
                Some(l @ (Value::List(items) | Value::Tuple(items))) => items
                    .iter()
                    .map(|v| match v {
                        Value::Tensor(t) => Ok(t.clone()),
                        _ => Err(type_err(b, "states", want, l)),
                    })
                    .collect::<RtResult<Vec<_>>>()?,
                Some(v) => return Err(type_err(b, "states", want, v)),
                None => return Err(a.missing(1)),
            };
            let tokens = a.int(2)?;
            let tokens = usize::try_from(tokens).map_err(|_| {
                RtError::new(
                    "mdl::run::cache",
                    format!("set_recurrent_state: tokens must not be negative, got {tokens}"),
                )
            })?;
            it.exec
                .state_write(&mut cache.borrow_mut(), layer, states, tokens)
                .map_err(|e| RtError::new("mdl::run::cache", e.to_string()))?;
            Value::None
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

/// The cache and layer of a `cache.layer(i)` argument. A batch of caches
/// (batched decode) is refused: each sequence's state would have to be
/// stacked and split per step, which is not done yet.
fn layer_cache(
    b: Builtin,
    a: &Args,
) -> RtResult<(Rc<std::cell::RefCell<crate::cache::KvCache>>, usize)> {
    match a.get(0) {
        Some(Value::LayerCache(c, i)) => Ok((c.clone(), *i)),
        Some(Value::BatchLayerCache(..)) => Err(RtError::new(
            "mdl::run::cache",
            format!(
                "`{}`: batched decode of a model with recurrent (linear-attention) layers is not supported yet; decode its sequences one at a time",
                b.name()
            ),
        )),
        Some(v) => Err(type_err(b, "cache", "a layer kv cache (`cache.layer(i)`)", v)),
        None => Err(a.missing(0)),
    }
}
