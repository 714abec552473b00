//! The builtin vocabulary: names and signatures only. The interpreter gives
//! each a meaning; the checker uses the signatures for arity and keyword
//! checks. Any builtin can also be called as a method, with the receiver as
//! its first argument (`x.reshape([2, 3])` is `reshape(x, [2, 3])`).

/// What a builtin parameter takes when a call leaves it out. This table is
/// the only place builtin defaults live: the checker derives which
/// parameters are required from it, the interpreter fills them from it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamDefault {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// Optional, with a value the builtin derives from its other arguments
    /// (its doc says how), e.g. `sdpa`'s scale is 1/sqrt(head dim).
    Derived,
}

use ParamDefault as D;

/// One parameter: its name (positional or by keyword) and its default;
/// parameters without one are required and come first.
#[derive(Debug)]
pub struct BuiltinParam {
    pub name: &'static str,
    pub default: Option<ParamDefault>,
}

/// One builtin: its parameters and how many must be given. `variadic`
/// accepts any number of positional arguments.
#[derive(Debug)]
pub struct BuiltinSig {
    pub name: &'static str,
    pub params: &'static [BuiltinParam],
    pub required: usize,
    pub variadic: bool,
    pub doc: &'static str,
}

/// Parameters before the first one with a default.
const fn leading_required(ps: &[BuiltinParam]) -> usize {
    let mut i = 0;
    while i < ps.len() && ps[i].default.is_none() {
        i += 1;
    }
    i
}

macro_rules! builtins {
    ($( $variant:ident = $name:literal ($($p:literal $(= $d:expr)?),*) $(, $var:ident)? : $doc:literal ;)*) => {
        /// A builtin function, resolved by the checker.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Builtin { $($variant),* }

        pub const BUILTINS: &[(Builtin, BuiltinSig)] = &[
            $((Builtin::$variant, BuiltinSig {
                name: $name,
                params: &[$(BuiltinParam { name: $p, default: builtins!(@dflt $($d)?) }),*],
                required: leading_required(&[$(BuiltinParam { name: $p, default: builtins!(@dflt $($d)?) }),*]),
                variadic: builtins!(@var $($var)?),
                doc: $doc,
            })),*
        ];
    };
    (@dflt $d:expr) => { Some($d) };
    (@dflt) => { None };
    (@var variadic) => { true };
    (@var) => { false };
}

