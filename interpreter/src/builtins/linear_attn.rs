//! The linear-attention builtins of Gated DeltaNet (Qwen3.5):
//! `causal_conv1d` and `gated_delta_rule` (the ops of the same names) and a
//! recurrent layer's state in the cache (`recurrent_state`,
//! `set_recurrent_state`, through the executor so a graph capture sees
//! them). `None` for a builtin of another family.
//!
//! `recurrent_state(cache, shapes)` declares the state's shapes: before the
//! first write it gives zeros of them (made here, through the executor, as
//! `zeros` makes them), and a graph capture makes the state inputs of those
//! shapes, so one graph serves the first step and every later one.

use std::rc::Rc;

use mllm_backends::{DType, Op, Tensor, TensorMeta};
use mllm_dsl::builtins::Builtin;

use super::args::{dims, type_err, Args};
use crate::arith::as_int;
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
            let metas = declared_shapes(b, a)?;
            let got = it
                .exec
                .state_read(&mut cache.borrow_mut(), layer, metas.as_deref())
                .map_err(|e| RtError::new("mdl::run::cache", e.to_string()))?;
            let tensors = match (got, metas) {
                (Some(ts), Some(metas)) => {
                    check_declared(layer, &ts, &metas)?;
                    ts
                }
                (Some(ts), None) => ts,
                (None, Some(metas)) => metas
                    .into_iter()
                    .map(|m| {
                        it.op(
                            Op::Full {
                                shape: m.shape,
                                value: 0.0,
                                dtype: m.dtype,
                            },
                            &[],
                        )
                    })
                    .collect::<RtResult<Vec<_>>>()?,
                (None, None) => return Ok(Some(Value::None)),
            };
            Value::List(Rc::new(tensors.into_iter().map(Value::Tensor).collect()))
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

/// The `shapes` argument (a list of shapes) as f32 tensor types; `None`
/// when the call leaves it out.
fn declared_shapes(b: Builtin, a: &Args) -> RtResult<Option<Vec<TensorMeta>>> {
    let want = "a list of shapes (lists of ints)";
    let Some(v) = a.get(1) else {
        return Ok(None);
    };
    let (Value::List(items) | Value::Tuple(items)) = v else {
        return Err(type_err(b, "shapes", want, v));
    };
    items
        .iter()
        .map(|s| match s {
            Value::List(d) | Value::Tuple(d) => {
                let ints = d
                    .iter()
                    .map(as_int)
                    .collect::<RtResult<Vec<_>>>()
                    .map_err(|_| type_err(b, "shapes", want, v))?;
                Ok(TensorMeta::new(dims(&ints)?, DType::F32))
            }
            _ => Err(type_err(b, "shapes", want, v)),
        })
        .collect::<RtResult<Vec<_>>>()
        .map(Some)
}

/// A stored state must have the shapes the script declares: a captured
/// graph takes states of exactly those, so eager steps hold to them too.
fn check_declared(layer: usize, ts: &[Tensor], metas: &[TensorMeta]) -> RtResult<()> {
    let got: Vec<TensorMeta> = ts.iter().map(TensorMeta::of).collect();
    if got == metas {
        return Ok(());
    }
    let list = |ms: &[TensorMeta]| {
        ms.iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(RtError::new(
        "mdl::run::cache",
        format!(
            "layer {layer}'s recurrent state is [{}], but `recurrent_state` declares [{}]: a state keeps the declared shapes from step to step",
            list(&got),
            list(metas)
        ),
    ))
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
