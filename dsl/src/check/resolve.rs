//! Resolving declarations and bodies: types, configs, module members,
//! function parameters, blocks, patterns and statements.

use super::*;
use crate::ast;
use crate::diagnostic::{Diagnostic, SourceId};

impl Checker {
    // ------------------------------------------------------------ resolving

    pub(super) fn resolve_all(&mut self) {
        let mut state = vec![0u8; self.configs.len()];
        for ci in 0..self.configs.len() {
            self.resolve_config_after_deps(ci, &mut state);
        }
        for mi in 0..self.modules.len() {
            let (fid, ii) = self.module_ast[mi];
            let ast::Item::Module(m) = self.files[fid].items[ii].clone() else {
                continue;
            };
            self.resolve_module(mi, fid, &m);
        }
        for fi in 0..self.fns.len() {
            let (fid, ii) = self.fn_ast[fi];
            let ast::Item::Fn(f) = self.files[fid].items[ii].clone() else {
                continue;
            };
            self.fns[fi] = self.resolve_fn(&f, fid, None);
        }
    }

    /// Resolves config `ci` after the configs it extends and those its
    /// fields are typed with (whose fields its defaults may read, e.g. an
    /// inherited `rope_parameters.rope_theta` in a file importing both);
    /// `state`: 0 not yet, 1 under way (a cycle, reported elsewhere), 2 done.
    fn resolve_config_after_deps(&mut self, ci: usize, state: &mut [u8]) {
        if state[ci] != 0 {
            return;
        }
        state[ci] = 1;
        let (fid, ii) = self.config_ast[ci];
        let ast::Item::Config(c) = self.files[fid].items[ii].clone() else {
            state[ci] = 2;
            return;
        };
        let names = c.bases.iter().map(|b| b.name.clone());
        let types = c.fields.iter().flat_map(|f| {
            let mut t = Some(&f.ty);
            std::iter::from_fn(move || {
                let cur = t?;
                t = cur.arg.as_deref();
                Some(cur.name.name.clone())
            })
        });
        let deps: Vec<usize> = names
            .chain(types)
            .filter_map(|n| match self.lookup_qualified(fid, &n) {
                Some(Global::Config(j)) => Some(j),
                _ => None,
            })
            .collect();
        for j in deps {
            self.resolve_config_after_deps(j, state);
        }
        self.resolve_config(ci, fid, &c);
        state[ci] = 2;
    }

    pub(super) fn resolve_type(&mut self, t: &ast::TypeExpr, fid: SourceId) -> Ty {
        let base = match t.name.name.as_str() {
            "int" => Ty::Int,
            "float" => Ty::Float,
            "bool" => Ty::Bool,
            "str" => Ty::Str,
            "tensor" => Ty::Tensor,
            "any" => Ty::Any,
            "list" => Ty::List(Box::new(match &t.arg {
                Some(a) => self.resolve_type(a, fid),
                None => Ty::Any,
            })),
            other => match self.lookup_qualified(fid, other) {
                Some(Global::Config(i)) => Ty::Config(i),
                _ => {
                    let cands: Vec<String> =
                        ["int", "float", "bool", "str", "tensor", "any", "list"]
                            .iter()
                            .map(|s| s.to_string())
                            .chain(
                                self.globals[fid]
                                    .iter()
                                    .filter(|(_, g)| matches!(g, Global::Config(_)))
                                    .map(|(n, _)| n.clone()),
                            )
                            .collect();
                    let mut d = Diagnostic::new(
                        "mdl::check::unknown_type",
                        fid,
                        format!("unknown type `{other}`"),
                    )
                    .label(t.name.span, "not a builtin type or a config in scope");
                    d = d.help(suggest(other, cands.iter().map(|s| s.as_str())).unwrap_or_else(|| "types are int, float, bool, str, tensor, any, list[T] or a config name".into()));
                    self.err(d);
                    Ty::Any
                }
            },
        };
        if t.optional {
            Ty::Optional(Box::new(base))
        } else {
            base
        }
    }