builtins! {
    // ---- native tensor ops
    Linear = "linear"("x", "weight", "bias" = D::Derived): "x @ weight^T + bias; weight is [out, in]";
    Matmul = "matmul"("a", "b"): "batched matrix product (also the `@` operator)";
    Embedding = "embedding"("weight", "ids"): "rows of `weight` picked by integer ids";
    RmsNorm = "rms_norm"("x", "weight", "eps" = D::Float(1e-6)): "x / sqrt(mean(x^2) + eps) * weight over the last dim";
    LayerNorm = "layer_norm"("x", "weight", "bias", "eps" = D::Float(1e-5)): "layer normalisation over the last dim";
    ApplyRope = "apply_rope"("x", "cos", "sin"): "rotary embedding (rotate-half layout) of x [seq, heads, dim]";
    Sdpa = "sdpa"("q", "k", "v", "causal" = D::Bool(false), "scale" = D::Derived, "window" = D::Int(0)): "scaled dot-product attention over [seq, heads, dim]; `scale` defaults to 1/sqrt(dim); `window` > 0 lets each query see only the last `window` keys up to its position (sliding-window layers)";
    Softmax = "softmax"("x", "dim" = D::Int(-1)): "softmax along `dim` (default: last)";
    Silu = "silu"("x"): "x * sigmoid(x)";
    Gelu = "gelu"("x"): "exact (erf) GELU";
    GeluTanh = "gelu_tanh"("x"): "tanh-approximated GELU";
    Relu = "relu"("x"): "max(x, 0)";
    Sigmoid = "sigmoid"("x"): "1 / (1 + exp(-x))";
    Tanh = "tanh"("x"): "hyperbolic tangent";
    Softplus = "softplus"("x"): "log(1 + e^x), and x itself above 20 (torch's softplus)";
    Exp = "exp"("x"): "e^x";
    Log = "log"("x"): "natural logarithm";
    Sqrt = "sqrt"("x"): "square root (numbers or tensors)";
    Rsqrt = "rsqrt"("x"): "1 / sqrt(x)";
    Sin = "sin"("x"): "sine";
    Cos = "cos"("x"): "cosine";
    Abs = "abs"("x"): "absolute value";
    Activation = "activation"("x", "name"): "an activation by its config.json name (silu, gelu, gelu_pytorch_tanh, relu, ...)";
    Argmax = "argmax"("x", "dim" = D::Int(-1)): "index of the maximum along `dim` (default: last)";
    Sum = "sum"("x", "dim" = D::Int(-1), "keepdim" = D::Bool(false)): "sum along `dim` (default: last)";
    Mean = "mean"("x", "dim" = D::Int(-1), "keepdim" = D::Bool(false)): "mean along `dim` (default: last)";
    Amax = "amax"("x", "dim" = D::Int(-1), "keepdim" = D::Bool(false)): "maximum along `dim` (default: last)";
    Reshape = "reshape"("x", "shape"): "same data, new shape; one entry may be -1";
    Permute = "permute"("x", "dims"): "reorders dimensions";
    Transpose = "transpose"("x", "dim0", "dim1"): "swaps two dimensions";
    Unsqueeze = "unsqueeze"("x", "dim"): "inserts a dimension of size 1";
    Squeeze = "squeeze"("x", "dim"): "removes a dimension of size 1";
    Concat = "concat"("tensors", "dim" = D::Int(0)): "joins a list of tensors along `dim` (default 0)";
    SplitHeads = "split_heads"("x", "heads"): "[seq, heads * d] -> [seq, heads, d]";
    MergeHeads = "merge_heads"("x"): "[seq, heads, d] -> [seq, heads * d]";
    IndexSelect = "index_select"("x", "dim", "index"): "picks entries of `dim` by an i32 tensor of indexes";
    Where = "where"("cond", "a", "b"): "`a` where `cond` is non-zero, else `b`";
    Cast = "cast"("x", "dtype"): "converts a tensor to \"f32\", \"f16\", \"bf16\" or \"i32\"";
    Arange = "arange"("start", "end" = D::Derived, "step" = D::Int(1)): "i32 tensor start, start+step, ... below end (arange(n) is 0..n)";
    Zeros = "zeros"("shape"): "f32 tensor of zeros";
    Ones = "ones"("shape"): "f32 tensor of ones";
    Full = "full"("shape", "value"): "f32 tensor filled with `value`";
    Tensor = "tensor"("values", "dtype" = D::Derived): "a tensor from a (nested) list of numbers";
    // ---- values
    Float = "float"("x"): "a number as float, or a tensor cast to f32";
    Int = "int"("x"): "a number as int (truncating), or a tensor cast to i32";
    Item = "item"("x"): "the number held by a one-element tensor";
    ToList = "to_list"("x"): "the values of a tensor as a list of numbers (nested per dimension; ints for i32)";
    Shape = "shape"("x"): "the shape of a tensor as a list of ints";
    Size = "size"("x", "dim"): "the size of one dimension (negative counts from the end)";
    Len = "len"("x"): "length of a list, tuple, string or the first dimension of a tensor";
    Range = "range"("start", "end" = D::Derived, "step" = D::Int(1)): "a list of ints, like Python's range";
    Enumerate = "enumerate"("items"): "pairs (index, item)";
    Zip = "zip"("a", "b"): "pairs items of two lists";
    Min = "min"("a", "b"): "the smaller of two numbers, or elementwise minimum";
    Max = "max"("a", "b"): "the larger of two numbers, or elementwise maximum";
    Print = "print"(), variadic: "prints values to stderr (debugging)";
    Assert = "assert"("cond", "message" = D::Derived): "fails with `message` (default: \"assertion failed\") when `cond` is false";
    HasWeights = "has_weights"("path"): "whether the checkpoint holds any tensor under the member `path` of the module being built (a part some checkpoints leave out, e.g. Qwen3.5's `mtp` head); false outside a module's member declarations";
    Keeps = "keeps"("name"): "whether the runner keeps the side output `name` (see `emit`): what only such a runner reads (a speculative step's per-row recurrent states) is computed only then";
    Emit = "emit"("name", "x"): "hands tensor `x` to the runner as the side output `name` (the final hidden states speculative decoding's MTP head reads) and returns `x`; a runner that does not ask for it ignores it";
    // ---- the KV cache
    Layer = "layer"("cache", "index"): "the cache of one layer";
    Append = "append"("cache", "k", "v"): "appends k and v [seq, heads, dim]; returns all keys and values so far";
    CacheLen = "cache_len"("cache"): "number of positions held by a layer cache";
    // ---- mixture of experts
    TopK = "topk"("x", "k"): "(values, indices) of the k largest entries of each row (last dim), largest first; indices are i32";
    Gather = "gather"("x", "dim", "index"): "torch.gather: x's entries along `dim` at an i32 index tensor of x's rank";
    MoeLinear = "moe_linear"("x", "ids", "weights"): "per (token, slot) linear by the expert `ids` [t, s] names: x [t, k] or [t, s, k], weights one [e, n, k] tensor or a list of [n, k] -> [t, s, n]";
    // ---- linear attention (Gated DeltaNet)
    CausalConv1d = "causal_conv1d"("x", "w", "state"): "depthwise causal conv over time: x [t, c], w [c, kernel], state [kernel - 1, c] (the previous inputs) -> [t + kernel - 1, c]: the outputs, then the new state";
    GatedDeltaRule = "gated_delta_rule"("q", "k", "v", "g", "beta", "state"): "the gated delta rule: q, k [t, hk, dk], v [t, hv, dv], g, beta [t, hv], state [hv, dk, dv] -> 1-D: outputs [t, hv, dv] then the final state [hv, dk, dv]";
    RecurrentState = "recurrent_state"("cache", "shapes" = D::Derived): "the state tensors a layer cache holds (a list); before the first `set_recurrent_state`, f32 zeros of `shapes` (a list of shapes), or none when they are left out. Declared shapes let a captured graph carry the state as inputs and outputs (a state must keep them)";
    SetRecurrentState = "set_recurrent_state"("cache", "states", "tokens"): "replaces a layer cache's recurrent state with a list of tensors covering `tokens` more positions";
}

impl Builtin {
    pub fn sig(self) -> &'static BuiltinSig {
        &BUILTINS[self as usize].1
    }

    pub fn name(self) -> &'static str {
        self.sig().name
    }

    pub fn lookup(name: &str) -> Option<Builtin> {
        BUILTINS
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(b, _)| *b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_variant() {
        for (i, (b, s)) in BUILTINS.iter().enumerate() {
            assert_eq!(*b as usize, i);
            assert!(s.required <= s.params.len() || s.variadic, "{}", s.name);
            // Required parameters come first: no gap after a default.
            assert!(
                s.params[s.required..].iter().all(|p| p.default.is_some()),
                "{}: a required parameter follows one with a default",
                s.name
            );
            assert_eq!(Builtin::lookup(s.name), Some(*b));
        }
    }
}
