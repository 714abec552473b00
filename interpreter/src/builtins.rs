//! Meanings of the builtins named in `mllm_dsl::builtins`: argument checks,
//! then native ops through the executor (tensor work) or plain Rust (values).

use std::rc::Rc;

use mllm_backends::{DType, Op, ReduceOp, Tensor, UnaryOp};
use mllm_dsl::builtins::Builtin;
use mllm_dsl::program::Sym;

use crate::error::{RtError, RtResult};
use crate::eval::{as_int, truthy, Interp};
use crate::value::Value;

fn type_err(b: Builtin, param: &str, want: &str, got: &Value) -> RtError {
    RtError::new(
        "mdl::run::type",
        format!(
            "`{}`: `{param}` must be {want}, found {}",
            b.name(),
            got.type_name()
        ),
    )
}

/// Arguments matched to a builtin's parameters.
struct Args {
    b: Builtin,
    vals: Vec<Option<Value>>,
}

impl Args {
    fn new(it: &Interp, b: Builtin, args: Vec<Value>, kwargs: Vec<(Sym, Value)>) -> RtResult<Args> {
        let sig = b.sig();
        if sig.variadic {
            return Ok(Args {
                b,
                vals: args.into_iter().map(Some).collect(),
            });
        }
        if args.len() > sig.params.len() {
            return Err(RtError::new(
                "mdl::run::arity",
                format!(
                    "`{}` takes at most {} arguments, got {}",
                    sig.name,
                    sig.params.len(),
                    args.len()
                ),
            ));
        }
        let mut vals: Vec<Option<Value>> = args.into_iter().map(Some).collect();
        vals.resize(sig.params.len(), None);
        for (sym, v) in kwargs {
            let name = it.prog.syms.name(sym);
            match sig.params.iter().position(|p| *p == name) {
                Some(i) => vals[i] = Some(v),
                None => {
                    return Err(RtError::new(
                        "mdl::run::arity",
                        format!("`{}` has no parameter `{name}`", sig.name),
                    ))
                }
            }
        }
        // An explicit `none` counts as not given.
        for v in vals.iter_mut() {
            if matches!(v, Some(Value::None)) {
                *v = None;
            }
        }
        if let Some(i) = (0..sig.required).find(|&i| vals[i].is_none()) {
            return Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` is missing argument `{}`", sig.name, sig.params[i]),
            ));
        }
        Ok(Args { b, vals })
    }

    fn name(&self, i: usize) -> &'static str {
        self.b.sig().params.get(i).copied().unwrap_or("argument")
    }

    fn get(&self, i: usize) -> Option<&Value> {
        self.vals.get(i).and_then(|v| v.as_ref())
    }

    fn tensor(&self, i: usize) -> RtResult<Tensor> {
        match self.get(i) {
            Some(Value::Tensor(t)) => Ok(t.clone()),
            Some(other) => Err(type_err(self.b, self.name(i), "a tensor", other)),
            None => Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` needs `{}`", self.b.name(), self.name(i)),
            )),
        }
    }

    fn opt_tensor(&self, i: usize) -> RtResult<Option<Tensor>> {
        self.get(i).map(|_| self.tensor(i)).transpose()
    }

    fn int(&self, i: usize, dflt: i64) -> RtResult<i64> {
        match self.get(i) {
            None => Ok(dflt),
            Some(v) => as_int(v).map_err(|_| type_err(self.b, self.name(i), "an int", v)),
        }
    }

    fn float(&self, i: usize, dflt: f64) -> RtResult<f64> {
        match self.get(i) {
            None => Ok(dflt),
            Some(Value::Int(x)) => Ok(*x as f64),
            Some(Value::Float(x)) => Ok(*x),
            Some(v) => Err(type_err(self.b, self.name(i), "a number", v)),
        }
    }

    fn bool(&self, i: usize, dflt: bool) -> RtResult<bool> {
        match self.get(i) {
            None => Ok(dflt),
            Some(v @ Value::Bool(_)) => truthy(v),
            Some(v) => Err(type_err(self.b, self.name(i), "a bool", v)),
        }
    }

    fn str(&self, i: usize) -> RtResult<Rc<str>> {
        match self.get(i) {
            Some(Value::Str(s)) => Ok(s.clone()),
            Some(v) => Err(type_err(self.b, self.name(i), "a string", v)),
            None => Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` needs `{}`", self.b.name(), self.name(i)),
            )),
        }
    }

    fn ints(&self, i: usize) -> RtResult<Vec<i64>> {
        match self.get(i) {
            Some(Value::List(v)) | Some(Value::Tuple(v)) => v.iter().map(as_int).collect(),
            Some(v) => Err(type_err(self.b, self.name(i), "a list of ints", v)),
            None => Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` needs `{}`", self.b.name(), self.name(i)),
            )),
        }
    }

    /// A dimension index of `t`, negative counting from the end.
    fn dim(&self, i: usize, t: &Tensor, dflt: i64) -> RtResult<usize> {
        let d = self.int(i, dflt)?;
        norm_dim(d, t.rank()).ok_or_else(|| {
            RtError::new(
                "mdl::run::shape",
                format!(
                    "`{}`: dimension {d} is out of range for shape {:?}",
                    self.b.name(),
                    t.shape()
                ),
            )
        })
    }
}