    pub(super) fn fn_params(
        &mut self,
        params: &[ast::Param],
        scope: &mut Scope,
        default_scope_file: SourceId,
    ) -> Vec<FnParam> {
        let _ = default_scope_file;
        let mut out = vec![];
        for p in params {
            let ty = p.ty.as_ref().map(|t| self.resolve_type(t, scope.file));
            let default = p.default.as_ref().map(|e| self.expr(e, scope).0);
            if out.iter().any(|q: &FnParam| q.name == p.name.name) {
                self.err(
                    Diagnostic::new(
                        "mdl::check::duplicate",
                        scope.file,
                        format!("parameter `{}` is declared twice", p.name.name),
                    )
                    .label(p.name.span, "second declaration"),
                );
            }
            let sty = match &ty {
                Some(Ty::Config(i)) => SType::Config(*i),
                _ => SType::Unknown,
            };
            scope.bind(&p.name.name, sty);
            let sym = self.syms.intern(&p.name.name);
            out.push(FnParam {
                name: p.name.name.clone(),
                sym,
                ty,
                default,
                span: p.span,
            });
        }
        out
    }

    pub(super) fn resolve_module(&mut self, mi: usize, fid: SourceId, m: &ast::ModuleDecl) {
        let mut scope = Scope::new(fid, ScopeKind::Ctor(mi));
        self.modules[mi].params = self.fn_params(&m.params, &mut scope, fid);
        // Namespace tree first, so functions can resolve member paths.
        let mut ns = vec![NsNode::default()];
        for (idx, mem) in m.members.iter().enumerate() {
            let mut node = 0;
            for (depth, part) in mem.path.iter().enumerate() {
                let sym = self.syms.intern(&part.name);
                let last = depth + 1 == mem.path.len();
                match (ns[node].find(sym), last) {
                    (None, true) => ns[node].entries.push((sym, NsEntry::Member(idx))),
                    (None, false) => {
                        ns.push(NsNode::default());
                        let n = ns.len() - 1;
                        ns[node].entries.push((sym, NsEntry::Node(n)));
                        node = n;
                    }
                    (Some(NsEntry::Node(n)), false) => node = n,
                    _ => {
                        self.err(
                            Diagnostic::new(
                                "mdl::check::duplicate",
                                fid,
                                format!(
                                    "member `{}` is declared twice",
                                    mem.path
                                        .iter()
                                        .map(|p| p.name.as_str())
                                        .collect::<Vec<_>>()
                                        .join(".")
                                ),
                            )
                            .label(part.span, "already declared in this module"),
                        );
                        break;
                    }
                }
            }
        }
        self.modules[mi].ns = ns;
        let mut members = vec![];
        for mem in &m.members {
            let mark = scope.locals.len();
            let cond = mem.cond.as_ref().map(|e| self.expr(e, &mut scope).0);
            let kind = match &mem.kind {
                ast::MemberKind::Param { shape } => MemberKind::Param {
                    shape: shape.iter().map(|e| self.expr(e, &mut scope).0).collect(),
                },
                ast::MemberKind::Value(e) => MemberKind::Value(self.expr(e, &mut scope).0),
                ast::MemberKind::Let(e) => MemberKind::Let {
                    value: self.expr(e, &mut scope).0,
                    slot: 0,
                },
            };
            scope.locals.truncate(mark);
            // A `let` is a local of the members below it, too.
            let kind = match kind {
                MemberKind::Let { value, .. } => MemberKind::Let {
                    value,
                    slot: scope.bind(&mem.path[0].name, SType::Unknown),
                },
                k => k,
            };
            let path: Vec<String> = mem.path.iter().map(|p| p.name.clone()).collect();
            let module_ty = match self.module_info[mi].members.get(&path) {
                Some(SType::Module(j)) => Some(*j),
                _ => None,
            };
            members.push(Member {
                path,
                kind,
                cond,
                span: mem.span,
                module_ty,
            });
        }
        self.modules[mi].members = members;
        if let Some(e) = &m.alias {
            self.modules[mi].alias = Some(self.expr(e, &mut scope).0);
        }
        self.modules[mi].ctor_frame = scope.frame;
        let mut fns = vec![];
        for f in &m.fns {
            if fns.iter().any(|g: &Function| g.name == f.name.name) {
                self.err(
                    Diagnostic::new(
                        "mdl::check::duplicate",
                        fid,
                        format!("fn `{}` is defined twice", f.name.name),
                    )
                    .label(f.name.span, "second definition"),
                );
            }
            fns.push(self.resolve_fn(f, fid, Some(mi)));
        }
        self.modules[mi].fns = fns;
    }

