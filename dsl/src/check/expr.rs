//! Expressions: names to slots, members and globals (with "did you mean"),
//! attributes of configs, modules and member namespaces.

use super::*;
use crate::ast;
use crate::builtins::{Builtin, BUILTINS};
use crate::diagnostic::{Diagnostic, SourceId};
use crate::span::Span;

impl Checker {
    pub(super) fn expr(&mut self, e: &ast::Expr, scope: &mut Scope) -> (Expr, SType) {
        let span = e.span;
        let mk = |kind| Expr { kind, span };
        match &e.kind {
            ast::ExprKind::Int(v) => (mk(ExprKind::Lit(Lit::Int(*v))), SType::Unknown),
            ast::ExprKind::Float(v) => (mk(ExprKind::Lit(Lit::Float(*v))), SType::Unknown),
            ast::ExprKind::Bool(v) => (mk(ExprKind::Lit(Lit::Bool(*v))), SType::Unknown),
            ast::ExprKind::Str(s) => (
                mk(ExprKind::Lit(Lit::Str(s.as_str().into()))),
                SType::Unknown,
            ),
            ast::ExprKind::None => (mk(ExprKind::Lit(Lit::None)), SType::Unknown),
            ast::ExprKind::Name(n) => {
                let (kind, ty) = self.name(n, span, scope);
                (mk(kind), ty)
            }
            ast::ExprKind::Unary(op, x) => {
                let (x, _) = self.expr(x, scope);
                (mk(ExprKind::Unary(*op, Box::new(x))), SType::Unknown)
            }
            ast::ExprKind::Binary(op, a, b) => {
                let (a, _) = self.expr(a, scope);
                let (b, _) = self.expr(b, scope);
                (
                    mk(ExprKind::Binary(*op, Box::new(a), Box::new(b))),
                    SType::Unknown,
                )
            }
            ast::ExprKind::Range(a, b) => {
                let (a, _) = self.expr(a, scope);
                let (b, _) = self.expr(b, scope);
                (
                    mk(ExprKind::Range(Box::new(a), Box::new(b))),
                    SType::Unknown,
                )
            }
            ast::ExprKind::Attr(base, name) => {
                let (b, bty) = self.expr(base, scope);
                self.attr(b, bty, name, span, scope)
            }
            ast::ExprKind::Call(callee, args) => self.call(callee, args, span, scope),
            ast::ExprKind::Index(base, items) => {
                let (b, bty) = self.expr(base, scope);
                let items = items
                    .iter()
                    .map(|i| match i {
                        ast::IndexItem::Expr(x) => IndexItem::Expr(self.expr(x, scope).0),
                        ast::IndexItem::Slice(a, b, c) => IndexItem::Slice(
                            a.as_ref().map(|x| self.expr(x, scope).0),
                            b.as_ref().map(|x| self.expr(x, scope).0),
                            c.as_ref().map(|x| self.expr(x, scope).0),
                        ),
                        ast::IndexItem::Ellipsis(_) => IndexItem::Ellipsis,
                    })
                    .collect::<Vec<_>>();
                let ty = match (&bty, items.as_slice()) {
                    (SType::ModuleList(j), [IndexItem::Expr(_)]) => SType::Module(*j),
                    _ => SType::Unknown,
                };
                (mk(ExprKind::Index(Box::new(b), items)), ty)
            }
            ast::ExprKind::List(items) => {
                let items: Vec<(Expr, SType)> = items.iter().map(|x| self.expr(x, scope)).collect();
                let ty = match items.first() {
                    Some((_, SType::Module(j)))
                        if items.iter().all(|(_, t)| t == &SType::Module(*j)) =>
                    {
                        SType::ModuleList(*j)
                    }
                    _ => SType::Unknown,
                };
                (
                    mk(ExprKind::List(items.into_iter().map(|(e, _)| e).collect())),
                    ty,
                )
            }
            ast::ExprKind::Tuple(items) => {
                let items = items.iter().map(|x| self.expr(x, scope).0).collect();
                (mk(ExprKind::Tuple(items)), SType::Unknown)
            }
            ast::ExprKind::Comprehension {
                elem,
                pat,
                iter,
                cond,
            } => {
                let (iter, _) = self.expr(iter, scope);
                let mark = scope.locals.len();
                let pat = self.pattern(pat, scope, SType::Unknown);
                let cond = cond.as_ref().map(|c| Box::new(self.expr(c, scope).0));
                let (elem, ety) = self.expr(elem, scope);
                scope.locals.truncate(mark);
                let ty = match ety {
                    SType::Module(j) => SType::ModuleList(j),
                    _ => SType::Unknown,
                };
                (
                    mk(ExprKind::Comprehension {
                        elem: Box::new(elem),
                        pat,
                        iter: Box::new(iter),
                        cond,
                    }),
                    ty,
                )
            }
            ast::ExprKind::If(c, a, b) => {
                let (c, _) = self.expr(c, scope);
                let (a, ta) = self.expr(a, scope);
                let (b, tb) = self.expr(b, scope);
                let ty = if ta == tb { ta } else { SType::Unknown };
                (mk(ExprKind::If(Box::new(c), Box::new(a), Box::new(b))), ty)
            }
        }
    }

