//! The op vocabulary: every native operation a script can reach, as data.
//! Executors (eager backends, graph capture) receive `Op` values.
//!
//! Each op is defined once, in the `ops!` table below: its variant and
//! attributes, its name, how many tensors it takes (an expression of its
//! attributes where that varies), and its documentation (inputs, outputs,
//! semantics). The table derives the `Op` enum, `name()`, `ALL_NAMES` and
//! `arity()`; the element-wise families (`UnaryOp`, `BinaryOp`,
//! `ReduceOp`) are tables of their own in `elementwise.rs`, each unary map
//! with its f64 reference twin. The shape and dtype rule of every op is
//! `Op::infer` (`infer.rs`, one exhaustive match, depending on nothing in
//! a backend). What the compiler then asks of a new op:
//! - a CPU kernel (`cpu/compute.rs`' exhaustive dispatch) with its twin;
//! - an OpenCL kernel, or nothing: `supports` says no and the executor's
//!   fallback policy moves the op to the CPU, saying so;
//! - an ONNX lowering, or an explicit refusal (`graph/src/onnx/lower`);
//! - conformance cases (`conformance::missing_ops` fails without them;
//!   unary maps get theirs from the table);
//! - a DSL builtin where scripts call it (`dsl/src/builtins.rs`; a unary
//!   builtin named like its map needs no interpreter code, and a test fails
//!   for any builtin the interpreter does not implement).

mod elementwise;

#[cfg(feature = "opencl")] // the OpenCL kernels name their maps from it
pub(crate) use elementwise::unary_table;
pub use elementwise::{BinaryOp, ReduceOp, UnaryOp};

use crate::dtype::DType;

pub use crate::infer::TensorMeta;

/// An arity without an upper bound.
const MANY: usize = usize::MAX;

macro_rules! ops {
    ($(
        $(#[$doc:meta])*
        $v:ident $({ $($f:ident : $fty:ty),* $(,)? })? $(($t:ty))? = $name:literal,
        inputs($lo:expr, $hi:expr);
    )*) => {
        /// One native op with its attributes. Tensor inputs are passed
        /// separately, in the order documented on each variant.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op {
            $($(#[$doc])* $v $({ $($f: $fty),* })? $(($t))?,)*
        }

        impl Op {
            /// Every op's name, in table order: a backend conformance test
            /// walks this list.
            pub const ALL_NAMES: &'static [&'static str] = &[$($name),*];

            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$v { .. } => $name,)*
                }
            }

            /// The fewest and most tensors the op takes (`usize::MAX`: no
            /// upper bound).
            #[allow(unused_variables)]
            pub fn arity(&self) -> (usize, usize) {
                match self {
                    $(Op::$v { $($($f,)*)? .. } => ($lo, $hi),)*
                }
            }
        }
    };
}