fn norm_dim(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let j = if d < 0 { d + r } else { d };
    (0..r).contains(&j).then_some(j as usize)
}

fn shape_list(shape: &[usize]) -> Value {
    Value::List(Rc::new(
        shape.iter().map(|&d| Value::Int(d as i64)).collect(),
    ))
}

fn dims(v: &[i64]) -> RtResult<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| RtError::new("mdl::run::shape", format!("dimension {d} is negative")))
        })
        .collect()
}

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
fn to_tensor(it: &mut Interp, v: &Value, dtype: Option<DType>) -> RtResult<Tensor> {
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

/// The backend op and the scalar twin of a unary builtin.
type UnaryPair = (UnaryOp, fn(f64) -> f64);

fn unary_of(b: Builtin) -> Option<UnaryPair> {
    Some(match b {
        Builtin::Exp => (UnaryOp::Exp, f64::exp),
        Builtin::Log => (UnaryOp::Log, f64::ln),
        Builtin::Sqrt => (UnaryOp::Sqrt, f64::sqrt),
        Builtin::Rsqrt => (UnaryOp::Rsqrt, |x| 1.0 / x.sqrt()),
        Builtin::Sin => (UnaryOp::Sin, f64::sin),
        Builtin::Cos => (UnaryOp::Cos, f64::cos),
        Builtin::Abs => (UnaryOp::Abs, f64::abs),
        Builtin::Tanh => (UnaryOp::Tanh, f64::tanh),
        Builtin::Sigmoid => (UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        Builtin::Relu => (UnaryOp::Relu, |x| x.max(0.0)),
        Builtin::Silu => (UnaryOp::Silu, |x| x / (1.0 + (-x).exp())),
        Builtin::Gelu => (UnaryOp::Gelu, |x| {
            0.5 * x * (1.0 + libm_erf(x / std::f64::consts::SQRT_2))
        }),
        Builtin::GeluTanh => (UnaryOp::GeluTanh, |x| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }),
        _ => return None,
    })
}

/// erf for scalar script values (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7).
fn libm_erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.3275911 * x.abs());
    let y = 1.0
        - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
            + 0.254829592)
            * t
            * (-x * x).exp();
    if x >= 0.0 {
        y
    } else {
        -y
    }
}

/// Activation functions by their config.json names.
pub fn activation_by_name(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "silu" | "swish" => UnaryOp::Silu,
        "gelu" => UnaryOp::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => UnaryOp::GeluTanh,
        "relu" => UnaryOp::Relu,
        "sigmoid" => UnaryOp::Sigmoid,
        "tanh" => UnaryOp::Tanh,
        _ => return None,
    })
}

