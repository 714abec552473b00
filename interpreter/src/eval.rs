//! The evaluator: walks the checked program with resolved slots. Native ops
//! go through the `Executor`; errors get the span of the expression that
//! failed and the chain of script calls above it.

use std::rc::Rc;

use mllm_backends::{DType, Op, Tensor};
use mllm_dsl::ast::BinOp;
use mllm_dsl::diagnostic::SourceId;
use mllm_dsl::program::*;
use mllm_dsl::Span;

use crate::bind::Binder;
use crate::error::{RtError, RtResult};
use crate::executor::Executor;
use crate::limits::{Budget, ScriptLimits, MAX_ITEMS};
use crate::value::{Instance, Value};

/// Evaluated positional and keyword arguments.
type CallArgs = (Vec<Value>, Vec<(Sym, Value)>);

/// Script calls nested deeper than this fail instead of overflowing the stack.
pub const MAX_CALL_DEPTH: usize = 48;

pub struct Interp<'a> {
    pub prog: &'a Program,
    pub exec: &'a mut dyn Executor,
    pub(crate) depth: usize,
    /// Set while declaring members: the dotted path a module built now gets.
    pub(crate) ctor_path: Option<String>,
    pub binder: Option<Binder<'a>>,
    /// Steps taken and tensors made by this call, against its limits.
    pub(crate) budget: Budget,
}

/// What an expression is evaluated against.
pub struct Ctx<'c> {
    pub frame: Vec<Value>,
    pub inst: Option<Rc<Instance>>,
    pub cfg: Option<&'c [Value]>,
    pub source: SourceId,
}

enum Flow {
    Next,
    Return(Value),
}

pub(crate) fn truthy(v: &Value) -> RtResult<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::None => Ok(false),
        Value::Int(i) => Ok(*i != 0),
        other => Err(RtError::new(
            "mdl::run::type",
            format!("expected a bool, found {}", other.type_name()),
        )),
    }
}

