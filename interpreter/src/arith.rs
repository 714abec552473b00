//! Operators on script values: unary and binary operators on numbers,
//! strings, lists and tensors (tensor arithmetic through the executor, with
//! numbers made into constants), and the int conversions they share.

use std::rc::Rc;

use mllm_backends::{BinaryOp, DType, Op, Tensor};
use mllm_dsl::ast::{BinOp, UnOp};

use crate::error::{RtError, RtResult};
use crate::eval::{truthy, Interp};
use crate::value::Value;

impl Interp<'_> {
    pub(crate) fn unary(&mut self, op: UnOp, v: Value) -> RtResult<Value> {
        Ok(match (op, v) {
            (UnOp::Neg, Value::Int(i)) => Value::Int(
                i.checked_neg()
                    .ok_or_else(|| RtError::msg("integer overflow"))?,
            ),
            (UnOp::Neg, Value::Float(f)) => Value::Float(-f),
            (UnOp::Neg, Value::Tensor(t)) => {
                Value::Tensor(self.op(Op::Unary(mllm_backends::UnaryOp::Neg), &[&t])?)
            }
            (UnOp::Not, v @ (Value::Bool(_) | Value::None)) => Value::Bool(!truthy(&v)?),
            (op, v) => {
                let sym = if op == UnOp::Neg { "-" } else { "!" };
                return Err(RtError::new(
                    "mdl::run::type",
                    format!("cannot apply `{sym}` to a {}", v.type_name()),
                ));
            }
        })
    }

    /// Turns a number into a 0-d tensor matching `like`'s kind (i32 stays i32
    /// for ints, f32 otherwise), made through the executor.
    pub(crate) fn scalar_tensor(&mut self, v: &Value, like: &Tensor) -> RtResult<Option<Tensor>> {
        let t = match v {
            Value::Int(i) if like.dtype() == DType::I32 => {
                i32::try_from(*i).ok().map(Tensor::scalar_i32)
            }
            Value::Int(i) => Some(Tensor::scalar_f32(*i as f32)),
            Value::Float(f) => Some(Tensor::scalar_f32(*f as f32)),
            Value::Bool(b) => Some(Tensor::scalar_f32(if *b { 1.0 } else { 0.0 })),
            _ => None,
        };
        t.map(|t| self.exec.constant(t).map_err(RtError::from))
            .transpose()
    }

    /// A view of `t` in a new shape, through the executor.
    pub(crate) fn reshape(&mut self, t: &Tensor, shape: Vec<usize>) -> RtResult<Tensor> {
        self.op(Op::Reshape { shape }, &[t])
    }

    /// An int from a script value; a one-element i32 tensor is read back
    /// through the executor.
    pub(crate) fn int_of(&mut self, v: &Value) -> RtResult<i64> {
        match v {
            Value::Tensor(t) if t.numel() == 1 && t.dtype() == DType::I32 => {
                let host = self.exec.read(t)?;
                Ok(host.i32s()?[0] as i64)
            }
            other => as_int(other),
        }
    }

    pub(crate) fn binary(&mut self, op: BinOp, a: Value, b: Value) -> RtResult<Value> {
        use Value::*;
        let type_err = |a: &Value, b: &Value| {
            RtError::new(
                "mdl::run::type",
                format!(
                    "cannot apply `{}` to a {} and a {}",
                    op.symbol(),
                    a.type_name(),
                    b.type_name()
                ),
            )
        };
        match (&a, &b) {
            (Int(x), Int(y)) => int_op(op, *x, *y),
            (Int(_) | Float(_), Int(_) | Float(_)) => {
                let (x, y) = (num(&a), num(&b));
                Ok(match op {
                    BinOp::Add => Float(x + y),
                    BinOp::Sub => Float(x - y),
                    BinOp::Mul => Float(x * y),
                    BinOp::Div => Float(x / y),
                    BinOp::FloorDiv => Float((x / y).floor()),
                    BinOp::Rem => Float(x - y * (x / y).floor()),
                    BinOp::Pow => Float(x.powf(y)),
                    BinOp::Eq => Bool(x == y),
                    BinOp::Ne => Bool(x != y),
                    BinOp::Lt => Bool(x < y),
                    BinOp::Le => Bool(x <= y),
                    BinOp::Gt => Bool(x > y),
                    BinOp::Ge => Bool(x >= y),
                    _ => return Err(type_err(&a, &b)),
                })
            }
            (Bool(x), Bool(y)) => match op {
                BinOp::Eq => Ok(Bool(x == y)),
                BinOp::Ne => Ok(Bool(x != y)),
                _ => Err(type_err(&a, &b)),
            },
            (Str(x), Str(y)) => match op {
                BinOp::Add => {
                    too_long(x.len() + y.len(), "a string of", "bytes")?;
                    Ok(Str(format!("{x}{y}").into()))
                }
                BinOp::Eq => Ok(Bool(x == y)),
                BinOp::Ne => Ok(Bool(x != y)),
                _ => Err(type_err(&a, &b)),
            },
            (None, _) | (_, None) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                let same = a.is_none() == b.is_none();
                Ok(Bool(if op == BinOp::Eq { same } else { !same }))
            }
            (List(_) | Tuple(_), List(_) | Tuple(_)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                let same = values_equal(&a, &b).ok_or_else(|| type_err(&a, &b))?;
                Ok(Bool(same == (op == BinOp::Eq)))
            }
            (List(x), List(y)) if op == BinOp::Add => {
                too_long(x.len() + y.len(), "a list of", "items")?;
                Ok(List(Rc::new(x.iter().chain(y.iter()).cloned().collect())))
            }
            (Tensor(_), _) | (_, Tensor(_)) => {
                let (ta, tb) = match (&a, &b) {
                    (Tensor(x), Tensor(y)) => (x.clone(), y.clone()),
                    (Tensor(x), other) => (
                        x.clone(),
                        self.scalar_tensor(other, x)?
                            .ok_or_else(|| type_err(&a, &b))?,
                    ),
                    (other, Tensor(y)) => (
                        self.scalar_tensor(other, y)?
                            .ok_or_else(|| type_err(&a, &b))?,
                        y.clone(),
                    ),
                    _ => unreachable!("one side is a tensor"),
                };
                let bop = match op {
                    BinOp::MatMul => return Ok(Tensor(self.op(Op::Matmul, &[&ta, &tb])?)),
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::Mul => BinaryOp::Mul,
                    BinOp::Div => {
                        // `/` is true division, as in Python: ints become floats.
                        let f32 = Op::Cast { dtype: DType::F32 };
                        let ta = self.op(f32.clone(), &[&ta])?;
                        let tb = self.op(f32, &[&tb])?;
                        return Ok(Tensor(self.op(Op::Binary(BinaryOp::Div), &[&ta, &tb])?));
                    }
                    BinOp::FloorDiv if ta.dtype() == DType::I32 && tb.dtype() == DType::I32 => {
                        BinaryOp::Div
                    }
                    BinOp::Pow => BinaryOp::Pow,
                    BinOp::Eq => BinaryOp::Eq,
                    BinOp::Ne => BinaryOp::Ne,
                    BinOp::Lt => BinaryOp::Lt,
                    BinOp::Le => BinaryOp::Le,
                    BinOp::Gt => BinaryOp::Gt,
                    BinOp::Ge => BinaryOp::Ge,
                    _ => return Err(type_err(&a, &b)),
                };
                Ok(Tensor(self.op(Op::Binary(bop), &[&ta, &tb])?))
            }
            _ => Err(type_err(&a, &b)),
        }
    }
}

