//! Meanings of the builtins named in `mllm_dsl::builtins`: arguments are
//! matched to the signature table (which also owns the defaults), then each
//! family runs: tensor ops through the executor (`tensor_ops.rs`), plain
//! values and the KV cache (`values.rs`), the mixture-of-experts ops
//! (`moe.rs`), Gated DeltaNet's ops and recurrent state (`linear_attn.rs`).

mod args;
mod convert;
mod linear_attn;
mod moe;
mod tensor_ops;
mod values;

use mllm_dsl::builtins::Builtin;
use mllm_dsl::program::Sym;

pub use tensor_ops::activation_by_name;

use crate::error::RtResult;
use crate::eval::Interp;
use crate::value::Value;

pub fn call(
    it: &mut Interp,
    b: Builtin,
    args: Vec<Value>,
    kwargs: Vec<(Sym, Value)>,
) -> RtResult<Value> {
    let a = args::Args::new(it, b, args, kwargs)?;
    if let Some(v) = values::call(it, b, &a)? {
        return Ok(v);
    }
    if let Some(v) = linear_attn::call(it, b, &a)? {
        return Ok(v);
    }
    match moe::call(it, b, &a)? {
        Some(v) => Ok(v),
        None => tensor_ops::call(it, b, &a),
    }
}