impl<'a> Interp<'a> {
    /// An interpreter with the default limits (`ScriptLimits::default`).
    pub fn new(prog: &'a Program, exec: &'a mut dyn Executor) -> Interp<'a> {
        Interp::with_limits(prog, exec, ScriptLimits::default())
    }

    pub fn with_limits(
        prog: &'a Program,
        exec: &'a mut dyn Executor,
        limits: ScriptLimits,
    ) -> Interp<'a> {
        Interp {
            prog,
            exec,
            depth: 0,
            ctor_path: None,
            binder: None,
            budget: Budget::new(limits),
        }
    }

    pub fn op(&mut self, op: Op, inputs: &[&Tensor]) -> RtResult<Tensor> {
        let out = self.exec.run(&op, inputs).map_err(RtError::from)?;
        self.budget.record(inputs, &out)?;
        Ok(out)
    }

    // ------------------------------------------------------------ calls

    /// Calls a script function with positional and keyword arguments.
    pub fn call_function(
        &mut self,
        f: &Function,
        inst: Option<Rc<Instance>>,
        args: Vec<Value>,
        kwargs: Vec<(Sym, Value)>,
    ) -> RtResult<Value> {
        if self.depth >= MAX_CALL_DEPTH {
            return Err(RtError::new(
                "mdl::run::too_deep",
                format!("calls nested more than {MAX_CALL_DEPTH} deep"),
            )
            .help("is a function calling itself without end?"));
        }
        let mut frame = vec![Value::None; f.frame.max(f.params.len())];
        let bound = bind_args(&f.params, args, kwargs, &f.name, self.prog)?;
        let mut ctx = Ctx {
            frame: vec![],
            inst,
            cfg: None,
            source: f.source,
        };
        for (i, (p, v)) in f.params.iter().zip(bound).enumerate() {
            frame[i] = match v {
                Some(v) => v,
                None => match &p.default {
                    Some(d) => {
                        ctx.frame = std::mem::take(&mut frame);
                        let v = self.expr(d, &mut ctx)?;
                        frame = std::mem::take(&mut ctx.frame);
                        v
                    }
                    None => {
                        return Err(RtError::new(
                            "mdl::run::arity",
                            format!("`{}` is missing argument `{}`", f.name, p.name),
                        ))
                    }
                },
            };
        }
        ctx.frame = frame;
        self.depth += 1;
        let r = self.block(&f.body, &mut ctx);
        self.depth -= 1;
        match r? {
            Flow::Return(v) => Ok(v),
            Flow::Next => Ok(Value::None),
        }
    }

    /// Calls any callable value.
    pub fn call_value(
        &mut self,
        callee: &Value,
        args: Vec<Value>,
        kwargs: Vec<(Sym, Value)>,
    ) -> RtResult<Value> {
        match callee {
            Value::Builtin(b) => crate::builtins::call(self, *b, args, kwargs),
            Value::Global(Global::Fn(j)) => {
                let prog = self.prog;
                self.call_function(&prog.fns[*j], None, args, kwargs)
            }
            Value::Global(Global::Module(j)) => self.construct(*j, args, kwargs),
            Value::Module(inst) => {
                let prog = self.prog;
                let m = &prog.modules[inst.module];
                match m.fn_index("forward") {
                    Some(fi) => self.call_function(&m.fns[fi], Some(inst.clone()), args, kwargs),
                    None => Err(RtError::new(
                        "mdl::run::not_callable",
                        format!("module `{}` has no `forward`", m.name),
                    )),
                }
            }
            other => Err(RtError::new(
                "mdl::run::not_callable",
                format!("a {} cannot be called", other.type_name()),
            )),
        }
    }

    fn method(
        &mut self,
        recv: Value,
        name: Sym,
        builtin: Option<mllm_dsl::builtins::Builtin>,
        mut args: Vec<Value>,
        kwargs: Vec<(Sym, Value)>,
    ) -> RtResult<Value> {
        let prog = self.prog;
        if let Value::Module(inst) = &recv {
            let m = &prog.modules[inst.module];
            let fname = prog.syms.name(name);
            if let Some(fi) = m.fn_index(fname) {
                return self.call_function(&m.fns[fi], Some(inst.clone()), args, kwargs);
            }
        }
        if matches!(recv, Value::Module(_) | Value::MemberNs(..)) {
            let member = self.attr(&recv, name)?;
            return self.call_value(&member, args, kwargs);
        }
        match builtin {
            Some(b) => {
                args.insert(0, recv);
                crate::builtins::call(self, b, args, kwargs)
            }
            None => Err(RtError::new(
                "mdl::run::no_method",
                format!(
                    "a {} has no method `{}`",
                    recv.type_name(),
                    prog.syms.name(name)
                ),
            )),
        }
    }

    pub(crate) fn attr(&mut self, base: &Value, sym: Sym) -> RtResult<Value> {
        let prog = self.prog;
        let name = prog.syms.name(sym);
        let ns_entry = |inst: &Rc<Instance>, node: usize| -> RtResult<Value> {
            let m = &prog.modules[inst.module];
            match m.ns.get(node).and_then(|n| n.find(sym)) {
                Some(NsEntry::Member(i)) => Ok(inst.members[i].clone()),
                Some(NsEntry::Node(n)) => Ok(Value::MemberNs(inst.clone(), n)),
                None => Err(RtError::new(
                    "mdl::run::no_member",
                    format!("module `{}` has no member `{name}`", m.name),
                )),
            }
        };
        match base {
            Value::Module(inst) => ns_entry(inst, 0),
            Value::MemberNs(inst, node) => ns_entry(inst, *node),
            Value::Config(c) => {
                let cfg = &prog.configs[c.config];
                match cfg.fields.iter().position(|f| f.sym == sym) {
                    Some(i) => Ok(c.fields[i].clone()),
                    None => Err(RtError::new(
                        "mdl::run::no_field",
                        format!("config `{}` has no field `{name}`", cfg.name),
                    )),
                }
            }
            Value::Tensor(t) => match name {
                "shape" => Ok(Value::List(Rc::new(
                    t.shape().iter().map(|&d| Value::Int(d as i64)).collect(),
                ))),
                "ndim" => Ok(Value::Int(t.rank() as i64)),
                "dtype" => Ok(Value::Str(t.dtype().name().into())),
                _ => Err(RtError::new(
                    "mdl::run::no_member",
                    format!("a tensor has no attribute `{name}`"),
                )
                .help("tensors have `shape`, `ndim` and `dtype`")),
            },
            Value::None => Err(RtError::new("mdl::run::none", format!("`.{name}` of none"))
                .help("a member declared with `if` is none when its condition is false")),
            other => Err(RtError::new(
                "mdl::run::no_member",
                format!("a {} has no attribute `{name}`", other.type_name()),
            )),
        }
    }

    // ------------------------------------------------------- statements

    fn block(&mut self, stmts: &[Stmt], ctx: &mut Ctx) -> RtResult<Flow> {
        for s in stmts {
            if let Flow::Return(v) = self.stmt(s, ctx)? {
                return Ok(Flow::Return(v));
            }
        }
        Ok(Flow::Next)
    }

    fn stmt(&mut self, s: &Stmt, ctx: &mut Ctx) -> RtResult<Flow> {
        match &s.kind {
            StmtKind::Let(p, e) => {
                let v = self.expr(e, ctx)?;
                bind_pattern(p, v, &mut ctx.frame).map_err(|e| e.at(ctx.source, s.span))?;
            }
            StmtKind::Assign(slot, op, e) => {
                let v = self.expr(e, ctx)?;
                let v = match op {
                    None => v,
                    // `xs += [..]` extends the list in place (amortised O(1)
                    // per item) unless another value shares it.
                    Some(BinOp::Add) => {
                        match (std::mem::replace(&mut ctx.frame[*slot], Value::None), v) {
                            (Value::List(mut cur), Value::List(add)) => {
                                crate::arith::too_long(cur.len() + add.len(), "a list of", "items")
                                    .map_err(|e| e.at(ctx.source, s.span))?;
                                Rc::make_mut(&mut cur).extend(add.iter().cloned());
                                Value::List(cur)
                            }
                            (cur, v) => self
                                .binary(BinOp::Add, cur, v)
                                .map_err(|e| e.at(ctx.source, s.span))?,
                        }
                    }
                    Some(op) => {
                        let cur = ctx.frame[*slot].clone();
                        self.binary(*op, cur, v)
                            .map_err(|e| e.at(ctx.source, s.span))?
                    }
                };
                ctx.frame[*slot] = v;
            }
            StmtKind::For(p, iter, body) => {
                let it = self.expr(iter, ctx)?;
                let items = self.iterate(it).map_err(|e| e.at(ctx.source, iter.span))?;
                for item in items {
                    self.budget.step().map_err(|e| e.at(ctx.source, s.span))?;
                    bind_pattern(p, item, &mut ctx.frame).map_err(|e| e.at(ctx.source, s.span))?;
                    if let Flow::Return(v) = self.block(body, ctx)? {
                        return Ok(Flow::Return(v));
                    }
                }
            }
            StmtKind::If(branches, els) => {
                for (c, b) in branches {
                    let cv = self.expr(c, ctx)?;
                    if truthy(&cv).map_err(|e| e.at(ctx.source, c.span))? {
                        return self.block(b, ctx);
                    }
                }
                if let Some(b) = els {
                    return self.block(b, ctx);
                }
            }
            StmtKind::Return(e) => {
                let v = match e {
                    Some(e) => self.expr(e, ctx)?,
                    None => Value::None,
                };
                return Ok(Flow::Return(v));
            }
            StmtKind::Expr(e) => {
                self.expr(e, ctx)?;
            }
        }
        Ok(Flow::Next)
    }

    pub(crate) fn iterate(&mut self, v: Value) -> RtResult<Vec<Value>> {
        match v {
            Value::List(items) | Value::Tuple(items) => Ok(items.to_vec()),
            Value::Tensor(t) if t.rank() == 1 && t.dtype() == DType::I32 => {
                Ok(t.i32s()?.iter().map(|&i| Value::Int(i as i64)).collect())
            }
            other => Err(RtError::new(
                "mdl::run::type",
                format!("cannot iterate over a {}", other.type_name()),
            )),
        }
    }

    // ------------------------------------------------------ expressions

    pub fn expr(&mut self, e: &Expr, ctx: &mut Ctx) -> RtResult<Value> {
        let r = self.budget.step().and_then(|()| self.expr_inner(e, ctx));
        r.map_err(|err| err.at(ctx.source, e.span))
    }

    fn expr_inner(&mut self, e: &Expr, ctx: &mut Ctx) -> RtResult<Value> {
        Ok(match &e.kind {
            ExprKind::Lit(l) => match l {
                Lit::Int(i) => Value::Int(*i),
                Lit::Float(f) => Value::Float(*f),
                Lit::Bool(b) => Value::Bool(*b),
                Lit::Str(s) => Value::Str(s.clone()),
                Lit::None => Value::None,
            },
            ExprKind::Local(s) => ctx.frame[*s].clone(),
            ExprKind::CtorArg(i) => ctx
                .inst
                .as_ref()
                .map_or(Value::None, |inst| inst.args[*i].clone()),
            ExprKind::Member(i) => ctx
                .inst
                .as_ref()
                .map_or(Value::None, |inst| inst.members[*i].clone()),
            ExprKind::SelfInstance => match &ctx.inst {
                Some(inst) => Value::Module(inst.clone()),
                None => Value::None,
            },
            ExprKind::MemberNs(n) => match &ctx.inst {
                Some(inst) => Value::MemberNs(inst.clone(), *n),
                None => Value::None,
            },
            ExprKind::ConfigField(i) => ctx
                .cfg
                .and_then(|c| c.get(*i))
                .cloned()
                .unwrap_or(Value::None),
            ExprKind::Global(g) => Value::Global(*g),
            ExprKind::Builtin(b) => Value::Builtin(*b),
            ExprKind::Unary(op, x) => {
                let v = self.expr(x, ctx)?;
                self.unary(*op, v)?
            }
            ExprKind::Binary(op, a, b) => {
                let av = self.expr(a, ctx)?;
                // Short-circuit the logical operators.
                match op {
                    BinOp::And if !truthy(&av).map_err(|e| e.at(ctx.source, a.span))? => {
                        return Ok(Value::Bool(false))
                    }
                    BinOp::Or if truthy(&av).map_err(|e| e.at(ctx.source, a.span))? => {
                        return Ok(Value::Bool(true))
                    }
                    BinOp::And | BinOp::Or => {
                        let bv = self.expr(b, ctx)?;
                        return Ok(Value::Bool(
                            truthy(&bv).map_err(|e| e.at(ctx.source, b.span))?,
                        ));
                    }
                    _ => {}
                }
                let bv = self.expr(b, ctx)?;
                self.binary(*op, av, bv)?
            }
            ExprKind::Range(a, b) => {
                let (a, b) = (self.expr(a, ctx)?, self.expr(b, ctx)?);
                match (a, b) {
                    (Value::Int(a), Value::Int(b)) => {
                        if b.saturating_sub(a) > MAX_ITEMS as i64 {
                            return Err(RtError::msg(format!("range {a}..{b} is too long")));
                        }
                        Value::List(Rc::new((a..b).map(Value::Int).collect()))
                    }
                    (a, b) => {
                        return Err(RtError::new(
                            "mdl::run::type",
                            format!(
                                "a range needs two ints, found {} and {}",
                                a.type_name(),
                                b.type_name()
                            ),
                        ))
                    }
                }
            }
            ExprKind::Call {
                callee,
                args,
                kwargs,
            } => {
                let c = self.expr(callee, ctx)?;
                let (a, k) = self.args(args, kwargs, ctx)?;
                self.call_value(&c, a, k)
                    .map_err(|err| self.trace(err, ctx.source, e.span))?
            }
            ExprKind::Method {
                recv,
                name,
                builtin,
                args,
                kwargs,
            } => {
                let r = self.expr(recv, ctx)?;
                let (a, k) = self.args(args, kwargs, ctx)?;
                self.method(r, *name, *builtin, a, k)
                    .map_err(|err| self.trace(err, ctx.source, e.span))?
            }
            ExprKind::Attr(base, sym) => {
                let b = self.expr(base, ctx)?;
                self.attr(&b, *sym)?
            }
            ExprKind::Index(base, items) => {
                let b = self.expr(base, ctx)?;
                self.index(b, items, ctx)?
            }
            ExprKind::List(items) => Value::List(Rc::new(self.elements(items, ctx)?)),
            ExprKind::Tuple(items) => {
                let v = items
                    .iter()
                    .map(|i| self.expr(i, ctx))
                    .collect::<RtResult<Vec<_>>>()?;
                Value::Tuple(Rc::new(v))
            }
            ExprKind::Comprehension {
                elem,
                pat,
                iter,
                cond,
            } => {
                let it = self.expr(iter, ctx)?;
                let items = self.iterate(it).map_err(|e| e.at(ctx.source, iter.span))?;
                let base_path = self.ctor_path.clone();
                let mut out = vec![];
                for item in items {
                    bind_pattern(pat, item, &mut ctx.frame)?;
                    if let Some(c) = cond {
                        let cv = self.expr(c, ctx)?;
                        if !truthy(&cv)? {
                            continue;
                        }
                    }
                    // Modules built as list elements are named by their index.
                    if let Some(p) = &base_path {
                        self.ctor_path = Some(format!("{p}.{}", out.len()));
                    }
                    let v = self.expr(elem, ctx);
                    self.ctor_path = base_path.clone();
                    out.push(v?);
                }
                Value::List(Rc::new(out))
            }
            ExprKind::If(c, a, b) => {
                let cv = self.expr(c, ctx)?;
                if truthy(&cv).map_err(|e| e.at(ctx.source, c.span))? {
                    self.expr(a, ctx)?
                } else {
                    self.expr(b, ctx)?
                }
            }
        })
    }

    fn trace(&self, mut err: RtError, source: SourceId, span: Span) -> RtError {
        if err.at.is_none() {
            err.at = Some((source, span));
        } else if err.at != Some((source, span)) && err.trace.len() < 16 {
            err.trace.push((source, span));
        }
        err
    }

    fn elements(&mut self, items: &[Expr], ctx: &mut Ctx) -> RtResult<Vec<Value>> {
        let base_path = self.ctor_path.clone();
        let mut out = vec![];
        for (i, item) in items.iter().enumerate() {
            if let Some(p) = &base_path {
                self.ctor_path = Some(format!("{p}.{i}"));
            }
            let v = self.expr(item, ctx);
            self.ctor_path = base_path.clone();
            out.push(v?);
        }
        Ok(out)
    }

    fn args(&mut self, args: &[Expr], kwargs: &[(Sym, Expr)], ctx: &mut Ctx) -> RtResult<CallArgs> {
        let a = args
            .iter()
            .map(|x| self.expr(x, ctx))
            .collect::<RtResult<Vec<_>>>()?;
        let k = kwargs
            .iter()
            .map(|(s, x)| Ok((*s, self.expr(x, ctx)?)))
            .collect::<RtResult<Vec<_>>>()?;
        Ok((a, k))
    }
}

