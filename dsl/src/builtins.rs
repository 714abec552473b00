//! The builtin vocabulary: names and signatures only. The interpreter gives
//! each a meaning; the checker uses the signatures for arity and keyword
//! checks. Any builtin can also be called as a method, with the receiver as
//! its first argument (`x.reshape([2, 3])` is `reshape(x, [2, 3])`).

/// One builtin: its parameter names (positional or by keyword) and how many
/// must be given. `variadic` accepts any number of positional arguments.
#[derive(Debug)]
pub struct BuiltinSig {
    pub name: &'static str,
    pub params: &'static [&'static str],
    pub required: usize,
    pub variadic: bool,
    pub doc: &'static str,
}

macro_rules! builtins {
    ($( $variant:ident = $name:literal ($($p:literal),*) req $req:literal $(, $var:ident)? : $doc:literal ;)*) => {
        /// A builtin function, resolved by the checker.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Builtin { $($variant),* }

        pub const BUILTINS: &[(Builtin, BuiltinSig)] = &[
            $((Builtin::$variant, BuiltinSig {
                name: $name,
                params: &[$($p),*],
                required: $req,
                variadic: builtins!(@var $($var)?),
                doc: $doc,
            })),*
        ];
    };
    (@var variadic) => { true };
    (@var) => { false };
}

builtins! {
    // ---- native tensor ops
    Linear = "linear"("x", "weight", "bias") req 2: "x @ weight^T + bias; weight is [out, in]";
    Matmul = "matmul"("a", "b") req 2: "batched matrix product (also the `@` operator)";
    Embedding = "embedding"("weight", "ids") req 2: "rows of `weight` picked by integer ids";
    RmsNorm = "rms_norm"("x", "weight", "eps") req 3: "x / sqrt(mean(x^2) + eps) * weight over the last dim";
    LayerNorm = "layer_norm"("x", "weight", "bias", "eps") req 4: "layer normalisation over the last dim";
    ApplyRope = "apply_rope"("x", "cos", "sin") req 3: "rotary embedding (rotate-half layout) of x [seq, heads, dim]";
    Sdpa = "sdpa"("q", "k", "v", "causal", "scale") req 3: "scaled dot-product attention over [seq, heads, dim]";
    Softmax = "softmax"("x", "dim") req 1: "softmax along `dim` (default: last)";
    Silu = "silu"("x") req 1: "x * sigmoid(x)";
    Gelu = "gelu"("x") req 1: "exact (erf) GELU";
    GeluTanh = "gelu_tanh"("x") req 1: "tanh-approximated GELU";
    Relu = "relu"("x") req 1: "max(x, 0)";
    Sigmoid = "sigmoid"("x") req 1: "1 / (1 + exp(-x))";
    Tanh = "tanh"("x") req 1: "hyperbolic tangent";
    Exp = "exp"("x") req 1: "e^x";
    Log = "log"("x") req 1: "natural logarithm";
    Sqrt = "sqrt"("x") req 1: "square root (numbers or tensors)";
    Rsqrt = "rsqrt"("x") req 1: "1 / sqrt(x)";
    Sin = "sin"("x") req 1: "sine";
    Cos = "cos"("x") req 1: "cosine";
    Abs = "abs"("x") req 1: "absolute value";
    Activation = "activation"("x", "name") req 2: "an activation by its config.json name (silu, gelu, gelu_pytorch_tanh, relu, ...)";
    Argmax = "argmax"("x", "dim") req 1: "index of the maximum along `dim` (default: last)";
    Sum = "sum"("x", "dim", "keepdim") req 2: "sum along `dim`";
    Mean = "mean"("x", "dim", "keepdim") req 2: "mean along `dim`";
    Amax = "amax"("x", "dim", "keepdim") req 2: "maximum along `dim`";
    Reshape = "reshape"("x", "shape") req 2: "same data, new shape; one entry may be -1";
    Permute = "permute"("x", "dims") req 2: "reorders dimensions";
    Transpose = "transpose"("x", "dim0", "dim1") req 3: "swaps two dimensions";
    Unsqueeze = "unsqueeze"("x", "dim") req 2: "inserts a dimension of size 1";
    Squeeze = "squeeze"("x", "dim") req 2: "removes a dimension of size 1";
    Concat = "concat"("tensors", "dim") req 1: "joins a list of tensors along `dim` (default 0)";
    SplitHeads = "split_heads"("x", "heads") req 2: "[seq, heads * d] -> [seq, heads, d]";
    MergeHeads = "merge_heads"("x") req 1: "[seq, heads, d] -> [seq, heads * d]";
    IndexSelect = "index_select"("x", "dim", "index") req 3: "picks entries of `dim` by an i32 tensor of indexes";
    Where = "where"("cond", "a", "b") req 3: "`a` where `cond` is non-zero, else `b`";
    Cast = "cast"("x", "dtype") req 2: "converts a tensor to \"f32\", \"f16\", \"bf16\" or \"i32\"";
    Arange = "arange"("start", "end", "step") req 1: "i32 tensor start, start+step, ... below end (arange(n) is 0..n)";
    Zeros = "zeros"("shape") req 1: "f32 tensor of zeros";
    Ones = "ones"("shape") req 1: "f32 tensor of ones";
    Full = "full"("shape", "value") req 2: "f32 tensor filled with `value`";
    Tensor = "tensor"("values", "dtype") req 1: "a tensor from a (nested) list of numbers";
    // ---- values
    Float = "float"("x") req 1: "a number as float, or a tensor cast to f32";
    Int = "int"("x") req 1: "a number as int (truncating), or a tensor cast to i32";
    Item = "item"("x") req 1: "the number held by a one-element tensor";
    ToList = "to_list"("x") req 1: "the values of a tensor as a list of numbers (nested per dimension; ints for i32)";
    Shape = "shape"("x") req 1: "the shape of a tensor as a list of ints";
    Size = "size"("x", "dim") req 2: "the size of one dimension (negative counts from the end)";
    Len = "len"("x") req 1: "length of a list, tuple, string or the first dimension of a tensor";
    Range = "range"("start", "end", "step") req 1: "a list of ints, like Python's range";
    Enumerate = "enumerate"("items") req 1: "pairs (index, item)";
    Zip = "zip"("a", "b") req 2: "pairs items of two lists";
    Min = "min"("a", "b") req 2: "the smaller of two numbers, or elementwise minimum";
    Max = "max"("a", "b") req 2: "the larger of two numbers, or elementwise maximum";
    Print = "print"() req 0, variadic: "prints values to stderr (debugging)";
    Assert = "assert"("cond", "message") req 1: "fails with `message` when `cond` is false";
    // ---- the KV cache
    Layer = "layer"("cache", "index") req 2: "the cache of one layer";
    Append = "append"("cache", "k", "v") req 3: "appends k and v [seq, heads, dim]; returns all keys and values so far";
    CacheLen = "cache_len"("cache") req 1: "number of positions held by a layer cache";
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
            assert_eq!(Builtin::lookup(s.name), Some(*b));
        }
    }
}