    pub(super) fn resolve_fn(
        &mut self,
        f: &ast::FnDecl,
        fid: SourceId,
        module: Option<usize>,
    ) -> Function {
        let mut scope = Scope::new(fid, ScopeKind::Fn(module));
        let params = self.fn_params(&f.params, &mut scope, fid);
        let body = self.block(&f.body, &mut scope);
        Function {
            name: f.name.name.clone(),
            params,
            body,
            frame: scope.frame,
            source: fid,
            span: f.span,
        }
    }

    pub(super) fn block(&mut self, b: &ast::Block, scope: &mut Scope) -> Vec<Stmt> {
        let mark = scope.locals.len();
        let out = b.stmts.iter().map(|s| self.stmt(s, scope)).collect();
        scope.locals.truncate(mark);
        out
    }

    pub(super) fn pattern(&mut self, p: &ast::Pattern, scope: &mut Scope, ty: SType) -> Pattern {
        match p {
            ast::Pattern::Name(i) => Pattern::Slot(scope.bind(&i.name, ty)),
            ast::Pattern::Tuple(ps, span) => {
                // `(i, layer)` over enumerate(list of modules): type the second.
                let tys: Vec<SType> = match (&ty, ps.len()) {
                    (SType::Module(j), 2) if matches!(ty, SType::Module(_)) => {
                        vec![SType::Unknown, SType::Module(*j)]
                    }
                    _ => vec![SType::Unknown; ps.len()],
                };
                Pattern::Tuple(
                    ps.iter()
                        .zip(tys)
                        .map(|(q, t)| self.pattern(q, scope, t))
                        .collect(),
                    *span,
                )
            }
        }
    }

    pub(super) fn stmt(&mut self, s: &ast::Stmt, scope: &mut Scope) -> Stmt {
        let kind = match &s.kind {
            ast::StmtKind::Let(p, e) => {
                let (e, ty) = self.expr(e, scope);
                StmtKind::Let(self.pattern(p, scope, ty), e)
            }
            ast::StmtKind::Assign(name, op, e) => {
                let (e, _) = self.expr(e, scope);
                match scope.lookup(&name.name) {
                    Some((slot, _)) => StmtKind::Assign(slot, *op, e),
                    None => {
                        self.err(
                            Diagnostic::new("mdl::check::not_assignable", scope.file, format!("`{}` is not a local variable", name.name))
                                .label(name.span, "assignment to an undeclared name")
                                .help(format!("declare it first with `let {} = ...`; members and config fields cannot be reassigned", name.name)),
                        );
                        StmtKind::Expr(e)
                    }
                }
            }
            ast::StmtKind::For(p, iter, body) => {
                let (it, ity) = self.expr(iter, scope);
                let elem_ty = match (&ity, &iter.kind) {
                    (SType::ModuleList(j), _) => SType::Module(*j),
                    _ => self.enumerate_elem(iter, scope),
                };
                let mark = scope.locals.len();
                let pat = self.pattern(p, scope, elem_ty);
                let body = self.block(body, scope);
                scope.locals.truncate(mark);
                StmtKind::For(pat, it, body)
            }
            ast::StmtKind::If(branches, els) => {
                let bs = branches
                    .iter()
                    .map(|(c, b)| (self.expr(c, scope).0, self.block(b, scope)))
                    .collect();
                StmtKind::If(bs, els.as_ref().map(|b| self.block(b, scope)))
            }
            ast::StmtKind::Return(e) => StmtKind::Return(e.as_ref().map(|e| self.expr(e, scope).0)),
            ast::StmtKind::Expr(e) => StmtKind::Expr(self.expr(e, scope).0),
        };
        Stmt { kind, span: s.span }
    }

    /// For `enumerate(xs)` where `xs` is a list of modules, the module type
    /// (the pattern binder gives it to the second element).
    pub(super) fn enumerate_elem(&mut self, iter: &ast::Expr, scope: &mut Scope) -> SType {
        if let ast::ExprKind::Call(callee, args) = &iter.kind {
            if matches!(&callee.kind, ast::ExprKind::Name(n) if n == "enumerate" && scope.lookup(n).is_none())
                && args.len() == 1
            {
                let mut probe = Scope {
                    file: scope.file,
                    kind: scope.kind,
                    locals: scope.locals.clone(),
                    frame: scope.frame,
                };
                let n = self.diags.len();
                let (_, t) = self.expr(&args[0].value, &mut probe);
                self.diags.truncate(n);
                if let SType::ModuleList(j) = t {
                    return SType::Module(j);
                }
            }
        }
        SType::Unknown
    }
}