/// Matches positional and keyword arguments to parameters.
pub(crate) fn bind_args(
    params: &[FnParam],
    args: Vec<Value>,
    kwargs: Vec<(Sym, Value)>,
    what: &str,
    prog: &Program,
) -> RtResult<Vec<Option<Value>>> {
    if args.len() > params.len() {
        return Err(RtError::new(
            "mdl::run::arity",
            format!(
                "`{what}` takes {} arguments, got {}",
                params.len(),
                args.len()
            ),
        ));
    }
    let mut out: Vec<Option<Value>> = args.into_iter().map(Some).collect();
    out.resize(params.len(), None);
    for (sym, v) in kwargs {
        match params.iter().position(|p| p.sym == sym) {
            Some(i) => out[i] = Some(v),
            None => {
                return Err(RtError::new(
                    "mdl::run::arity",
                    format!("`{what}` has no parameter `{}`", prog.syms.name(sym)),
                ))
            }
        }
    }
    Ok(out)
}

fn bind_pattern(p: &Pattern, v: Value, frame: &mut [Value]) -> RtResult<()> {
    match p {
        Pattern::Slot(s) => {
            frame[*s] = v;
            Ok(())
        }
        Pattern::Tuple(ps, _) => {
            let items = match v {
                Value::Tuple(items) | Value::List(items) => items,
                other => {
                    return Err(RtError::new(
                        "mdl::run::type",
                        format!(
                            "cannot unpack a {} into {} names",
                            other.type_name(),
                            ps.len()
                        ),
                    ))
                }
            };
            if items.len() != ps.len() {
                return Err(RtError::new(
                    "mdl::run::type",
                    format!(
                        "cannot unpack {} values into {} names",
                        items.len(),
                        ps.len()
                    ),
                ));
            }
            for (q, item) in ps.iter().zip(items.iter()) {
                bind_pattern(q, item.clone(), frame)?;
            }
            Ok(())
        }
    }
}