/// Python's `==` on plain values: lists and tuples item by item, ints and
/// floats by value; `None` when an item is not comparable (a tensor).
fn values_equal(a: &Value, b: &Value) -> Option<bool> {
    use Value::*;
    Some(match (a, b) {
        (List(x) | Tuple(x), List(y) | Tuple(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                if !values_equal(p, q)? {
                    return Some(false);
                }
            }
            true
        }
        (Int(_) | Float(_), Int(_) | Float(_)) => num(a) == num(b),
        (Bool(x), Bool(y)) => x == y,
        (Str(x), Str(y)) => x == y,
        (None, None) => true,
        (Tensor(_), _) | (_, Tensor(_)) => return Option::None,
        _ => false,
    })
}

fn num(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        _ => f64::NAN,
    }
}

pub(crate) fn as_int(v: &Value) -> RtResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9e15 => Ok(*f as i64),
        other => Err(RtError::new(
            "mdl::run::type",
            format!("expected an int, found {}", other.type_name()),
        )),
    }
}

fn int_op(op: BinOp, x: i64, y: i64) -> RtResult<Value> {
    let overflow = || RtError::msg("integer overflow");
    Ok(match op {
        BinOp::Add => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
        BinOp::Sub => Value::Int(x.checked_sub(y).ok_or_else(overflow)?),
        BinOp::Mul => Value::Int(x.checked_mul(y).ok_or_else(overflow)?),
        BinOp::Div => Value::Float(x as f64 / y as f64),
        BinOp::FloorDiv | BinOp::Rem if y == 0 => {
            return Err(RtError::msg("integer division by zero"))
        }
        BinOp::FloorDiv => {
            Value::Int(x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 })
        }
        BinOp::Rem => Value::Int(
            x - y * (x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 }),
        ),
        BinOp::Pow if y >= 0 => Value::Int(
            x.checked_pow(u32::try_from(y).map_err(|_| overflow())?)
                .ok_or_else(overflow)?,
        ),
        BinOp::Pow => Value::Float((x as f64).powf(y as f64)),
        BinOp::Eq => Value::Bool(x == y),
        BinOp::Ne => Value::Bool(x != y),
        BinOp::Lt => Value::Bool(x < y),
        BinOp::Le => Value::Bool(x <= y),
        BinOp::Gt => Value::Bool(x > y),
        BinOp::Ge => Value::Bool(x >= y),
        _ => {
            return Err(RtError::new(
                "mdl::run::type",
                format!("cannot apply `{}` to ints", op.symbol()),
            ))
        }
    })
}

/// Concatenations may not build values past `MAX_ITEMS`: doubling in a
/// loop takes few steps, so the step limit alone would not stop it.
pub(crate) fn too_long(n: usize, what: &str, unit: &str) -> RtResult<()> {
    if n > crate::limits::MAX_ITEMS {
        return Err(RtError::new(
            "mdl::run::memory_limit",
            format!(
                "{what} {n} {unit} is over the limit of {} {unit}",
                crate::limits::MAX_ITEMS
            ),
        )
        .help("is a value growing without end in a loop?"));
    }
    Ok(())
}