pub fn call(
    it: &mut Interp,
    b: Builtin,
    args: Vec<Value>,
    kwargs: Vec<(Sym, Value)>,
) -> RtResult<Value> {
    let a = Args::new(it, b, args, kwargs)?;
    let t = |x: Tensor| Ok(Value::Tensor(x));
    match b {
        Builtin::Linear => {
            let (x, w) = (a.tensor(0)?, a.tensor(1)?);
            match a.opt_tensor(2)? {
                Some(bias) => t(it.op(Op::Linear, &[&x, &w, &bias])?),
                None => t(it.op(Op::Linear, &[&x, &w])?),
            }
        }
        Builtin::Matmul => t(it.op(Op::Matmul, &[&a.tensor(0)?, &a.tensor(1)?])?),
        Builtin::Embedding => {
            let w = a.tensor(0)?;
            let ids = to_tensor(it, a.get(1).unwrap_or(&Value::None), Some(DType::I32))?;
            t(it.op(Op::Embedding, &[&w, &ids])?)
        }
        Builtin::RmsNorm => t(it.op(
            Op::RmsNorm {
                eps: a.float(2, 1e-6)? as f32,
            },
            &[&a.tensor(0)?, &a.tensor(1)?],
        )?),
        Builtin::LayerNorm => t(it.op(
            Op::LayerNorm {
                eps: a.float(3, 1e-5)? as f32,
            },
            &[&a.tensor(0)?, &a.tensor(1)?, &a.tensor(2)?],
        )?),
        Builtin::ApplyRope => t(it.op(
            Op::ApplyRope,
            &[&a.tensor(0)?, &a.tensor(1)?, &a.tensor(2)?],
        )?),
        Builtin::Sdpa => {
            let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            let d = *q.shape().last().unwrap_or(&1) as f64;
            let scale = a.float(4, 1.0 / d.sqrt())? as f32;
            t(it.op(
                Op::Sdpa {
                    causal: a.bool(3, false)?,
                    scale,
                },
                &[&q, &k, &v],
            )?)
        }
        Builtin::Softmax => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x, -1)?;
            t(it.op(Op::Softmax { dim }, &[&x])?)
        }
        Builtin::Activation => {
            let name = a.str(1)?;
            let Some(u) = activation_by_name(&name) else {
                return Err(RtError::new("mdl::run::activation", format!("unknown activation `{name}`")).help("known: silu, swish, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast, relu, sigmoid, tanh"));
            };
            t(it.op(Op::Unary(u), &[&a.tensor(0)?])?)
        }
        Builtin::Argmax => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x, -1)?;
            t(it.op(Op::Argmax { dim }, &[&x])?)
        }
        Builtin::Sum | Builtin::Mean | Builtin::Amax => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x, -1)?;
            let op = match b {
                Builtin::Sum => ReduceOp::Sum,
                Builtin::Mean => ReduceOp::Mean,
                _ => ReduceOp::Max,
            };
            t(it.op(
                Op::Reduce {
                    op,
                    dim,
                    keepdim: a.bool(2, false)?,
                },
                &[&x],
            )?)
        }
        Builtin::Reshape => {
            let x = a.tensor(0)?;
            let want = a.ints(1)?;
            let known: i64 = want.iter().filter(|&&d| d != -1).product();
            let free = want.iter().filter(|&&d| d == -1).count();
            let shape: Vec<i64> = if free == 1 && known > 0 {
                want.iter()
                    .map(|&d| if d == -1 { x.numel() as i64 / known } else { d })
                    .collect()
            } else {
                want.clone()
            };
            if free > 1 {
                return Err(RtError::new("mdl::run::shape", "reshape: at most one -1"));
            }
            t(it.op(
                Op::Reshape {
                    shape: dims(&shape)?,
                },
                &[&x],
            )?)
        }
        Builtin::Permute => {
            let x = a.tensor(0)?;
            let perm = a
                .ints(1)?
                .iter()
                .map(|&d| {
                    norm_dim(d, x.rank()).ok_or_else(|| {
                        RtError::new(
                            "mdl::run::shape",
                            format!("permute: dimension {d} out of range"),
                        )
                    })
                })
                .collect::<RtResult<Vec<_>>>()?;
            t(it.op(Op::Permute { perm }, &[&x])?)
        }
        Builtin::Transpose => {
            let x = a.tensor(0)?;
            let (d0, d1) = (a.dim(1, &x, 0)?, a.dim(2, &x, 0)?);
            let mut perm: Vec<usize> = (0..x.rank()).collect();
            perm.swap(d0, d1);
            t(it.op(Op::Permute { perm }, &[&x])?)
        }
        Builtin::Unsqueeze => {
            let x = a.tensor(0)?;
            let d = a.int(1, 0)?;
            let Some(d) = norm_dim(d, x.rank() + 1) else {
                return Err(RtError::new(
                    "mdl::run::shape",
                    format!(
                        "unsqueeze: dimension {d} out of range for shape {:?}",
                        x.shape()
                    ),
                ));
            };
            let mut shape = x.shape().to_vec();
            shape.insert(d, 1);
            t(it.reshape(&x, shape)?)
        }
        Builtin::Squeeze => {
            let x = a.tensor(0)?;
            let d = a.dim(1, &x, 0)?;
            if x.shape()[d] != 1 {
                return Err(RtError::new(
                    "mdl::run::shape",
                    format!("squeeze: dimension {d} of {:?} is not 1", x.shape()),
                ));
            }
            let mut shape = x.shape().to_vec();
            shape.remove(d);
            t(it.reshape(&x, shape)?)
        }
        Builtin::Concat => {
            let items = match a.get(0) {
                Some(Value::List(v)) | Some(Value::Tuple(v)) => v.clone(),
                Some(v) => return Err(type_err(b, "tensors", "a list of tensors", v)),
                None => unreachable!("required"),
            };
            let ts = items
                .iter()
                .map(|v| to_tensor(it, v, None))
                .collect::<RtResult<Vec<_>>>()?;
            let Some(first) = ts.first() else {
                return Err(RtError::new("mdl::run::shape", "concat of an empty list"));
            };
            let dim = a.dim(1, first, 0)?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            t(it.op(Op::Concat { dim }, &refs)?)
        }
        Builtin::SplitHeads => {
            let x = a.tensor(0)?;
            let h = a.int(1, 1)?;
            let last = *x.shape().last().unwrap_or(&0) as i64;
            if h <= 0 || last % h != 0 {
                return Err(RtError::new(
                    "mdl::run::shape",
                    format!("split_heads: {last} features do not split into {h} heads"),
                ));
            }
            let mut shape = x.shape().to_vec();
            shape.pop();
            shape.extend([h as usize, (last / h) as usize]);
            t(it.reshape(&x, shape)?)
        }
        Builtin::MergeHeads => {
            let x = a.tensor(0)?;
            if x.rank() < 2 {
                return Err(RtError::new(
                    "mdl::run::shape",
                    format!("merge_heads needs [.., heads, dim], got {:?}", x.shape()),
                ));
            }
            let mut shape = x.shape().to_vec();
            let d = shape.pop().unwrap_or(1);
            let h = shape.pop().unwrap_or(1);
            shape.push(h * d);
            t(it.reshape(&x, shape)?)
        }
        Builtin::IndexSelect => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x, 0)?;
            let idx = to_tensor(it, a.get(2).unwrap_or(&Value::None), Some(DType::I32))?;
            t(it.op(Op::IndexSelect { dim }, &[&x, &idx])?)
        }
        Builtin::Where => t(it.op(Op::Where, &[&a.tensor(0)?, &a.tensor(1)?, &a.tensor(2)?])?),
        Builtin::Cast => {
            let name = a.str(1)?;
            let Some(dtype) = DType::parse(&name) else {
                return Err(
                    RtError::new("mdl::run::type", format!("unknown dtype `{name}`"))
                        .help("dtypes: f32, f16, bf16, i32"),
                );
            };
            t(it.op(Op::Cast { dtype }, &[&a.tensor(0)?])?)
        }
        Builtin::Arange => {
            let (start, end) = match a.get(1) {
                Some(_) => (a.float(0, 0.0)?, a.float(1, 0.0)?),
                None => (0.0, a.float(0, 0.0)?),
            };
            let all_int = [a.get(0), a.get(1), a.get(2)]
                .iter()
                .all(|v| !matches!(v, Some(Value::Float(_))));
            let dtype = if all_int { DType::I32 } else { DType::F32 };
            t(it.op(
                Op::Arange {
                    start,
                    end,
                    step: a.float(2, 1.0)?,
                    dtype,
                },
                &[],
            )?)
        }
        Builtin::Zeros | Builtin::Ones | Builtin::Full => {
            let shape = dims(&a.ints(0)?)?;
            let value = match b {
                Builtin::Zeros => 0.0,
                Builtin::Ones => 1.0,
                _ => a.float(1, 0.0)?,
            };
            t(it.op(
                Op::Full {
                    shape,
                    value,
                    dtype: DType::F32,
                },
                &[],
            )?)
        }
        Builtin::Tensor => {
            let dtype = match a.get(1) {
                Some(_) => Some(
                    DType::parse(&a.str(1)?)
                        .ok_or_else(|| RtError::new("mdl::run::type", "unknown dtype"))?,
                ),
                None => None,
            };
            t(to_tensor(it, a.get(0).unwrap_or(&Value::None), dtype)?)
        }
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
            let d = a.dim(1, &x, 0)?;
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
                Some(_) => (a.int(0, 0)?, a.int(1, 0)?),
                None => (0, a.int(0, 0)?),
            };
            let step = a.int(2, 1)?;
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
                    let p = a.float(0, 0.0)?;
                    let q = a.float(1, 0.0)?;
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
        Builtin::Layer => match a.get(0) {
            Some(Value::Cache(c)) => {
                let i = a.int(1, 0)?;
                let i = usize::try_from(i)
                    .map_err(|_| RtError::new("mdl::run::cache", "layer index must be >= 0"))?;
                Ok(Value::LayerCache(c.clone(), i))
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
        _ => {
            let Some((u, f)) = unary_of(b) else {
                return Err(RtError::msg(format!(
                    "builtin `{}` has no implementation",
                    b.name()
                )));
            };
            match a.get(0) {
                Some(Value::Int(i)) => Ok(Value::Float(f(*i as f64))),
                Some(Value::Float(x)) => Ok(Value::Float(f(*x))),
                Some(Value::Tensor(x)) => t(it.op(Op::Unary(u), &[x])?),
                Some(v) => Err(type_err(b, "x", "a number or tensor", v)),
                None => unreachable!("required"),
            }
        }
    }
}

/// A tensor's values as nested lists (ints for i32, floats otherwise); a
/// 0-d tensor gives its number.
fn to_list(x: &Tensor) -> RtResult<Value> {
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

fn to_tensor_like(it: &mut Interp, v: &Value, like: &Tensor) -> RtResult<Tensor> {
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
