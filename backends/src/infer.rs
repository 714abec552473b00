//! Shape and dtype rules of every op, in one place: `Op::infer` takes the
//! inputs' metadata and gives the output's, or the error a backend would
//! raise. Every backend calls it before its kernels (so kernels may rely on
//! the checks), and graph capture calls it to type values without data.

use crate::dtype::DType;
use crate::error::{dtype_err, invalid, shape_err, Result};
use crate::op::Op;
use crate::quant::QuantType;
use crate::tensor::{numel, Tensor};

pub(crate) mod broadcast;
mod linear_attn;
mod moe;
mod quant_inputs;

use broadcast::broadcast_shape;
use quant_inputs::check_quant_inputs;

/// What is known of a tensor without its data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorMeta {
    pub fn new(shape: Vec<usize>, dtype: DType) -> TensorMeta {
        TensorMeta { shape, dtype }
    }

    pub fn of(t: &Tensor) -> TensorMeta {
        TensorMeta {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of storage (whole blocks for a quantized dtype).
    pub fn bytes(&self) -> usize {
        self.dtype.storage_bytes(&self.shape).unwrap_or(0)
    }

    fn last(&self) -> usize {
        self.shape.last().copied().unwrap_or(0)
    }
}

impl std::fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// The op's arity (`Op::arity`, from its definition) against `inputs`.
fn check_arity(op: &Op, inputs: &[TensorMeta]) -> Result<()> {
    let (lo, hi) = op.arity();
    if inputs.len() < lo || inputs.len() > hi {
        let want = match (lo, hi) {
            (lo, hi) if lo == hi => format!("{lo}"),
            (lo, usize::MAX) => format!("at least {lo}"),
            (lo, hi) => format!("{lo} to {hi}"),
        };
        return invalid(
            op.name(),
            format!("takes {want} tensors, got {}", inputs.len()),
        );
    }
    Ok(())
}

fn check_dim(op: &'static str, t: &TensorMeta, dim: usize) -> Result<()> {
    if dim >= t.rank() {
        return shape_err(
            op,
            format!("dimension {dim} is out of range for shape {:?}", t.shape),
        );
    }
    Ok(())
}

fn f32_input(op: &'static str, t: &TensorMeta) -> Result<()> {
    if t.dtype != DType::F32 {
        return dtype_err(op, format!("expected an f32 activation, found {}", t.dtype));
    }
    Ok(())
}

fn meta(shape: Vec<usize>, dtype: DType) -> Result<TensorMeta> {
    numel(&shape)?;
    Ok(TensorMeta { shape, dtype })
}

fn sdpa_shapes(q: &TensorMeta, k: &TensorMeta, v: &TensorMeta) -> Result<()> {
    if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
        return shape_err("sdpa", "q, k and v must be [seq, heads, dim]");
    }
    let (hq, d) = (q.shape[1], q.shape[2]);
    let (sk, hk) = (k.shape[0], k.shape[1]);
    if k.shape[2] != d || v.shape[0] != sk || v.shape[1] != hk || hk == 0 || !hq.is_multiple_of(hk)
    {
        return shape_err(
            "sdpa",
            format!(
                "q {:?}, k {:?}, v {:?} do not fit (query heads must be a multiple of key heads)",
                q.shape, k.shape, v.shape
            ),
        );
    }
    if q.dtype != DType::F32 {
        return dtype_err("sdpa", format!("q must be f32, found {}", q.dtype));
    }
    // Keys and values may be read straight from an f16 or q8_0 KV cache.
    for (name, t) in [("k", k), ("v", v)] {
        let cache_dtype =
            matches!(t.dtype, DType::F32 | DType::F16) || t.dtype == DType::Quant(QuantType::Q8_0);
        if !cache_dtype {
            return dtype_err(
                "sdpa",
                format!("{name} must be f32, f16 or q8_0, found {}", t.dtype),
            );
        }
    }
    Ok(())
}