    pub(super) fn name(&mut self, n: &str, span: Span, scope: &mut Scope) -> (ExprKind, SType) {
        if let Some((slot, ty)) = scope.lookup(n) {
            return (ExprKind::Local(slot), ty);
        }
        match scope.kind {
            ScopeKind::Fn(Some(mi)) => {
                if let Some(sym) = self.syms.get(n) {
                    match self.modules[mi].ns[0].find(sym) {
                        Some(NsEntry::Member(idx)) => {
                            let ty = self.module_info[mi]
                                .members
                                .get(&vec![n.to_string()])
                                .cloned()
                                .unwrap_or(SType::Unknown);
                            return (ExprKind::Member(idx), ty);
                        }
                        Some(NsEntry::Node(node)) => {
                            return (ExprKind::MemberNs(node), SType::Ns(mi, node))
                        }
                        None => {}
                    }
                }
                if let Some(i) = self.modules[mi].params.iter().position(|p| p.name == n) {
                    let ty = match &self.modules[mi].params[i].ty {
                        Some(Ty::Config(c)) => SType::Config(*c),
                        _ => SType::Unknown,
                    };
                    return (ExprKind::CtorArg(i), ty);
                }
            }
            ScopeKind::Config(ci, upto) => {
                if let Some(i) = self.configs[ci]
                    .fields
                    .iter()
                    .take(upto)
                    .position(|f| f.name == n)
                {
                    let ty = match &self.configs[ci].fields[i].ty {
                        Ty::Config(c) => SType::Config(*c),
                        _ => SType::Unknown,
                    };
                    return (ExprKind::ConfigField(i), ty);
                }
            }
            _ => {}
        }
        if let Some(g) = self.globals[scope.file].get(n).copied() {
            let ty = match g {
                Global::Namespace(f) => SType::Namespace(f),
                _ => SType::Unknown,
            };
            return (ExprKind::Global(g), ty);
        }
        if let Some(b) = Builtin::lookup(n) {
            return (ExprKind::Builtin(b), SType::Unknown);
        }
        let mut cands: Vec<String> = scope.locals.iter().map(|(n, _, _)| n.clone()).collect();
        cands.extend(self.globals[scope.file].keys().cloned());
        cands.extend(BUILTINS.iter().map(|(_, s)| s.name.to_string()));
        let mut label = "not a local, member, parameter, global or builtin".to_string();
        match scope.kind {
            ScopeKind::Fn(Some(mi)) => {
                cands.extend(
                    self.modules[mi].ns[0]
                        .entries
                        .iter()
                        .map(|(s, _)| self.syms.name(*s).to_string()),
                );
                cands.extend(self.modules[mi].params.iter().map(|p| p.name.clone()));
            }
            ScopeKind::Ctor(mi) if self.module_info[mi].members.keys().any(|p| p[0] == n) => {
                label = "members are not visible while members are declared".into();
            }
            ScopeKind::Config(ci, upto) => cands.extend(
                self.configs[ci]
                    .fields
                    .iter()
                    .take(upto)
                    .map(|f| f.name.clone()),
            ),
            _ => {}
        }
        let help = suggest(n, cands.iter().map(|s| s.as_str())).unwrap_or_else(|| {
            "declare it with `let`, as a module member, or import the file that defines it".into()
        });
        self.err(
            Diagnostic::new(
                "mdl::check::unknown_name",
                scope.file,
                format!("unknown name `{n}`"),
            )
            .label(span, label)
            .help(help),
        );
        (ExprKind::Lit(Lit::None), SType::Unknown)
    }

