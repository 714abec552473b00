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

#[cfg(test)]
mod tests {
    use mllm_backends::CpuBackend;
    use mllm_dsl::builtins::BUILTINS;

    use super::*;
    use crate::executor::Eager;

    /// Every builtin of the language has a meaning here: called with a
    /// string for each required argument (which the argument matching
    /// accepts, unlike `none`), each fails on its arguments (or runs),
    /// never with "no implementation", which a builtin added to
    /// `mllm_dsl::builtins` without interpreter code raises.
    #[test]
    fn every_builtin_is_implemented() {
        let (prog, diags) = mllm_dsl::check("t.mdl", "", &mllm_dsl::NoImports);
        assert!(diags.is_empty(), "{diags:?}");
        let mut exec = Eager::new(CpuBackend);
        let mut it = Interp::new(&prog, &mut exec);
        let mut unimplemented = vec![];
        for (b, sig) in BUILTINS {
            let args = vec![Value::Str("?".into()); sig.required];
            if let Err(e) = call(&mut it, *b, args, vec![]) {
                if e.code == tensor_ops::UNIMPLEMENTED {
                    unimplemented.push(sig.name);
                }
            }
        }
        assert!(
            unimplemented.is_empty(),
            "builtins without an implementation: {unimplemented:?}"
        );
    }

    /// The test above can fail: a builtin the interpreter does not know
    /// reaches the error it looks for.
    #[test]
    fn a_builtin_without_code_is_reported() {
        let (prog, _) = mllm_dsl::check("t.mdl", "", &mllm_dsl::NoImports);
        let mut exec = Eager::new(CpuBackend);
        let mut it = Interp::new(&prog, &mut exec);
        let a = args::Args::new(&it, Builtin::Print, vec![], vec![]).expect("no args");
        // `print` is a value builtin: the tensor family has no code for it.
        let e = tensor_ops::call(&mut it, Builtin::Print, &a).expect_err("not a tensor op");
        assert_eq!(e.code, tensor_ops::UNIMPLEMENTED);
    }
}