impl Op {
    /// The output's shape and dtype for inputs of `inputs`' shapes and
    /// dtypes, or the error the op raises on them.
    pub fn infer(&self, inputs: &[TensorMeta]) -> Result<TensorMeta> {
        check_arity(self, inputs)?;
        check_quant_inputs(self, inputs)?;
        let f32_out = |shape: Vec<usize>| meta(shape, DType::F32);
        match self {
            Op::Linear => {
                let (x, w) = (&inputs[0], &inputs[1]);
                f32_input("linear", x)?;
                if w.rank() != 2 || x.rank() == 0 || x.last() != w.shape[1] {
                    return shape_err(
                        "linear",
                        format!(
                            "input {:?} does not match weight {:?} ([out, in])",
                            x.shape, w.shape
                        ),
                    );
                }
                let n = w.shape[0];
                if let Some(b) = inputs.get(2) {
                    if b.shape != [n] || !b.dtype.is_float() {
                        return shape_err("linear", format!("bias {} for {n} outputs", b));
                    }
                }
                if !w.dtype.is_float() && !w.dtype.is_quantized() {
                    return dtype_err("linear", format!("weight must be float, found {}", w.dtype));
                }
                let mut shape = x.shape.clone();
                *shape.last_mut().unwrap_or(&mut 0) = n;
                f32_out(shape)
            }
            Op::Matmul => {
                let (a, b) = (&inputs[0], &inputs[1]);
                if a.rank() < 2 || b.rank() < 2 {
                    return shape_err(
                        "matmul",
                        format!("needs matrices, got {:?} @ {:?}", a.shape, b.shape),
                    );
                }
                let (m, k) = (a.shape[a.rank() - 2], a.shape[a.rank() - 1]);
                let (k2, n) = (b.shape[b.rank() - 2], b.shape[b.rank() - 1]);
                let batch_a = &a.shape[..a.rank() - 2];
                let batch_b = &b.shape[..b.rank() - 2];
                let b_batched = !batch_b.iter().all(|&d| d == 1);
                if k != k2 || (b_batched && batch_a != batch_b) {
                    return shape_err(
                        "matmul",
                        format!("cannot multiply {:?} @ {:?}", a.shape, b.shape),
                    );
                }
                let mut shape = batch_a.to_vec();
                shape.extend([m, n]);
                f32_out(shape)
            }
            Op::Embedding => {
                let (w, ids) = (&inputs[0], &inputs[1]);
                if w.rank() != 2 {
                    return shape_err(
                        "embedding",
                        format!("table must be [vocab, dim], got {:?}", w.shape),
                    );
                }
                if ids.dtype != DType::I32 {
                    return dtype_err("embedding", format!("ids must be i32, found {}", ids.dtype));
                }
                if w.dtype == DType::I32 {
                    return dtype_err("embedding", "the table must be float");
                }
                let mut shape = ids.shape.clone();
                shape.push(w.shape[1]);
                f32_out(shape)
            }
            Op::RmsNorm { .. } => {
                let (x, w) = (&inputs[0], &inputs[1]);
                f32_input("rms_norm", x)?;
                let d = x.last();
                if w.shape != [d] || d == 0 || !w.dtype.is_float() {
                    return shape_err(
                        "rms_norm",
                        format!("weight {w} does not match input {:?}", x.shape),
                    );
                }
                f32_out(x.shape.clone())
            }
            Op::LayerNorm { .. } => {
                let (x, w, b) = (&inputs[0], &inputs[1], &inputs[2]);
                f32_input("layer_norm", x)?;
                let d = x.last();
                if w.shape != [d]
                    || b.shape != [d]
                    || d == 0
                    || !w.dtype.is_float()
                    || !b.dtype.is_float()
                {
                    return shape_err(
                        "layer_norm",
                        format!("weight {w} / bias {b} do not match input {:?}", x.shape),
                    );
                }
                f32_out(x.shape.clone())
            }
            Op::ApplyRope => {
                let (x, c, s) = (&inputs[0], &inputs[1], &inputs[2]);
                if x.rank() != 3 || x.shape[2] % 2 != 0 {
                    return shape_err(
                        "apply_rope",
                        format!("input must be [seq, heads, even dim], got {:?}", x.shape),
                    );
                }
                for t in [x, c, s] {
                    f32_input("apply_rope", t)?;
                }
                let (sq, d) = (x.shape[0], x.shape[2]);
                if c.shape != [sq, d / 2] || s.shape != [sq, d / 2] {
                    return shape_err(
                        "apply_rope",
                        format!(
                            "cos {:?} / sin {:?} must be [{sq}, {}]",
                            c.shape,
                            s.shape,
                            d / 2
                        ),
                    );
                }
                f32_out(x.shape.clone())
            }
            Op::Sdpa { causal, .. } => {
                let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
                sdpa_shapes(q, k, v)?;
                if *causal && q.shape[0] > k.shape[0] {
                    return shape_err(
                        "sdpa",
                        format!("{} queries but only {} keys", q.shape[0], k.shape[0]),
                    );
                }
                f32_out(vec![q.shape[0], q.shape[1], v.shape[2]])
            }
            Op::CachedSdpa { .. } => {
                let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
                let (pk, pv, len) = (&inputs[3], &inputs[4], &inputs[5]);
                sdpa_shapes(q, k, v)?;
                sdpa_shapes(q, pk, pv)?;
                if pk.shape[1..] != k.shape[1..] || pv.shape[1..] != v.shape[1..] {
                    return shape_err(
                        "cached_sdpa",
                        format!(
                            "past keys {:?} / values {:?} do not match the new rows {:?} / {:?}",
                            pk.shape, pv.shape, k.shape, v.shape
                        ),
                    );
                }
                if len.dtype != DType::I32 || len.numel() != 1 {
                    return dtype_err(
                        "cached_sdpa",
                        format!("the past length must be one i32, found {len}"),
                    );
                }
                if q.shape[0] > k.shape[0] {
                    return shape_err(
                        "cached_sdpa",
                        format!("{} queries but {} new keys", q.shape[0], k.shape[0]),
                    );
                }
                f32_out(vec![q.shape[0], q.shape[1], v.shape[2]])
            }
            Op::GatedAct { .. } => {
                let (g, u) = (&inputs[0], &inputs[1]);
                f32_input("gated_act", g)?;
                f32_input("gated_act", u)?;
                if g.shape != u.shape {
                    return shape_err(
                        "gated_act",
                        format!("gate {:?} and up {:?} differ", g.shape, u.shape),
                    );
                }
                f32_out(g.shape.clone())
            }
            Op::AddRmsNorm { .. } => {
                let (x, y, w) = (&inputs[0], &inputs[1], &inputs[2]);
                f32_input("add_rms_norm", x)?;
                f32_input("add_rms_norm", y)?;
                let d = x.last();
                if x.shape != y.shape || w.shape != [d] || d == 0 || !w.dtype.is_float() {
                    return shape_err(
                        "add_rms_norm",
                        format!("{:?} + {:?} with weight {w} do not fit", x.shape, y.shape),
                    );
                }
                let mut shape = vec![2];
                shape.extend(&x.shape);
                f32_out(shape)
            }
            Op::MergedLinear { parts, norm_eps } => {
                let first = 1 + usize::from(norm_eps.is_some());
                let x = &inputs[0];
                f32_input("merged_linear", x)?;
                let k = x.last();
                if *parts == 0 || x.rank() == 0 || k == 0 {
                    return shape_err(
                        "merged_linear",
                        format!("{parts} weights over an input {:?}", x.shape),
                    );
                }
                if norm_eps.is_some() && (inputs[1].shape != [k] || !inputs[1].dtype.is_float()) {
                    return shape_err(
                        "merged_linear",
                        format!(
                            "norm weight {} does not match input {:?}",
                            inputs[1], x.shape
                        ),
                    );
                }
                let rows = x.numel() / k;
                let mut total = 0usize;
                for w in &inputs[first..] {
                    if w.rank() != 2 || w.shape[1] != k {
                        return shape_err(
                            "merged_linear",
                            format!("weight {:?} does not take input {:?}", w.shape, x.shape),
                        );
                    }
                    if !w.dtype.is_float() && !w.dtype.is_quantized() {
                        return dtype_err(
                            "merged_linear",
                            format!("weights must be float, found {}", w.dtype),
                        );
                    }
                    total += rows * w.shape[0];
                }
                f32_out(vec![total])
            }
            Op::Unary(_) => f32_out(inputs[0].shape.clone()),
            Op::Binary(_) => {
                let (x, y) = (&inputs[0], &inputs[1]);
                let Some(shape) = broadcast_shape(&x.shape, &y.shape) else {
                    return shape_err(
                        "binary",
                        format!("shapes {:?} and {:?} do not broadcast", x.shape, y.shape),
                    );
                };
                let both_int = x.dtype == DType::I32 && y.dtype == DType::I32;
                meta(shape, if both_int { DType::I32 } else { DType::F32 })
            }
            Op::Softmax { dim } => {
                check_dim("softmax", &inputs[0], *dim)?;
                f32_input("softmax", &inputs[0])?;
                f32_out(inputs[0].shape.clone())
            }
            Op::Reduce { dim, keepdim, .. } => {
                let x = &inputs[0];
                check_dim("reduce", x, *dim)?;
                let mut shape = x.shape.clone();
                if *keepdim {
                    shape[*dim] = 1
                } else {
                    shape.remove(*dim);
                }
                f32_out(shape)
            }
            Op::Argmax { dim } => {
                let x = &inputs[0];
                check_dim("argmax", x, *dim)?;
                if x.shape[*dim] == 0 {
                    return shape_err("argmax", "argmax of an empty dimension");
                }
                let mut shape = x.shape.clone();
                shape.remove(*dim);
                meta(shape, DType::I32)
            }
            Op::Reshape { shape } => {
                let x = &inputs[0];
                if numel(shape)? != x.numel() {
                    return shape_err(
                        "reshape",
                        format!("cannot reshape {:?} into {shape:?}", x.shape),
                    );
                }
                let bs = x.dtype.block_size();
                if bs > 1 && shape.last().is_none_or(|c| !c.is_multiple_of(bs)) {
                    return shape_err(
                        "reshape",
                        format!(
                            "{} rows must stay whole {bs}-value blocks, not {shape:?}",
                            x.dtype
                        ),
                    );
                }
                meta(shape.clone(), x.dtype)
            }
            Op::Permute { perm } => {
                let x = &inputs[0];
                let mut seen = vec![false; x.rank()];
                if perm.len() != x.rank()
                    || perm
                        .iter()
                        .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
                {
                    return shape_err(
                        "permute",
                        format!(
                            "{perm:?} is not a permutation of the {} dimensions of {:?}",
                            x.rank(),
                            x.shape
                        ),
                    );
                }
                let shape = perm.iter().map(|&p| x.shape[p]).collect();
                meta(shape, keep_int(x.dtype))
            }
            Op::Concat { dim } => {
                let Some(first) = inputs.first() else {
                    return invalid("concat", "needs at least one tensor");
                };
                check_dim("concat", first, *dim)?;
                for t in inputs {
                    let same = t.rank() == first.rank()
                        && t.shape
                            .iter()
                            .zip(&first.shape)
                            .enumerate()
                            .all(|(i, (a, b))| i == *dim || a == b);
                    if !same {
                        return shape_err(
                            "concat",
                            format!(
                                "{:?} and {:?} differ outside dimension {dim}",
                                first.shape, t.shape
                            ),
                        );
                    }
                }
                let mut shape = first.shape.clone();
                shape[*dim] = inputs.iter().map(|t| t.shape[*dim]).sum();
                let all_int = inputs.iter().all(|t| t.dtype == DType::I32);
                meta(shape, if all_int { DType::I32 } else { DType::F32 })
            }
            Op::Slice {
                dim,
                start,
                end,
                step,
            } => {
                let x = &inputs[0];
                check_dim("slice", x, *dim)?;
                let n = x.shape[*dim];
                if *step == 0 || start > end || *end > n {
                    return shape_err(
                        "slice",
                        format!("{start}..{end} step {step} of a dimension of size {n}"),
                    );
                }
                let mut shape = x.shape.clone();
                shape[*dim] = (end - start).div_ceil(*step);
                // Whole rows of the outermost dimension stay views of any dtype.
                let dtype = if *dim == 0 && *step == 1 {
                    x.dtype
                } else {
                    keep_int(x.dtype)
                };
                meta(shape, dtype)
            }
            Op::IndexSelect { dim } => {
                let (x, idx) = (&inputs[0], &inputs[1]);
                check_dim("index_select", x, *dim)?;
                if idx.dtype != DType::I32 {
                    return dtype_err("index_select", "indexes must be i32");
                }
                let mut shape = x.shape.clone();
                shape[*dim] = idx.numel();
                meta(shape, keep_int(x.dtype))
            }
            Op::TopK { k } => moe::topk(&inputs[0], *k),
            Op::Gather { dim } => moe::gather(&inputs[0], &inputs[1], *dim),
            Op::MoeLinear => moe::moe_linear(inputs),
            Op::CausalConv1d => linear_attn::causal_conv1d(inputs),
            Op::GatedDeltaRule => linear_attn::gated_delta_rule(inputs),
            Op::Where => {
                let (c, a, b) = (&inputs[0], &inputs[1], &inputs[2]);
                let shape =
                    broadcast_shape(&c.shape, &a.shape).and_then(|s| broadcast_shape(&s, &b.shape));
                let Some(shape) = shape else {
                    return shape_err(
                        "where",
                        format!(
                            "{:?}, {:?}, {:?} do not broadcast",
                            c.shape, a.shape, b.shape
                        ),
                    );
                };
                f32_out(shape)
            }
            Op::Cast { dtype } => meta(inputs[0].shape.clone(), *dtype),
            Op::Arange {
                start,
                end,
                step,
                dtype,
            } => {
                if *step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
                    return invalid("arange", "step must be non-zero and bounds finite");
                }
                let n = ((end - start) / step).ceil().max(0.0);
                if n > crate::tensor::MAX_ELEMENTS as f64 {
                    return invalid("arange", format!("{n} values are too many"));
                }
                meta(vec![n as usize], *dtype)
            }
            Op::Full { shape, dtype, .. } => meta(shape.clone(), *dtype),
        }
    }
}

/// Layout ops keep i32 data as i32 and widen every float dtype to f32.
fn keep_int(d: DType) -> DType {
    if d == DType::I32 {
        DType::I32
    } else {
        DType::F32
    }
}
