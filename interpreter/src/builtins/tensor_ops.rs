//! The tensor builtins: each becomes ops through the executor.

use mllm_backends::{DType, Op, ReduceOp, Tensor, UnaryOp};
use mllm_dsl::builtins::Builtin;

use super::args::{dims, norm_dim, type_err, Args};
use super::convert::to_tensor;
use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::value::Value;

/// The unary map a builtin names: the op table's map of the same name
/// (`UnaryOp::name`), so a new map needs no code here; its f64 twin
/// computes plain numbers.
fn unary_of(b: Builtin) -> Option<UnaryOp> {
    UnaryOp::from_name(b.name())
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

/// The error code of a builtin the interpreter has no meaning for (a test
/// walks every builtin of the language and expects none).
pub(super) const UNIMPLEMENTED: &str = "mdl::run::unimplemented";

pub(super) fn call(it: &mut Interp, b: Builtin, a: &Args) -> RtResult<Value> {
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
                eps: a.float(2)? as f32,
            },
            &[&a.tensor(0)?, &a.tensor(1)?],
        )?),
        Builtin::LayerNorm => t(it.op(
            Op::LayerNorm {
                eps: a.float(3)? as f32,
            },
            &[&a.tensor(0)?, &a.tensor(1)?, &a.tensor(2)?],
        )?),
        Builtin::ApplyRope => t(it.op(
            Op::ApplyRope,
            &[&a.tensor(0)?, &a.tensor(1)?, &a.tensor(2)?],
        )?),
        Builtin::Sdpa if matches!(a.get(1), Some(Value::Ragged(_))) => {
            // A batched decode step: query row `b` attends to sequence
            // `b`'s keys and values, exactly as its own step would.
            let (Some(Value::Ragged(keys)), Some(Value::Ragged(values))) = (a.get(1), a.get(2))
            else {
                return Err(RtError::new(
                    "mdl::run::sdpa",
                    "keys are a batch's (ragged) but values are not",
                ));
            };
            let q = a.tensor(0)?;
            let d = *q.shape().last().unwrap_or(&1) as f64;
            let scale = match a.get(4) {
                Some(_) => a.float(4)? as f32,
                None => (1.0 / d.sqrt()) as f32,
            };
            let causal = a.bool(3)?;
            let window = sdpa_window(a)?;
            if q.shape().first() != Some(&keys.len()) || values.len() != keys.len() {
                return Err(RtError::new(
                    "mdl::run::sdpa",
                    format!(
                        "a batch of {} sequences needs one query row each, got {:?}",
                        keys.len(),
                        q.shape()
                    ),
                ));
            }
            let mut rows = vec![];
            for (r, (k, v)) in keys.iter().zip(values.iter()).enumerate() {
                let qr = q
                    .narrow0(r, r + 1)
                    .map_err(|e| RtError::new("mdl::run::sdpa", e.to_string()))?;
                rows.push(it.op(
                    Op::Sdpa {
                        causal,
                        scale,
                        window,
                    },
                    &[&qr, k, v],
                )?);
            }
            let refs: Vec<&Tensor> = rows.iter().collect();
            t(it.op(Op::Concat { dim: 0 }, &refs)?)
        }
        Builtin::Sdpa => {
            let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            let d = *q.shape().last().unwrap_or(&1) as f64;
            let scale = match a.get(4) {
                Some(_) => a.float(4)? as f32,
                None => (1.0 / d.sqrt()) as f32,
            };
            t(it.op(
                Op::Sdpa {
                    causal: a.bool(3)?,
                    scale,
                    window: sdpa_window(a)?,
                },
                &[&q, &k, &v],
            )?)
        }
        Builtin::Softmax => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x)?;
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
            let dim = a.dim(1, &x)?;
            t(it.op(Op::Argmax { dim }, &[&x])?)
        }
        Builtin::Sum | Builtin::Mean | Builtin::Amax => {
            let x = a.tensor(0)?;
            let dim = a.dim(1, &x)?;
            let op = match b {
                Builtin::Sum => ReduceOp::Sum,
                Builtin::Mean => ReduceOp::Mean,
                _ => ReduceOp::Max,
            };
            t(it.op(
                Op::Reduce {
                    op,
                    dim,
                    keepdim: a.bool(2)?,
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
            let (d0, d1) = (a.dim(1, &x)?, a.dim(2, &x)?);
            let mut perm: Vec<usize> = (0..x.rank()).collect();
            perm.swap(d0, d1);
            t(it.op(Op::Permute { perm }, &[&x])?)
        }
        Builtin::Unsqueeze => {
            let x = a.tensor(0)?;
            let d = a.int(1)?;
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
            let d = a.dim(1, &x)?;
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
            let dim = a.dim(1, first)?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            t(it.op(Op::Concat { dim }, &refs)?)
        }
        Builtin::SplitHeads => {
            let x = a.tensor(0)?;
            let h = a.int(1)?;
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
            let dim = a.dim(1, &x)?;
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
                Some(_) => (a.float(0)?, a.float(1)?),
                None => (0.0, a.float(0)?),
            };
            let all_int = [a.get(0), a.get(1), a.get(2)]
                .iter()
                .all(|v| !matches!(v, Some(Value::Float(_))));
            let dtype = if all_int { DType::I32 } else { DType::F32 };
            t(it.op(
                Op::Arange {
                    start,
                    end,
                    step: a.float(2)?,
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
                _ => a.float(1)?,
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
        _ => {
            let Some(u) = unary_of(b) else {
                return Err(RtError::new(
                    UNIMPLEMENTED,
                    format!("builtin `{}` has no implementation", b.name()),
                ));
            };
            match a.get(0) {
                Some(Value::Int(i)) => Ok(Value::Float(u.reference(*i as f64))),
                Some(Value::Float(x)) => Ok(Value::Float(u.reference(*x))),
                Some(Value::Tensor(x)) => t(it.op(Op::Unary(u), &[x])?),
                Some(v) => Err(type_err(b, "x", "a number or tensor", v)),
                None => unreachable!("required"),
            }
        }
    }
}

/// `sdpa`'s `window` argument (parameter 5): 0 for none, else the number
/// of keys each query sees.
fn sdpa_window(a: &Args) -> RtResult<usize> {
    let w = a.int(5)?;
    usize::try_from(w).map_err(|_| {
        RtError::new(
            "mdl::run::sdpa",
            format!("sdpa's window must be 0 (none) or a number of keys, got {w}"),
        )
    })
}
