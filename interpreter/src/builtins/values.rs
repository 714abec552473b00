//! The value builtins (numbers, lists, shapes, printing, asserts) and the KV
//! cache's; `None` for a builtin of another family.

use std::rc::Rc;

use mllm_backends::{DType, Op, Tensor};
use mllm_dsl::builtins::Builtin;

use super::args::{shape_list, type_err, Args};
use super::convert::{to_list, to_tensor_like};
use crate::error::{RtError, RtResult};
use crate::eval::{truthy, Interp};
use crate::value::Value;

pub(super) fn call(it: &mut Interp, b: Builtin, a: &Args) -> RtResult<Option<Value>> {
    let t = |x: Tensor| Ok(Value::Tensor(x));
    let v = match b {
        Builtin::Float => match a.get(0) {
            Some(Value::Int(i)) => Ok(Value::Float(*i as f64)),
            Some(Value::Float(f)) => Ok(Value::Float(*f)),
            Some(Value::Bool(x)) => Ok(Value::Float(if *x { 1.0 } else { 0.0 })),
            Some(Value::Tensor(x)) => t(it.op(Op::Cast { dtype: DType::F32 }, &[x])?),
            Some(v) => Err(type_err(b, "x", "a number or tensor", v)),
            None => unreachable!("required"),
        },
        Builtin::Int => match a.get(0) {
            Some(Value::Int(i)) => Ok(Value::Int(*i)),
            Some(Value::Float(f)) if f.is_finite() && f.abs() < 9e18 => {
                Ok(Value::Int(f.trunc() as i64))
            }
            Some(Value::Bool(x)) => Ok(Value::Int(*x as i64)),
            Some(Value::Tensor(x)) => t(it.op(Op::Cast { dtype: DType::I32 }, &[x])?),
            Some(v) => Err(type_err(b, "x", "a finite number or tensor", v)),
            None => unreachable!("required"),
        },
        Builtin::Shape => Ok(shape_list(a.tensor(0)?.shape())),
        Builtin::ToList => to_list(&it.exec.read(&a.tensor(0)?)?),
        Builtin::Item => {
            let x = it.exec.read(&a.tensor(0)?)?;
            let v = x.item()?;
            Ok(if x.dtype() == DType::I32 {
                Value::Int(v as i64)
            } else {
                Value::Float(v)
            })
        }
        Builtin::Size => {
            let x = a.tensor(0)?;
            let d = a.dim(1, &x)?;
            Ok(Value::Int(x.shape()[d] as i64))
        }
        Builtin::Len => match a.get(0) {
            Some(Value::List(v)) | Some(Value::Tuple(v)) => Ok(Value::Int(v.len() as i64)),
            Some(Value::Str(s)) => Ok(Value::Int(s.chars().count() as i64)),
            Some(Value::Tensor(x)) => Ok(Value::Int(*x.shape().first().unwrap_or(&1) as i64)),
            Some(v) => Err(type_err(b, "x", "a list, tuple, string or tensor", v)),
            None => unreachable!("required"),
        },
        Builtin::Range => {
            let (start, end) = match a.get(1) {
                Some(_) => (a.int(0)?, a.int(1)?),
                None => (0, a.int(0)?),
            };
            let step = a.int(2)?;
            if step == 0 {
                return Err(RtError::new(
                    "mdl::run::range",
                    "range step must not be zero",
                ));
            }
            let n = if step > 0 {
                (end - start).max(0) / step
            } else {
                (start - end).max(0) / -step
            };
            if n > 1 << 24 {
                return Err(RtError::new("mdl::run::range", "range is too long"));
            }
            let mut out = vec![];
            let mut i = start;
            while (step > 0 && i < end) || (step < 0 && i > end) {
                out.push(Value::Int(i));
                i += step;
            }
            Ok(Value::List(Rc::new(out)))
        }
        Builtin::Enumerate => {
            let items = it.iterate(a.get(0).cloned().unwrap_or(Value::None))?;
            Ok(Value::List(Rc::new(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| Value::Tuple(Rc::new(vec![Value::Int(i as i64), v])))
                    .collect(),
            )))
        }
        Builtin::Zip => {
            let xs = it.iterate(a.get(0).cloned().unwrap_or(Value::None))?;
            let ys = it.iterate(a.get(1).cloned().unwrap_or(Value::None))?;
            Ok(Value::List(Rc::new(
                xs.into_iter()
                    .zip(ys)
                    .map(|(x, y)| Value::Tuple(Rc::new(vec![x, y])))
                    .collect(),
            )))
        }
        Builtin::Min | Builtin::Max => {
            let (x, y) = (
                a.get(0).cloned().unwrap_or(Value::None),
                a.get(1).cloned().unwrap_or(Value::None),
            );
            match (&x, &y) {
                (Value::Int(p), Value::Int(q)) => Ok(Value::Int(if b == Builtin::Min {
                    *p.min(q)
                } else {
                    *p.max(q)
                })),
                (Value::Tensor(_), _) | (_, Value::Tensor(_)) => {
                    let like = match (&x, &y) {
                        (Value::Tensor(p), _) => p.clone(),
                        (_, Value::Tensor(q)) => q.clone(),
                        _ => unreachable!("one is a tensor"),
                    };
                    let p = to_tensor_like(it, &x, &like)?;
                    let q = to_tensor_like(it, &y, &like)?;
                    let op = if b == Builtin::Min {
                        mllm_backends::BinaryOp::Min
                    } else {
                        mllm_backends::BinaryOp::Max
                    };
                    t(it.op(Op::Binary(op), &[&p, &q])?)
                }
                _ => {
                    let p = a.float(0)?;
                    let q = a.float(1)?;
                    Ok(Value::Float(if b == Builtin::Min {
                        p.min(q)
                    } else {
                        p.max(q)
                    }))
                }
            }
        }
        Builtin::Print => {
            let parts: Vec<String> = a
                .vals
                .iter()
                .map(|v| format!("{:?}", v.as_ref().unwrap_or(&Value::None)))
                .collect();
            eprintln!("{}", parts.join(" "));
            Ok(Value::None)
        }
        Builtin::Assert => {
            let ok = truthy(a.get(0).unwrap_or(&Value::None))?;
            if ok {
                Ok(Value::None)
            } else {
                let msg = a.get(1).map(|m| match m {
                    Value::Str(s) => s.to_string(),
                    other => format!("{other:?}"),
                });
                Err(RtError::new(
                    "mdl::run::assert",
                    msg.unwrap_or_else(|| "assertion failed".into()),
                ))
            }
        }
        Builtin::HasWeights => {
            let member = a.str(0)?;
            Ok(Value::Bool(has_weights(it, &member)))
        }
        Builtin::Keeps => {
            let name = a.str(0)?;
            Ok(Value::Bool(it.exec.keeps(&name)))
        }
        Builtin::Emit => {
            let name = a.str(0)?;
            let x = a.tensor(1)?;
            it.exec.emit(&name, &x)?;
            Ok(Value::Tensor(x))
        }
        Builtin::Layer => match a.get(0) {
            Some(Value::Cache(c)) => {
                let i = a.int(1)?;
                let i = usize::try_from(i)
                    .map_err(|_| RtError::new("mdl::run::cache", "layer index must be >= 0"))?;
                Ok(Value::LayerCache(c.clone(), i))
            }
            Some(Value::BatchCache(c)) => {
                let i = a.int(1)?;
                let i = usize::try_from(i)
                    .map_err(|_| RtError::new("mdl::run::cache", "layer index must be >= 0"))?;
                Ok(Value::BatchLayerCache(c.clone(), i))
            }
            Some(v) => Err(type_err(b, "cache", "a kv cache", v)),
            None => unreachable!("required"),
        },
        Builtin::Append => match a.get(0) {
            Some(Value::LayerCache(c, i)) => {
                let (k, v) = it
                    .exec
                    .kv_append(&mut c.borrow_mut(), *i, &a.tensor(1)?, &a.tensor(2)?)
                    .map_err(|e| RtError::new("mdl::run::cache", e.to_string()))?;
                Ok(Value::Tuple(Rc::new(vec![
                    Value::Tensor(k),
                    Value::Tensor(v),
                ])))
            }
            Some(Value::BatchLayerCache(caches, i)) => {
                // Row `r` of the new keys and values is the sequence whose
                // cache is `caches[r]`. A sequence may have several rows
                // (consecutive, one cache repeated: a speculative
                // verification step); they are appended together, and row
                // `j` of such a run sees the keys up to and including its
                // own, as a one-row step at its position would.
                let (k, v) = (a.tensor(1)?, a.tensor(2)?);
                let err =
                    |e: mllm_backends::BackendError| RtError::new("mdl::run::cache", e.to_string());
                if k.shape().first() != Some(&caches.len()) {
                    return Err(RtError::new(
                        "mdl::run::cache",
                        format!(
                            "a batch of {} rows appends one key row each, got keys {:?}",
                            caches.len(),
                            k.shape()
                        ),
                    ));
                }
                let (mut keys, mut values) = (vec![], vec![]);
                let mut r = 0;
                while r < caches.len() {
                    let c = &caches[r];
                    let n = caches[r..].iter().take_while(|o| Rc::ptr_eq(o, c)).count();
                    let kr = k.narrow0(r, r + n).map_err(err)?;
                    let vr = v.narrow0(r, r + n).map_err(err)?;
                    let (kk, vv) = it
                        .exec
                        .kv_append(&mut c.borrow_mut(), *i, &kr, &vr)
                        .map_err(|e| RtError::new("mdl::run::cache", e.to_string()))?;
                    if n == 1 {
                        keys.push(kk);
                        values.push(vv);
                        r += 1;
                        continue;
                    }
                    let len = kk.shape().first().copied().unwrap_or(0);
                    for j in 0..n {
                        let upto = len + 1 + j - n;
                        keys.push(kk.narrow0(0, upto).map_err(err)?);
                        values.push(vv.narrow0(0, upto).map_err(err)?);
                    }
                    r += n;
                }
                Ok(Value::Tuple(Rc::new(vec![
                    Value::Ragged(Rc::new(keys)),
                    Value::Ragged(Rc::new(values)),
                ])))
            }
            Some(v) => Err(type_err(
                b,
                "cache",
                "a layer kv cache (`cache.layer(i)`)",
                v,
            )),
            None => unreachable!("required"),
        },
        Builtin::CacheLen => match a.get(0) {
            Some(Value::LayerCache(c, i)) => Ok(Value::Int(c.borrow().len(*i) as i64)),
            Some(Value::Cache(c)) => Ok(Value::Int(c.borrow().len(0) as i64)),
            Some(v) => Err(type_err(b, "cache", "a kv cache", v)),
            None => unreachable!("required"),
        },
        _ => return Ok(None),
    };
    v.map(Some)
}

/// Whether the checkpoint being bound holds a tensor under `member` of the
/// module under construction (`has_weights`).
fn has_weights(it: &Interp, member: &str) -> bool {
    let (Some(path), Some(binder)) = (it.ctor_path.as_deref(), it.binder.as_ref()) else {
        return false;
    };
    let prefix = if path.is_empty() {
        format!("{member}.")
    } else {
        format!("{path}.{member}.")
    };
    binder.holds_prefix(&prefix)
}
