//! The op vocabulary: every native operation a script can reach, as data.
//! Executors (eager backends, graph capture) receive `Op` values, so adding an
//! op is one variant here plus one arm per backend; `Op::ALL_NAMES` lets tests
//! check that no backend misses a variant.

use crate::dtype::DType;

pub use crate::infer::TensorMeta;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Recip,
    Abs,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Silu,
    /// Exact GELU (erf form), as `nn.GELU()` / `gelu` in transformers.
    Gelu,
    /// GELU with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
}

/// One native op with its attributes. Tensor inputs are passed separately, in
/// the order documented on each variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `x [.., k]`, `w [n, k]` (any float dtype), optional `bias [n]` -> `[.., n]`.
    Linear,
    /// `a [.., m, k]`, `b [.., k, n]` -> `[.., m, n]`; `b` may be 2-D and is then shared.
    Matmul,
    /// `w [v, d]`, `ids i32 [..]` -> `[.., d]`.
    Embedding,
    /// `x [.., d]`, `w [d]` -> `x / rms(x) * w`.
    RmsNorm {
        eps: f32,
    },
    /// `x [.., d]`, `w [d]`, `b [d]` -> layer normalisation over the last dim.
    LayerNorm {
        eps: f32,
    },
    /// `x [s, h, d]`, `cos [s, d/2]`, `sin [s, d/2]` -> rotary embedding in the
    /// "rotate half" layout (first half of `d` pairs with the second half).
    ApplyRope,
    /// `q [sq, hq, d]`, `k [sk, hk, d]`, `v [sk, hk, dv]` -> `[sq, hq, dv]`.
    /// `hq` must be a multiple of `hk` (grouped-query attention). With `causal`,
    /// query `i` sees keys `0 ..= sk - sq + i` (the queries are the last `sq`
    /// positions); with `window` > 0 only the last `window` of those (a
    /// sliding-window layer: keys `p - window < j <= p` for the query at
    /// position `p`).
    Sdpa {
        causal: bool,
        scale: f32,
        window: usize,
    },
    /// Attention over a KV cache held outside the graph, as an NPU graph
    /// sees it: `q [sq, hq, d]`, the new rows `k [s, hk, d]`, `v [s, hk, dv]`,
    /// the cache `past_k [c, hk, d]`, `past_v [c, hk, dv]` (capacity `c`)
    /// and `past_len` (i32 `[1]`). The keys are `past_k[..past_len]` then
    /// `k` (likewise the values); otherwise exactly `Sdpa`. Its decomposition
    /// (slice, concat, sdpa) is the reference twin.
    CachedSdpa {
        causal: bool,
        scale: f32,
        window: usize,
    },
    /// `act(gate) * up` over two tensors of one shape (made by graph fusion
    /// from `unary` then `binary(Mul)`).
    GatedAct {
        act: UnaryOp,
    },
    /// `x`, `y` (one shape `[.., d]`), `w [d]` -> `[2, ..]`: the residual
    /// sum `x + y` stacked on `rms_norm(x + y, w)` (made by graph fusion).
    AddRmsNorm {
        eps: f32,
    },
    /// Linears reading one input, merged by graph fusion (q/k/v, gate/up):
    /// `x [.., k]`; with `norm_eps`, an RMSNorm weight `g [k]` applied to
    /// `x` first (the norm and the activation quantization fused: the
    /// normed rows never reach memory); then `parts` weights `w_i [n_i, k]`
    /// (no biases) -> 1-D: the results `[.., n_i]` laid back to back, which
    /// readers take as views (a dim-0 slice, then a reshape). Its
    /// decomposition (rms_norm, one linear per part, flatten, concat) is the
    /// reference twin.
    MergedLinear {
        parts: usize,
        norm_eps: Option<f32>,
    },
    Unary(UnaryOp),
    /// Broadcasting (numpy rules). Two i32 inputs give i32; otherwise f32.
    /// Comparisons give 1.0/0.0 (or 1/0).
    Binary(BinaryOp),
    /// Softmax over dimension `dim` of an f32 tensor.
    Softmax {
        dim: usize,
    },
    /// Reduction over `dim`.
    Reduce {
        op: ReduceOp,
        dim: usize,
        keepdim: bool,
    },
    /// Index of the largest value along `dim` (first on ties), as i32.
    Argmax {
        dim: usize,
    },
    Reshape {
        shape: Vec<usize>,
    },
    Permute {
        perm: Vec<usize>,
    },
    /// Joins the inputs along `dim`.
    Concat {
        dim: usize,
    },
    /// `start..end` by `step` along `dim` (`step >= 1`).
    Slice {
        dim: usize,
        start: usize,
        end: usize,
        step: usize,
    },
    /// `x`, `idx i32 [n]` -> rows of `x` picked along `dim`.
    IndexSelect {
        dim: usize,
    },
    /// `x [.., n]` (f32) -> i32 `[.., k]`: the indexes of the `k` largest
    /// values of each row of the last dim, largest first, the lower index
    /// first among equal values (NaN counts as the largest, as in torch).
    /// `1 <= k <= n`.
    TopK {
        k: usize,
    },
    /// `x`, `idx` (i32, same rank, same sizes as `x` outside `dim`) -> the
    /// shape of `idx`: `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along
    /// `dim` (torch.gather, take_along_dim). f32 or i32 like `x` (other
    /// floats give f32); an index outside `x` is an error.
    Gather {
        dim: usize,
    },
    /// Mixture-of-experts linear: `x` (f32 `[t, k]`, shared by every slot,
    /// or `[t, s, k]`, one row per slot), `ids` (i32 `[t, s]`: the expert of
    /// each token and slot), then the expert weights: one `[e, n, k]` or
    /// `e` tensors `[n, k]` (any dtype `Linear` takes) -> f32 `[t, s, n]`,
    /// `out[i, j] = W[ids[i, j]] @ x_row(i, j)`. An id outside `0..e` is
    /// an error. Its per-(token, slot) loop of `Linear`s is the reference
    /// twin.
    MoeLinear,
    /// Depthwise causal convolution over time with a carried state (Gated
    /// DeltaNet's conv1d): `x [t, c]` (f32), `w [c, kernel]` (f32, f16 or
    /// bf16), `state [kernel - 1, c]` (f32: the last inputs of the previous
    /// call, zeros before the first) -> f32 `[t + kernel - 1, c]`, packed:
    /// rows `0..t` are `y[i, ch] = sum_j w[ch, j] * xx[i + j, ch]` over
    /// `xx = [state; x]` (no activation), rows `t..` the new state (the
    /// last `kernel - 1` rows of `xx`). Readers take both as dim-0 slices.
    /// The sum over the concatenation is the reference twin.
    CausalConv1d,
    /// The gated delta rule (Gated DeltaNet's recurrence): `q`, `k`
    /// `[t, hk, dk]`, `v [t, hv, dv]`, `g` (log decay, <= 0) and `beta`
    /// `[t, hv]`, the initial state `[hv, dk, dv]` (all f32; `hv` a
    /// multiple of `hk`, value head `h` reading key head `h / (hv / hk)`).
    /// Per value head and token: `S = S * exp(g)`, `S += k ⊗ beta * (v -
    /// k^T S)`, `o = q^T S`. q and k are used as given (a script
    /// l2-normalizes and scales them). -> f32 1-D `[t * hv * dv + hv * dk *
    /// dv]`, packed: the outputs `[t, hv, dv]`, then the final state
    /// `[hv, dk, dv]` (a dim-0 slice each, then a reshape). The token by
    /// token recurrence is the reference twin; prefill runs the chunked form.
    GatedDeltaRule,
    /// `cond`, `a`, `b` (broadcast) -> `a` where `cond != 0`, else `b`.
    Where,
    Cast {
        dtype: DType,
    },
    /// No inputs: `start, start+step, ...` below `end`.
    Arange {
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
    },
    /// No inputs: a tensor of `shape` filled with `value`.
    Full {
        shape: Vec<usize>,
        value: f64,
        dtype: DType,
    },
}

