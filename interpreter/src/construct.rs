//! Module construction (member declarations evaluated in order, each
//! declared parameter bound to the checkpoint tensor at its path and handed
//! to the executor once) and configs built from config.json values.

use std::rc::Rc;

use mllm_dsl::program::*;

use crate::arith::as_int;
use crate::error::{RtError, RtResult};
use crate::eval::{bind_args, truthy, Ctx, Interp, MAX_CALL_DEPTH};
use crate::value::{ConfigValue, Instance, Value};

impl Interp<'_> {
    // ------------------------------------------------------ construction

    /// Builds a module instance: evaluates its member declarations in order
    /// and binds each declared parameter to the checkpoint tensor at its path.
    pub fn construct(
        &mut self,
        mi: usize,
        args: Vec<Value>,
        kwargs: Vec<(Sym, Value)>,
    ) -> RtResult<Value> {
        let prog = self.prog;
        let m = &prog.modules[mi];
        let Some(path) = self.ctor_path.clone() else {
            return Err(RtError::new(
                "mdl::run::construct",
                format!(
                    "module `{}` can only be created in a member declaration",
                    m.name
                ),
            ));
        };
        if self.depth >= MAX_CALL_DEPTH {
            return Err(RtError::new(
                "mdl::run::too_deep",
                "modules nested too deep",
            ));
        }
        let bound = bind_args(&m.params, args, kwargs, &m.name, prog)?;
        let mut ctx = Ctx {
            frame: vec![Value::None; m.ctor_frame.max(m.params.len())],
            inst: None,
            cfg: None,
            source: m.source,
        };
        for (i, (p, v)) in m.params.iter().zip(bound).enumerate() {
            ctx.frame[i] = match v {
                Some(v) => v,
                None => match &p.default {
                    Some(d) => self.expr(d, &mut ctx)?,
                    None => {
                        return Err(RtError::new(
                            "mdl::run::arity",
                            format!("module `{}` is missing argument `{}`", m.name, p.name),
                        ))
                    }
                },
            };
        }
        if let Some(alias) = &m.alias {
            // Builds what the alias expression builds, at this module's path.
            self.depth += 1;
            let v = self.expr(alias, &mut ctx);
            self.depth -= 1;
            return match v? {
                v @ Value::Module(_) => Ok(v),
                other => Err(RtError::new(
                    "mdl::run::construct",
                    format!(
                        "module `{}` is an alias, but its expression built a {}, not a module",
                        m.name,
                        other.type_name()
                    ),
                )
                .at(m.source, alias.span)),
            };
        }
        let args: Vec<Value> = ctx.frame[..m.params.len()].to_vec();
        let mut members = Vec::with_capacity(m.members.len());
        self.depth += 1;
        let saved = self.ctor_path.clone();
        let result = (|| -> RtResult<()> {
            for mem in &m.members {
                if let Some(c) = &mem.cond {
                    let cv = self.expr(c, &mut ctx)?;
                    if !truthy(&cv).map_err(|e| e.at(m.source, c.span))? {
                        members.push(Value::None);
                        continue;
                    }
                }
                let mpath = if path.is_empty() {
                    mem.path.join(".")
                } else {
                    format!("{path}.{}", mem.path.join("."))
                };
                let v = match &mem.kind {
                    MemberKind::Param { shape } => {
                        let mut dims = vec![];
                        for d in shape {
                            let v = self.expr(d, &mut ctx)?;
                            let n = as_int(&v).map_err(|e| e.at(m.source, d.span))?;
                            if n < 0 {
                                return Err(RtError::new(
                                    "mdl::run::shape",
                                    format!("dimension {n} is negative"),
                                )
                                .at(m.source, d.span));
                            }
                            dims.push(n as usize);
                        }
                        let bound = match self.binder.as_mut() {
                            Some(b) => b.param(&mpath, dims, m.source, mem.span),
                            None => Value::None,
                        };
                        match bound {
                            // The backend takes each weight once, here.
                            Value::Tensor(t) => {
                                let t = self
                                    .exec
                                    .weight(&mpath, t)
                                    .map_err(|e| RtError::from(e).at(m.source, mem.span))?;
                                if let Some(b) = self.binder.as_mut() {
                                    b.bound.push((mpath.clone(), t.clone()));
                                }
                                Value::Tensor(t)
                            }
                            other => other,
                        }
                    }
                    MemberKind::Let { value, slot } => {
                        // Not a checkpoint path: a module built here has none.
                        self.ctor_path = None;
                        let v = self.expr(value, &mut ctx);
                        self.ctor_path = saved.clone();
                        let v = v?;
                        if let Some(f) = ctx.frame.get_mut(*slot) {
                            *f = v.clone();
                        }
                        v
                    }
                    MemberKind::Value(e) => {
                        self.ctor_path = Some(mpath.clone());
                        if let Some(b) = self.binder.as_mut() {
                            b.push_decl(m.source, mem.span);
                        }
                        let v = self.expr(e, &mut ctx);
                        if let Some(b) = self.binder.as_mut() {
                            b.pop_decl();
                        }
                        self.ctor_path = saved.clone();
                        v?
                    }
                };
                members.push(v);
            }
            Ok(())
        })();
        self.depth -= 1;
        self.ctor_path = saved;
        result?;
        Ok(Value::Module(Rc::new(Instance {
            module: mi,
            args,
            members,
            path,
        })))
    }

    /// Builds a config value from its fields' JSON values (`None` where the
    /// key is absent), evaluating defaults in order.
    pub fn config_from_values(
        &mut self,
        ci: usize,
        given: Vec<Option<Value>>,
        missing: impl Fn(&str) -> RtError,
    ) -> RtResult<Rc<ConfigValue>> {
        let prog = self.prog;
        let c = &prog.configs[ci];
        let mut fields: Vec<Value> = vec![];
        for (f, g) in c.fields.iter().zip(given) {
            let v = match g {
                Some(v) => v,
                None => match &f.default {
                    Some(d) => {
                        let mut ctx = Ctx {
                            frame: vec![Value::None; c.frame],
                            inst: None,
                            cfg: Some(&fields),
                            source: f.source,
                        };
                        self.expr(d, &mut ctx)?
                    }
                    None => match &f.ty {
                        Ty::Optional(_) => Value::None,
                        _ => return Err(missing(&f.name).at(f.source, f.span)),
                    },
                },
            };
            fields.push(v);
        }
        Ok(Rc::new(ConfigValue { config: ci, fields }))
    }
}
