//! The evaluator: walks the checked program with resolved slots. Native ops
//! go through the `Executor`; errors get the span of the expression that
//! failed and the chain of script calls above it.

use std::rc::Rc;

use mllm_backends::{BinaryOp, DType, Op, Tensor};
use mllm_dsl::ast::{BinOp, UnOp};
use mllm_dsl::diagnostic::SourceId;
use mllm_dsl::program::*;
use mllm_dsl::Span;

use crate::bind::Binder;
use crate::error::{RtError, RtResult};
use crate::executor::Executor;
use crate::value::{ConfigValue, Instance, Value};

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
    pub fn new(prog: &'a Program, exec: &'a mut dyn Executor) -> Interp<'a> {
        Interp {
            prog,
            exec,
            depth: 0,
            ctor_path: None,
            binder: None,
        }
    }

    pub fn op(&mut self, op: Op, inputs: &[&Tensor]) -> RtResult<Tensor> {
        self.exec.run(&op, inputs).map_err(RtError::from)
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
        let r = self.expr_inner(e, ctx);
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
                        if b.saturating_sub(a) > 1 << 24 {
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

    fn unary(&mut self, op: UnOp, v: Value) -> RtResult<Value> {
        Ok(match (op, v) {
            (UnOp::Neg, Value::Int(i)) => Value::Int(
                i.checked_neg()
                    .ok_or_else(|| RtError::msg("integer overflow"))?,
            ),
            (UnOp::Neg, Value::Float(f)) => Value::Float(-f),
            (UnOp::Neg, Value::Tensor(t)) => {
                Value::Tensor(self.op(Op::Unary(mllm_backends::UnaryOp::Neg), &[&t])?)
            }
            (UnOp::Not, v @ (Value::Bool(_) | Value::None)) => Value::Bool(!truthy(&v)?),
            (op, v) => {
                let sym = if op == UnOp::Neg { "-" } else { "!" };
                return Err(RtError::new(
                    "mdl::run::type",
                    format!("cannot apply `{sym}` to a {}", v.type_name()),
                ));
            }
        })
    }

    /// Turns a number into a 0-d tensor matching `like`'s kind (i32 stays i32
    /// for ints, f32 otherwise), made through the executor.
    pub(crate) fn scalar_tensor(&mut self, v: &Value, like: &Tensor) -> RtResult<Option<Tensor>> {
        let t = match v {
            Value::Int(i) if like.dtype() == DType::I32 => {
                i32::try_from(*i).ok().map(Tensor::scalar_i32)
            }
            Value::Int(i) => Some(Tensor::scalar_f32(*i as f32)),
            Value::Float(f) => Some(Tensor::scalar_f32(*f as f32)),
            Value::Bool(b) => Some(Tensor::scalar_f32(if *b { 1.0 } else { 0.0 })),
            _ => None,
        };
        t.map(|t| self.exec.constant(t).map_err(RtError::from))
            .transpose()
    }

    /// A view of `t` in a new shape, through the executor.
    pub(crate) fn reshape(&mut self, t: &Tensor, shape: Vec<usize>) -> RtResult<Tensor> {
        self.op(Op::Reshape { shape }, &[t])
    }

    /// An int from a script value; a one-element i32 tensor is read back
    /// through the executor.
    pub(crate) fn int_of(&mut self, v: &Value) -> RtResult<i64> {
        match v {
            Value::Tensor(t) if t.numel() == 1 && t.dtype() == DType::I32 => {
                let host = self.exec.read(t)?;
                Ok(host.i32s()?[0] as i64)
            }
            other => as_int(other),
        }
    }

    pub(crate) fn binary(&mut self, op: BinOp, a: Value, b: Value) -> RtResult<Value> {
        use Value::*;
        let type_err = |a: &Value, b: &Value| {
            RtError::new(
                "mdl::run::type",
                format!(
                    "cannot apply `{}` to a {} and a {}",
                    op.symbol(),
                    a.type_name(),
                    b.type_name()
                ),
            )
        };
        match (&a, &b) {
            (Int(x), Int(y)) => int_op(op, *x, *y),
            (Int(_) | Float(_), Int(_) | Float(_)) => {
                let (x, y) = (num(&a), num(&b));
                Ok(match op {
                    BinOp::Add => Float(x + y),
                    BinOp::Sub => Float(x - y),
                    BinOp::Mul => Float(x * y),
                    BinOp::Div => Float(x / y),
                    BinOp::FloorDiv => Float((x / y).floor()),
                    BinOp::Rem => Float(x - y * (x / y).floor()),
                    BinOp::Pow => Float(x.powf(y)),
                    BinOp::Eq => Bool(x == y),
                    BinOp::Ne => Bool(x != y),
                    BinOp::Lt => Bool(x < y),
                    BinOp::Le => Bool(x <= y),
                    BinOp::Gt => Bool(x > y),
                    BinOp::Ge => Bool(x >= y),
                    _ => return Err(type_err(&a, &b)),
                })
            }
            (Bool(x), Bool(y)) => match op {
                BinOp::Eq => Ok(Bool(x == y)),
                BinOp::Ne => Ok(Bool(x != y)),
                _ => Err(type_err(&a, &b)),
            },
            (Str(x), Str(y)) => match op {
                BinOp::Add => Ok(Str(format!("{x}{y}").into())),
                BinOp::Eq => Ok(Bool(x == y)),
                BinOp::Ne => Ok(Bool(x != y)),
                _ => Err(type_err(&a, &b)),
            },
            (None, _) | (_, None) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                let same = a.is_none() == b.is_none();
                Ok(Bool(if op == BinOp::Eq { same } else { !same }))
            }
            (List(_) | Tuple(_), List(_) | Tuple(_)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                let same = values_equal(&a, &b).ok_or_else(|| type_err(&a, &b))?;
                Ok(Bool(same == (op == BinOp::Eq)))
            }
            (List(x), List(y)) if op == BinOp::Add => {
                Ok(List(Rc::new(x.iter().chain(y.iter()).cloned().collect())))
            }
            (Tensor(_), _) | (_, Tensor(_)) => {
                let (ta, tb) = match (&a, &b) {
                    (Tensor(x), Tensor(y)) => (x.clone(), y.clone()),
                    (Tensor(x), other) => (
                        x.clone(),
                        self.scalar_tensor(other, x)?
                            .ok_or_else(|| type_err(&a, &b))?,
                    ),
                    (other, Tensor(y)) => (
                        self.scalar_tensor(other, y)?
                            .ok_or_else(|| type_err(&a, &b))?,
                        y.clone(),
                    ),
                    _ => unreachable!("one side is a tensor"),
                };
                let bop = match op {
                    BinOp::MatMul => return Ok(Tensor(self.op(Op::Matmul, &[&ta, &tb])?)),
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::Mul => BinaryOp::Mul,
                    BinOp::Div => {
                        // `/` is true division, as in Python: ints become floats.
                        let f32 = Op::Cast { dtype: DType::F32 };
                        let ta = self.op(f32.clone(), &[&ta])?;
                        let tb = self.op(f32, &[&tb])?;
                        return Ok(Tensor(self.op(Op::Binary(BinaryOp::Div), &[&ta, &tb])?));
                    }
                    BinOp::FloorDiv if ta.dtype() == DType::I32 && tb.dtype() == DType::I32 => {
                        BinaryOp::Div
                    }
                    BinOp::Pow => BinaryOp::Pow,
                    BinOp::Eq => BinaryOp::Eq,
                    BinOp::Ne => BinaryOp::Ne,
                    BinOp::Lt => BinaryOp::Lt,
                    BinOp::Le => BinaryOp::Le,
                    BinOp::Gt => BinaryOp::Gt,
                    BinOp::Ge => BinaryOp::Ge,
                    _ => return Err(type_err(&a, &b)),
                };
                Ok(Tensor(self.op(Op::Binary(bop), &[&ta, &tb])?))
            }
            _ => Err(type_err(&a, &b)),
        }
    }

    fn index(&mut self, base: Value, items: &[IndexItem], ctx: &mut Ctx) -> RtResult<Value> {
        match base {
            Value::List(v) | Value::Tuple(v) => {
                let [item] = items else {
                    return Err(RtError::new("mdl::run::index", "lists take one index"));
                };
                match item {
                    IndexItem::Expr(e) => {
                        let i = self.expr(e, ctx)?;
                        let i = self.int_of(&i)?;
                        let n = v.len() as i64;
                        let j = if i < 0 { i + n } else { i };
                        if !(0..n).contains(&j) {
                            return Err(RtError::new(
                                "mdl::run::index",
                                format!("index {i} is out of range for {n} items"),
                            ));
                        }
                        Ok(v[j as usize].clone())
                    }
                    IndexItem::Slice(a, b, s) => {
                        let (start, end, step) = self.slice_bounds(a, b, s, v.len(), ctx)?;
                        Ok(Value::List(Rc::new(
                            (start..end).step_by(step).map(|i| v[i].clone()).collect(),
                        )))
                    }
                    IndexItem::Ellipsis => Err(RtError::new(
                        "mdl::run::index",
                        "`...` applies to tensors only",
                    )),
                }
            }
            Value::Tensor(t) => self.index_tensor(t, items, ctx),
            other => Err(RtError::new(
                "mdl::run::index",
                format!("a {} cannot be indexed", other.type_name()),
            )),
        }
    }

    fn slice_bounds(
        &mut self,
        a: &Option<Expr>,
        b: &Option<Expr>,
        s: &Option<Expr>,
        n: usize,
        ctx: &mut Ctx,
    ) -> RtResult<(usize, usize, usize)> {
        let n = n as i64;
        let mut bound = |e: &Option<Expr>, dflt: i64, this: &mut Self| -> RtResult<i64> {
            match e {
                None => Ok(dflt),
                Some(e) => {
                    let v = this.expr(e, ctx)?;
                    if v.is_none() {
                        return Ok(dflt);
                    }
                    let i = this.int_of(&v)?;
                    Ok(if i < 0 { (i + n).max(0) } else { i.min(n) })
                }
            }
        };
        let start = bound(a, 0, self)?;
        let end = bound(b, n, self)?;
        let step = bound(s, 1, self)?;
        if step <= 0 {
            return Err(RtError::new(
                "mdl::run::index",
                "slice step must be positive",
            ));
        }
        Ok((start as usize, (end.max(start)) as usize, step as usize))
    }

    fn index_tensor(
        &mut self,
        mut t: Tensor,
        items: &[IndexItem],
        ctx: &mut Ctx,
    ) -> RtResult<Value> {
        let explicit = items
            .iter()
            .filter(|i| !matches!(i, IndexItem::Ellipsis))
            .count();
        if items
            .iter()
            .filter(|i| matches!(i, IndexItem::Ellipsis))
            .count()
            > 1
        {
            return Err(RtError::new(
                "mdl::run::index",
                "at most one `...` per index",
            ));
        }
        if explicit > t.rank() {
            return Err(RtError::new(
                "mdl::run::index",
                format!("{explicit} indexes for a tensor of rank {}", t.rank()),
            ));
        }
        // `...` stands for the dimensions no explicit item names, counted on
        // the rank before any integer index removes one.
        let ellipsis_dims = t.rank() - explicit;
        let mut dim = 0usize;
        for item in items {
            match item {
                IndexItem::Ellipsis => dim += ellipsis_dims,
                IndexItem::Expr(e) => {
                    let v = self.expr(e, ctx)?;
                    let n = t.shape()[dim] as i64;
                    let i = self.int_of(&v)?;
                    let j = if i < 0 { i + n } else { i };
                    if !(0..n).contains(&j) {
                        return Err(RtError::new(
                            "mdl::run::index",
                            format!("index {i} is out of range for a dimension of size {n}"),
                        ));
                    }
                    let j = j as usize;
                    let s = self.op(
                        Op::Slice {
                            dim,
                            start: j,
                            end: j + 1,
                            step: 1,
                        },
                        &[&t],
                    )?;
                    let mut shape = s.shape().to_vec();
                    shape.remove(dim);
                    t = self.reshape(&s, shape)?;
                }
                IndexItem::Slice(a, b, s) => {
                    let (start, end, step) = self.slice_bounds(a, b, s, t.shape()[dim], ctx)?;
                    if !(start == 0 && end == t.shape()[dim] && step == 1) {
                        t = self.op(
                            Op::Slice {
                                dim,
                                start,
                                end,
                                step,
                            },
                            &[&t],
                        )?;
                    }
                    dim += 1;
                }
            }
        }
        Ok(Value::Tensor(t))
    }

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
                            source: c.source,
                        };
                        self.expr(d, &mut ctx)?
                    }
                    None => match &f.ty {
                        Ty::Optional(_) => Value::None,
                        _ => return Err(missing(&f.name).at(c.source, f.span)),
                    },
                },
            };
            fields.push(v);
        }
        Ok(Rc::new(ConfigValue { config: ci, fields }))
    }
}

