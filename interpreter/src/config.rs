//! config.json -> config values. Keys a config does not declare are ignored;
//! a declared field without a default must be present.

use std::rc::Rc;

use mllm_dsl::program::Ty;
use serde_json::Value as Json;

use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::value::{ConfigValue, Value};

/// Builds config `ci` from a JSON object; `origin` names the file for messages.
pub fn build(it: &mut Interp, ci: usize, json: &Json, origin: &str) -> RtResult<Rc<ConfigValue>> {
    let prog = it.prog;
    let c = &prog.configs[ci];
    let Some(obj) = json.as_object() else {
        return Err(RtError::new(
            "mdl::config::type",
            format!("{origin}: expected a JSON object for config `{}`", c.name),
        ));
    };
    let mut given = vec![];
    for f in &c.fields {
        let v = match obj.get(&f.name) {
            Some(j) if !j.is_null() => Some(
                convert(it, &f.ty, j, &format!("{origin}: `{}`", f.name))
                    .map_err(|e| e.at(f.source, f.span))?,
            ),
            // A nested config absent from the file gets all its defaults.
            _ => match (&f.ty, &f.default) {
                (Ty::Config(k), None) => Some(Value::Config(build(
                    it,
                    *k,
                    &Json::Object(Default::default()),
                    &format!("{origin}: `{}`", f.name),
                )?)),
                _ => None,
            },
        };
        given.push(v);
    }
    let cname = c.name.clone();
    let origin = origin.to_string();
    it.config_from_values(ci, given, move |field| {
        RtError::new(
            "mdl::config::missing",
            format!("{origin} has no `{field}`, which config `{cname}` requires"),
        )
        .label("declared here without a default")
        .help(format!(
            "add \"{field}\" to the config file, or give the field a default in the script"
        ))
    })
}

fn convert(it: &mut Interp, ty: &Ty, j: &Json, what: &str) -> RtResult<Value> {
    let bad = |want: &str| {
        RtError::new(
            "mdl::config::type",
            format!("{what} should be {want}, found {j}"),
        )
    };
    Ok(match ty {
        Ty::Int => match j.as_i64() {
            Some(i) => Value::Int(i),
            None => match j.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => Value::Int(f as i64),
                _ => return Err(bad("an integer")),
            },
        },
        Ty::Float => Value::Float(j.as_f64().ok_or_else(|| bad("a number"))?),
        Ty::Bool => Value::Bool(j.as_bool().ok_or_else(|| bad("true or false"))?),
        Ty::Str => Value::Str(j.as_str().ok_or_else(|| bad("a string"))?.into()),
        Ty::Tensor => return Err(bad("a tensor (configs cannot hold tensors)")),
        Ty::Optional(inner) => {
            if j.is_null() {
                Value::None
            } else {
                convert(it, inner, j, what)?
            }
        }
        Ty::List(inner) => {
            let items = j.as_array().ok_or_else(|| bad("a list"))?;
            Value::List(Rc::new(
                items
                    .iter()
                    .map(|x| convert(it, inner, x, what))
                    .collect::<RtResult<Vec<_>>>()?,
            ))
        }
        Ty::Config(k) => Value::Config(build(it, *k, j, what)?),
        Ty::Any => any(j),
    })
}

fn any(j: &Json) -> Value {
    match j {
        Json::Null => Value::None,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s.as_str().into()),
        Json::Array(a) => Value::List(Rc::new(a.iter().map(any).collect())),
        Json::Object(_) => Value::None,
    }
}