impl Op {
    /// Every variant's name, in declaration order. A backend conformance test
    /// walks this list; extend it with every new variant.
    pub const ALL_NAMES: &'static [&'static str] = &[
        "linear",
        "matmul",
        "embedding",
        "rms_norm",
        "layer_norm",
        "apply_rope",
        "sdpa",
        "cached_sdpa",
        "gated_act",
        "add_rms_norm",
        "merged_linear",
        "unary",
        "binary",
        "softmax",
        "reduce",
        "argmax",
        "reshape",
        "permute",
        "concat",
        "slice",
        "index_select",
        "topk",
        "gather",
        "moe_linear",
        "causal_conv1d",
        "gated_delta_rule",
        "where",
        "cast",
        "arange",
        "full",
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Op::Linear => "linear",
            Op::Matmul => "matmul",
            Op::Embedding => "embedding",
            Op::RmsNorm { .. } => "rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::ApplyRope => "apply_rope",
            Op::Sdpa { .. } => "sdpa",
            Op::CachedSdpa { .. } => "cached_sdpa",
            Op::GatedAct { .. } => "gated_act",
            Op::AddRmsNorm { .. } => "add_rms_norm",
            Op::MergedLinear { .. } => "merged_linear",
            Op::Unary(_) => "unary",
            Op::Binary(_) => "binary",
            Op::Softmax { .. } => "softmax",
            Op::Reduce { .. } => "reduce",
            Op::Argmax { .. } => "argmax",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::IndexSelect { .. } => "index_select",
            Op::TopK { .. } => "topk",
            Op::Gather { .. } => "gather",
            Op::MoeLinear => "moe_linear",
            Op::CausalConv1d => "causal_conv1d",
            Op::GatedDeltaRule => "gated_delta_rule",
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::Arange { .. } => "arange",
            Op::Full { .. } => "full",
        }
    }
}