/// Python's `==` on plain values: lists and tuples item by item, ints and
/// floats by value; `None` when an item is not comparable (a tensor).
fn values_equal(a: &Value, b: &Value) -> Option<bool> {
    use Value::*;
    Some(match (a, b) {
        (List(x) | Tuple(x), List(y) | Tuple(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                if !values_equal(p, q)? {
                    return Some(false);
                }
            }
            true
        }
        (Int(_) | Float(_), Int(_) | Float(_)) => num(a) == num(b),
        (Bool(x), Bool(y)) => x == y,
        (Str(x), Str(y)) => x == y,
        (None, None) => true,
        (Tensor(_), _) | (_, Tensor(_)) => return Option::None,
        _ => false,
    })
}

fn num(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        _ => f64::NAN,
    }
}

pub(crate) fn as_int(v: &Value) -> RtResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9e15 => Ok(*f as i64),
        other => Err(RtError::new(
            "mdl::run::type",
            format!("expected an int, found {}", other.type_name()),
        )),
    }
}

fn int_op(op: BinOp, x: i64, y: i64) -> RtResult<Value> {
    let overflow = || RtError::msg("integer overflow");
    Ok(match op {
        BinOp::Add => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
        BinOp::Sub => Value::Int(x.checked_sub(y).ok_or_else(overflow)?),
        BinOp::Mul => Value::Int(x.checked_mul(y).ok_or_else(overflow)?),
        BinOp::Div => Value::Float(x as f64 / y as f64),
        BinOp::FloorDiv | BinOp::Rem if y == 0 => {
            return Err(RtError::msg("integer division by zero"))
        }
        BinOp::FloorDiv => {
            Value::Int(x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 })
        }
        BinOp::Rem => Value::Int(
            x - y * (x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 }),
        ),
        BinOp::Pow if y >= 0 => Value::Int(
            x.checked_pow(u32::try_from(y).map_err(|_| overflow())?)
                .ok_or_else(overflow)?,
        ),
        BinOp::Pow => Value::Float((x as f64).powf(y as f64)),
        BinOp::Eq => Value::Bool(x == y),
        BinOp::Ne => Value::Bool(x != y),
        BinOp::Lt => Value::Bool(x < y),
        BinOp::Le => Value::Bool(x <= y),
        BinOp::Gt => Value::Bool(x > y),
        BinOp::Ge => Value::Bool(x >= y),
        _ => {
            return Err(RtError::new(
                "mdl::run::type",
                format!("cannot apply `{}` to ints", op.symbol()),
            ))
        }
    })
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