    /// Entries of a module's member namespace node, for messages.
    pub(super) fn ns_names(&self, mi: usize, node: usize) -> Vec<String> {
        self.modules[mi].ns.get(node).map_or(vec![], |n| {
            n.entries
                .iter()
                .map(|(s, _)| self.syms.name(*s).to_string())
                .collect()
        })
    }

    /// Static view of `module mi`'s namespace node: looks `name` up among
    /// the module's member paths (known from the AST before resolution).
    pub(super) fn ns_lookup(&self, mi: usize, prefix: &[String], name: &str) -> Option<SType> {
        let mut path = prefix.to_vec();
        path.push(name.to_string());
        if let Some(t) = self.module_info[mi].members.get(&path) {
            return Some(t.clone());
        }
        let is_node = self.module_info[mi]
            .members
            .keys()
            .any(|p| p.len() > path.len() && p[..path.len()] == path[..]);
        is_node.then_some(SType::Unknown)
    }

    pub(super) fn node_path(&self, mi: usize, node: usize) -> Vec<String> {
        // Walk the tree to find the path of `node`.
        fn walk(
            m: &Module,
            syms: &Interner,
            at: usize,
            target: usize,
            acc: &mut Vec<String>,
        ) -> bool {
            if at == target {
                return true;
            }
            for (s, e) in &m.ns[at].entries {
                if let NsEntry::Node(n) = e {
                    acc.push(syms.name(*s).to_string());
                    if walk(m, syms, *n, target, acc) {
                        return true;
                    }
                    acc.pop();
                }
            }
            false
        }
        let mut acc = vec![];
        walk(&self.modules[mi], &self.syms, 0, node, &mut acc);
        acc
    }