ops! {
    /// `x [.., k]`, `w [n, k]` (any float dtype), optional `bias [n]` -> `[.., n]`.
    Linear = "linear", inputs(2, 3);
    /// `a [.., m, k]`, `b [.., k, n]` -> `[.., m, n]`; `b` may be 2-D and is then shared.
    Matmul = "matmul", inputs(2, 2);
    /// `w [v, d]`, `ids i32 [..]` -> `[.., d]`.
    Embedding = "embedding", inputs(2, 2);
    /// `x [.., d]`, `w [d]` -> `x / rms(x) * w`.
    RmsNorm {
        eps: f32,
    } = "rms_norm", inputs(2, 2);
    /// `x [.., d]`, `w [d]`, `b [d]` -> layer normalisation over the last dim.
    LayerNorm {
        eps: f32,
    } = "layer_norm", inputs(3, 3);
    /// `x [s, h, d]`, `cos [s, d/2]`, `sin [s, d/2]` -> rotary embedding in the
    /// "rotate half" layout (first half of `d` pairs with the second half).
    ApplyRope = "apply_rope", inputs(3, 3);
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
    } = "sdpa", inputs(3, 3);
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
    } = "cached_sdpa", inputs(6, 6);
    /// `act(gate) * up` over two tensors of one shape (made by graph fusion
    /// from `unary` then `binary(Mul)`).
    GatedAct {
        act: UnaryOp,
    } = "gated_act", inputs(2, 2);
    /// `x`, `y` (one shape `[.., d]`), `w [d]` -> `[2, ..]`: the residual
    /// sum `x + y` stacked on `rms_norm(x + y, w)` (made by graph fusion).
    AddRmsNorm {
        eps: f32,
    } = "add_rms_norm", inputs(3, 3);
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
    } = "merged_linear", inputs(1 + usize::from(norm_eps.is_some()) + *parts, 1 + usize::from(norm_eps.is_some()) + *parts);
    Unary(UnaryOp) = "unary", inputs(1, 1);
    /// Broadcasting (numpy rules). Two i32 inputs give i32; otherwise f32.
    /// Comparisons give 1.0/0.0 (or 1/0).
    Binary(BinaryOp) = "binary", inputs(2, 2);
    /// Softmax over dimension `dim` of an f32 tensor.
    Softmax {
        dim: usize,
    } = "softmax", inputs(1, 1);
    /// Reduction over `dim`.
    Reduce {
        op: ReduceOp,
        dim: usize,
        keepdim: bool,
    } = "reduce", inputs(1, 1);
    /// Index of the largest value along `dim` (first on ties), as i32.
    Argmax {
        dim: usize,
    } = "argmax", inputs(1, 1);
    Reshape {
        shape: Vec<usize>,
    } = "reshape", inputs(1, 1);
    Permute {
        perm: Vec<usize>,
    } = "permute", inputs(1, 1);
    /// Joins the inputs along `dim`.
    Concat {
        dim: usize,
    } = "concat", inputs(1, MANY);
    /// `start..end` by `step` along `dim` (`step >= 1`).
    Slice {
        dim: usize,
        start: usize,
        end: usize,
        step: usize,
    } = "slice", inputs(1, 1);
    /// `x`, `idx i32 [n]` -> rows of `x` picked along `dim`.
    IndexSelect {
        dim: usize,
    } = "index_select", inputs(2, 2);
    /// `x [.., n]` (f32) -> i32 `[.., k]`: the indexes of the `k` largest
    /// values of each row of the last dim, largest first, the lower index
    /// first among equal values (NaN counts as the largest, as in torch).
    /// `1 <= k <= n`.
    TopK {
        k: usize,
    } = "topk", inputs(1, 1);
    /// `x`, `idx` (i32, same rank, same sizes as `x` outside `dim`) -> the
    /// shape of `idx`: `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along
    /// `dim` (torch.gather, take_along_dim). f32 or i32 like `x` (other
    /// floats give f32); an index outside `x` is an error.
    Gather {
        dim: usize,
    } = "gather", inputs(2, 2);
    /// Mixture-of-experts linear: `x` (f32 `[t, k]`, shared by every slot,
    /// or `[t, s, k]`, one row per slot), `ids` (i32 `[t, s]`: the expert of
    /// each token and slot), then the expert weights: one `[e, n, k]` or
    /// `e` tensors `[n, k]` (any dtype `Linear` takes) -> f32 `[t, s, n]`,
    /// `out[i, j] = W[ids[i, j]] @ x_row(i, j)`. An id outside `0..e` is
    /// an error. Its per-(token, slot) loop of `Linear`s is the reference
    /// twin.
    MoeLinear = "moe_linear", inputs(3, MANY);
    /// Depthwise causal convolution over time with a carried state (Gated
    /// DeltaNet's conv1d): `x [t, c]` (f32), `w [c, kernel]` (f32, f16 or
    /// bf16), `state [kernel - 1, c]` (f32: the last inputs of the previous
    /// call, zeros before the first) -> f32 `[t + kernel - 1, c]`, packed:
    /// rows `0..t` are `y[i, ch] = sum_j w[ch, j] * xx[i + j, ch]` over
    /// `xx = [state; x]` (no activation), rows `t..` the new state (the
    /// last `kernel - 1` rows of `xx`). Readers take both as dim-0 slices.
    /// The sum over the concatenation is the reference twin.
    CausalConv1d = "causal_conv1d", inputs(3, 3);
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
    GatedDeltaRule = "gated_delta_rule", inputs(6, 6);
    /// `cond`, `a`, `b` (broadcast) -> `a` where `cond != 0`, else `b`.
    Where = "where", inputs(3, 3);
    Cast {
        dtype: DType,
    } = "cast", inputs(1, 1);
    /// No inputs: `start, start+step, ...` below `end`.
    Arange {
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
    } = "arange", inputs(0, 0);
    /// No inputs: a tensor of `shape` filled with `value`.
    Full {
        shape: Vec<usize>,
        value: f64,
        dtype: DType,
    } = "full", inputs(0, 0);

}
