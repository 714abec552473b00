//! Script values to tensors (nested lists become executor constants) and
//! tensor data back to script values.

use std::rc::Rc;

use mllm_backends::{DType, Tensor};

use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::value::Value;

/// Flattens a nested list of numbers into values and a shape.
fn flatten(
    v: &Value,
    depth: usize,
    shape: &mut Vec<usize>,
    out: &mut Vec<f64>,
    all_int: &mut bool,
) -> RtResult<()> {
    match v {
        Value::List(items) | Value::Tuple(items) => {
            if shape.len() == depth {
                shape.push(items.len());
            } else if shape.get(depth) != Some(&items.len()) {
                return Err(RtError::new(
                    "mdl::run::shape",
                    "nested lists have different lengths",
                ));
            }
            for i in items.iter() {
                flatten(i, depth + 1, shape, out, all_int)?;
            }
            Ok(())
        }
        Value::Int(i) => {
            out.push(*i as f64);
            Ok(())
        }
        Value::Float(f) => {
            *all_int = false;
            out.push(*f);
            Ok(())
        }
        Value::Bool(b) => {
            out.push(if *b { 1.0 } else { 0.0 });
            Ok(())
        }
        other => Err(RtError::new(
            "mdl::run::type",
            format!("a tensor cannot hold a {}", other.type_name()),
        )),
    }
}

/// A tensor value as it is, or a nested list of numbers made into a
/// constant through the executor.
pub(super) fn to_tensor(it: &mut Interp, v: &Value, dtype: Option<DType>) -> RtResult<Tensor> {
    if let Value::Tensor(t) = v {
        return Ok(t.clone());
    }
    let (mut shape, mut vals, mut all_int) = (vec![], vec![], true);
    flatten(v, 0, &mut shape, &mut vals, &mut all_int)?;
    if vals.len() != shape.iter().product::<usize>() {
        return Err(RtError::new("mdl::run::shape", "ragged nested list"));
    }
    let dtype = dtype.unwrap_or(if all_int { DType::I32 } else { DType::F32 });
    let t = match dtype {
        DType::I32 => Tensor::from_i32(vals.iter().map(|&x| x as i32).collect(), shape)?,
        _ => Tensor::from_f32(vals.iter().map(|&x| x as f32).collect(), shape)?,
    };
    Ok(it.exec.constant(t)?)
}

/// A tensor's values as nested lists (ints for i32, floats otherwise); a
/// 0-d tensor gives its number.
pub(super) fn to_list(x: &Tensor) -> RtResult<Value> {
    if x.numel() > crate::limits::MAX_ITEMS {
        return Err(RtError::new(
            "mdl::run::memory_limit",
            format!(
                "to_list of a tensor of {} values; lists hold at most {}",
                x.numel(),
                crate::limits::MAX_ITEMS
            ),
        ));
    }
    let vals: Vec<Value> = if x.dtype() == DType::I32 {
        x.i32s()?.iter().map(|&v| Value::Int(v as i64)).collect()
    } else {
        x.to_f32_vec()?
            .into_iter()
            .map(|v| Value::Float(v as f64))
            .collect()
    };
    fn nest(vals: &[Value], shape: &[usize]) -> Value {
        match shape {
            [] => vals.first().cloned().unwrap_or(Value::None),
            [_] => Value::List(Rc::new(vals.to_vec())),
            [n, rest @ ..] => {
                let step = rest.iter().product::<usize>();
                Value::List(Rc::new(
                    (0..*n)
                        .map(|i| nest(&vals[i * step..(i + 1) * step], rest))
                        .collect(),
                ))
            }
        }
    }
    Ok(nest(&vals, x.shape()))
}

pub(super) fn to_tensor_like(it: &mut Interp, v: &Value, like: &Tensor) -> RtResult<Tensor> {
    match v {
        Value::Tensor(t) => Ok(t.clone()),
        other => it.scalar_tensor(other, like)?.ok_or_else(|| {
            RtError::new(
                "mdl::run::type",
                format!("expected a number or tensor, found {}", other.type_name()),
            )
        }),
    }
}