    pub(super) fn attr(
        &mut self,
        b: Expr,
        bty: SType,
        name: &ast::Ident,
        span: Span,
        scope: &mut Scope,
    ) -> (Expr, SType) {
        let sym = self.syms.intern(&name.name);
        let mk = |kind| Expr { kind, span };
        match bty {
            SType::Namespace(f) => match self.globals[f].get(&name.name).copied() {
                Some(g) => {
                    let ty = if let Global::Namespace(f2) = g {
                        SType::Namespace(f2)
                    } else {
                        SType::Unknown
                    };
                    (mk(ExprKind::Global(g)), ty)
                }
                None => {
                    let cands: Vec<String> = self.globals[f].keys().cloned().collect();
                    let help = suggest(&name.name, cands.iter().map(|s| s.as_str()))
                        .unwrap_or_else(|| {
                            format!("`{}` defines: {}", self.sources.name(f), cands.join(", "))
                        });
                    self.err(
                        Diagnostic::new(
                            "mdl::check::unknown_name",
                            scope.file,
                            format!(
                                "`{}` is not defined in `{}`",
                                name.name,
                                self.sources.name(f)
                            ),
                        )
                        .label(name.span, "not found in the imported file")
                        .help(help),
                    );
                    (mk(ExprKind::Lit(Lit::None)), SType::Unknown)
                }
            },
            SType::Config(ci) => match self
                .configs
                .get(ci)
                .and_then(|c| c.fields.iter().position(|f| f.name == name.name))
            {
                Some(i) => {
                    let ty = match &self.configs[ci].fields[i].ty {
                        Ty::Config(c) => SType::Config(*c),
                        Ty::Optional(t) => match &**t {
                            Ty::Config(c) => SType::Config(*c),
                            _ => SType::Unknown,
                        },
                        _ => SType::Unknown,
                    };
                    (mk(ExprKind::Attr(Box::new(b), sym)), ty)
                }
                None => {
                    // Fields may not be resolved yet (configs resolve in order); check the AST.
                    let (fid, ii) = self.config_ast[ci];
                    let known: Vec<String> = match &self.files[fid].items[ii] {
                        ast::Item::Config(c) => {
                            c.fields.iter().map(|f| f.name.name.clone()).collect()
                        }
                        _ => vec![],
                    };
                    if !known.contains(&name.name) {
                        let cname = self.configs[ci].name.clone();
                        let help = suggest(&name.name, known.iter().map(|s| s.as_str()))
                            .unwrap_or_else(|| {
                                format!("add `{}: <type>` to `config {cname}`", name.name)
                            });
                        self.err(
                            Diagnostic::new(
                                "mdl::check::unknown_field",
                                scope.file,
                                format!("config `{cname}` has no field `{}`", name.name),
                            )
                            .label(name.span, "not declared in the config")
                            .help(help),
                        );
                    }
                    (mk(ExprKind::Attr(Box::new(b), sym)), SType::Unknown)
                }
            },
            SType::Ns(mi, node) => {
                let prefix = self.node_path(mi, node);
                let folded_here = matches!(b.kind, ExprKind::MemberNs(_))
                    && scope.kind == ScopeKind::Fn(Some(mi));
                match self.modules[mi].ns.get(node).and_then(|n| n.find(sym)) {
                    Some(entry) => {
                        let ty = self
                            .ns_lookup(mi, &prefix, &name.name)
                            .unwrap_or(SType::Unknown);
                        let ty = match (entry, ty) {
                            (NsEntry::Node(n), _) => SType::Ns(mi, n),
                            (_, t) => t,
                        };
                        let kind = match (folded_here, entry) {
                            (true, NsEntry::Member(i)) => ExprKind::Member(i),
                            (true, NsEntry::Node(n)) => ExprKind::MemberNs(n),
                            _ => ExprKind::Attr(Box::new(b), sym),
                        };
                        (mk(kind), ty)
                    }
                    None => {
                        self.unknown_member(mi, node, &prefix, name, scope.file);
                        (mk(ExprKind::Attr(Box::new(b), sym)), SType::Unknown)
                    }
                }
            }
            SType::Module(mi) => {
                if let Some(t) = self.ns_lookup(mi, &[], &name.name) {
                    let ty = match self.modules[mi].ns[0].find(sym) {
                        Some(NsEntry::Node(n)) => SType::Ns(mi, n),
                        _ => t,
                    };
                    // Node entries of not-yet-resolved modules are unknown; keep Unknown then.
                    return (mk(ExprKind::Attr(Box::new(b), sym)), ty);
                }
                if !self.module_info[mi].fns.contains_key(&name.name) {
                    self.unknown_member(mi, 0, &[], name, scope.file);
                }
                (mk(ExprKind::Attr(Box::new(b), sym)), SType::Unknown)
            }
            _ => (mk(ExprKind::Attr(Box::new(b), sym)), SType::Unknown),
        }
    }

    pub(super) fn unknown_member(
        &mut self,
        mi: usize,
        node: usize,
        prefix: &[String],
        name: &ast::Ident,
        file: SourceId,
    ) {
        let mname = self.modules[mi].name.clone();
        let mut cands: Vec<String> = self.module_info[mi]
            .members
            .keys()
            .filter(|p| p.len() > prefix.len() && p[..prefix.len()] == *prefix)
            .map(|p| p[prefix.len()].clone())
            .collect();
        if node == 0 {
            cands.extend(self.module_info[mi].fns.keys().cloned());
        }
        cands.extend(self.ns_names(mi, node));
        cands.sort();
        cands.dedup();
        let at = if prefix.is_empty() {
            format!("module `{mname}`")
        } else {
            format!("`{}` of module `{mname}`", prefix.join("."))
        };
        let help = suggest(&name.name, cands.iter().map(|s| s.as_str()))
            .unwrap_or_else(|| format!("{at} declares: {}", cands.join(", ")));
        self.err(
            Diagnostic::new(
                "mdl::check::unknown_member",
                file,
                format!("{at} has no member `{}`", name.name),
            )
            .label(name.span, "referenced here but never declared")
            .help(help),
        );
    }
}
