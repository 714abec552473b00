//! Arguments of one builtin call matched to its signature, with the table's
//! defaults filled in, and typed accessors that name the parameter in errors.

use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_dsl::builtins::{Builtin, ParamDefault};
use mllm_dsl::program::Sym;

use crate::arith::as_int;
use crate::error::{RtError, RtResult};
use crate::eval::{truthy, Interp};
use crate::value::Value;

pub(super) fn type_err(b: Builtin, param: &str, want: &str, got: &Value) -> RtError {
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
pub(super) struct Args {
    pub(super) b: Builtin,
    pub(super) vals: Vec<Option<Value>>,
}

impl Args {
    pub(super) fn new(
        it: &Interp,
        b: Builtin,
        args: Vec<Value>,
        kwargs: Vec<(Sym, Value)>,
    ) -> RtResult<Args> {
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
            match sig.params.iter().position(|p| p.name == name) {
                Some(i) => vals[i] = Some(v),
                None => {
                    return Err(RtError::new(
                        "mdl::run::arity",
                        format!("`{}` has no parameter `{name}`", sig.name),
                    ))
                }
            }
        }
        // An explicit `none` counts as not given; then the table's defaults.
        for (v, p) in vals.iter_mut().zip(sig.params) {
            if matches!(v, Some(Value::None)) {
                *v = None;
            }
            if v.is_none() {
                *v = match p.default {
                    Some(ParamDefault::Int(i)) => Some(Value::Int(i)),
                    Some(ParamDefault::Float(f)) => Some(Value::Float(f)),
                    Some(ParamDefault::Bool(b)) => Some(Value::Bool(b)),
                    Some(ParamDefault::Derived) | None => None,
                };
            }
        }
        if let Some(i) = (0..sig.required).find(|&i| vals[i].is_none()) {
            return Err(RtError::new(
                "mdl::run::arity",
                format!(
                    "`{}` is missing argument `{}`",
                    sig.name, sig.params[i].name
                ),
            ));
        }
        Ok(Args { b, vals })
    }

    pub(super) fn name(&self, i: usize) -> &'static str {
        self.b.sig().params.get(i).map_or("argument", |p| p.name)
    }

    pub(super) fn get(&self, i: usize) -> Option<&Value> {
        self.vals.get(i).and_then(|v| v.as_ref())
    }

    pub(super) fn tensor(&self, i: usize) -> RtResult<Tensor> {
        match self.get(i) {
            Some(Value::Tensor(t)) => Ok(t.clone()),
            Some(other) => Err(type_err(self.b, self.name(i), "a tensor", other)),
            None => Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` needs `{}`", self.b.name(), self.name(i)),
            )),
        }
    }

    pub(super) fn opt_tensor(&self, i: usize) -> RtResult<Option<Tensor>> {
        self.get(i).map(|_| self.tensor(i)).transpose()
    }

    pub(super) fn missing(&self, i: usize) -> RtError {
        RtError::new(
            "mdl::run::arity",
            format!("`{}` needs `{}`", self.b.name(), self.name(i)),
        )
    }

    /// Parameters given or defaulted by the table (`ParamDefault`); a
    /// `Derived` one left out is `None` here, see `get`.
    pub(super) fn int(&self, i: usize) -> RtResult<i64> {
        match self.get(i) {
            None => Err(self.missing(i)),
            Some(v) => as_int(v).map_err(|_| type_err(self.b, self.name(i), "an int", v)),
        }
    }

    pub(super) fn float(&self, i: usize) -> RtResult<f64> {
        match self.get(i) {
            None => Err(self.missing(i)),
            Some(Value::Int(x)) => Ok(*x as f64),
            Some(Value::Float(x)) => Ok(*x),
            Some(v) => Err(type_err(self.b, self.name(i), "a number", v)),
        }
    }

    pub(super) fn bool(&self, i: usize) -> RtResult<bool> {
        match self.get(i) {
            None => Err(self.missing(i)),
            Some(v @ Value::Bool(_)) => truthy(v),
            Some(v) => Err(type_err(self.b, self.name(i), "a bool", v)),
        }
    }

    pub(super) fn str(&self, i: usize) -> RtResult<Rc<str>> {
        match self.get(i) {
            Some(Value::Str(s)) => Ok(s.clone()),
            Some(v) => Err(type_err(self.b, self.name(i), "a string", v)),
            None => Err(RtError::new(
                "mdl::run::arity",
                format!("`{}` needs `{}`", self.b.name(), self.name(i)),
            )),
        }
    }

    pub(super) fn ints(&self, i: usize) -> RtResult<Vec<i64>> {
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
    pub(super) fn dim(&self, i: usize, t: &Tensor) -> RtResult<usize> {
        let d = self.int(i)?;
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

pub(super) fn norm_dim(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let j = if d < 0 { d + r } else { d };
    (0..r).contains(&j).then_some(j as usize)
}

pub(super) fn shape_list(shape: &[usize]) -> Value {
    Value::List(Rc::new(
        shape.iter().map(|&d| Value::Int(d as i64)).collect(),
    ))
}

pub(super) fn dims(v: &[i64]) -> RtResult<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| RtError::new("mdl::run::shape", format!("dimension {d} is negative")))
        })
        .collect()
}
