//! Calls: signatures of functions, modules and builtins, argument and
//! keyword checks, arity diagnostics.

use super::*;
use crate::ast;
use crate::builtins::{Builtin, BUILTINS};
use crate::diagnostic::{Diagnostic, SourceId};
use crate::span::Span;

impl Checker {
    pub(super) fn fn_sig(&self, fi: usize) -> Sig {
        let (fid, ii) = self.fn_ast[fi];
        match &self.files[fid].items[ii] {
            ast::Item::Fn(f) => sig_of(&f.params),
            _ => Sig::default(),
        }
    }

    pub(super) fn builtin_sig(b: Builtin) -> Sig {
        let s = b.sig();
        Sig {
            params: s
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name.to_string(), i >= s.required))
                .collect(),
            variadic: s.variadic,
        }
    }

    pub(super) fn forward_sig(&mut self, mi: usize, span: Span, file: SourceId) -> Option<Sig> {
        match self.module_info[mi].fns.get("forward") {
            Some(s) => Some(s.clone()),
            None => {
                let mname = self.modules[mi].name.clone();
                self.err(
                    Diagnostic::new("mdl::check::not_callable", file, format!("module `{mname}` has no `forward`"))
                        .label(span, "called here")
                        .help(format!("add `fn forward(...)` to `module {mname}`, or call one of its functions by name")),
                );
                None
            }
        }
    }

    pub(super) fn call(
        &mut self,
        callee: &ast::Expr,
        args: &[ast::Arg],
        span: Span,
        scope: &mut Scope,
    ) -> (Expr, SType) {
        let mut pos = vec![];
        let mut kw: Vec<(Sym, Expr)> = vec![];
        let mut kw_names: Vec<ast::Ident> = vec![];
        for a in args {
            let (v, _) = self.expr(&a.value, scope);
            match &a.name {
                Some(n) => {
                    kw.push((self.syms.intern(&n.name), v));
                    kw_names.push(n.clone());
                }
                None => {
                    if !kw.is_empty() {
                        self.err(
                            Diagnostic::new(
                                "mdl::check::positional_after_keyword",
                                scope.file,
                                "positional argument after a keyword argument",
                            )
                            .label(a.value.span, "move this before the keyword arguments"),
                        );
                    }
                    pos.push(v);
                }
            }
        }
        let mk = |kind| Expr { kind, span };
        if let ast::ExprKind::Attr(recv, name) = &callee.kind {
            let (r, rty) = self.expr(recv, scope);
            match rty {
                SType::Namespace(_) | SType::Ns(..) | SType::Config(_) => {
                    let (c, cty) = self.attr(r, rty, name, callee.span, scope);
                    return self.finish_call(c, cty, pos, kw, &kw_names, span, scope);
                }
                SType::Module(mi) if self.ns_lookup(mi, &[], &name.name).is_some() => {
                    let (c, cty) = self.attr(r, rty, name, callee.span, scope);
                    return self.finish_call(c, cty, pos, kw, &kw_names, span, scope);
                }
                SType::Module(mi) => {
                    let sym = self.syms.intern(&name.name);
                    match self.module_info[mi].fns.get(&name.name).cloned() {
                        Some(sig) => self.check_args(
                            &sig,
                            pos.len(),
                            &kw_names,
                            &format!("`{}.{}`", self.modules[mi].name, name.name),
                            span,
                            scope.file,
                        ),
                        None => self.unknown_member(mi, 0, &[], name, scope.file),
                    }
                    return (
                        mk(ExprKind::Method {
                            recv: Box::new(r),
                            name: sym,
                            builtin: None,
                            args: pos,
                            kwargs: kw,
                        }),
                        SType::Unknown,
                    );
                }
                _ => {
                    let sym = self.syms.intern(&name.name);
                    let builtin = Builtin::lookup(&name.name);
                    match builtin {
                        Some(b) => self.check_args(
                            &Self::builtin_sig(b),
                            pos.len() + 1,
                            &kw_names,
                            &format!("`{}`", b.name()),
                            span,
                            scope.file,
                        ),
                        None => {
                            let known = self.module_info.iter().any(|m| {
                                m.fns.contains_key(&name.name)
                                    || m.members.keys().any(|p| p[0] == name.name)
                            });
                            if !known {
                                let cands: Vec<&str> =
                                    BUILTINS.iter().map(|(_, s)| s.name).collect();
                                let help = suggest(&name.name, cands.into_iter()).unwrap_or_else(|| "methods are builtins called on their first argument, or functions of a module".into());
                                self.err(
                                    Diagnostic::new(
                                        "mdl::check::unknown_method",
                                        scope.file,
                                        format!("unknown method `{}`", name.name),
                                    )
                                    .label(
                                        name.span,
                                        "no builtin and no module function has this name",
                                    )
                                    .help(help),
                                );
                            }
                        }
                    }
                    return (
                        mk(ExprKind::Method {
                            recv: Box::new(r),
                            name: sym,
                            builtin,
                            args: pos,
                            kwargs: kw,
                        }),
                        SType::Unknown,
                    );
                }
            }
        }
        if let Some(sig) = self.sibling_fn(callee, scope) {
            let ast::ExprKind::Name(n) = &callee.kind else {
                unreachable!("sibling_fn matches names only")
            };
            let what = format!("`{n}`");
            self.check_args(&sig, pos.len(), &kw_names, &what, span, scope.file);
            let recv = Expr {
                kind: ExprKind::SelfInstance,
                span: callee.span,
            };
            return (
                mk(ExprKind::Method {
                    recv: Box::new(recv),
                    name: self.syms.intern(n),
                    builtin: None,
                    args: pos,
                    kwargs: kw,
                }),
                SType::Unknown,
            );
        }
        let (c, cty) = self.expr(callee, scope);
        self.finish_call(c, cty, pos, kw, &kw_names, span, scope)
    }

    /// The signature of a function of the module whose function is being
    /// checked, when `callee` names one and nothing nearer (a local, a
    /// member, a constructor argument) has that name: `views(x)` calls the
    /// module's own `fn views` on the same instance.
    fn sibling_fn(&mut self, callee: &ast::Expr, scope: &Scope) -> Option<Sig> {
        let (ast::ExprKind::Name(n), ScopeKind::Fn(Some(mi))) = (&callee.kind, &scope.kind) else {
            return None;
        };
        let mi = *mi;
        let shadowed = scope.lookup(n).is_some()
            || self.ns_lookup(mi, &[], n).is_some()
            || self.modules[mi].params.iter().any(|p| &p.name == n);
        if shadowed {
            return None;
        }
        self.module_info[mi].fns.get(n).cloned()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_call(
        &mut self,
        c: Expr,
        cty: SType,
        pos: Vec<Expr>,
        kw: Vec<(Sym, Expr)>,
        kw_names: &[ast::Ident],
        span: Span,
        scope: &mut Scope,
    ) -> (Expr, SType) {
        let file = scope.file;
        let mut ty = SType::Unknown;
        match (&c.kind, &cty) {
            (ExprKind::Global(Global::Module(j)), _) => {
                let sig = self.module_info[*j].ctor.clone();
                self.check_args(
                    &sig,
                    pos.len(),
                    kw_names,
                    &format!("module `{}`", self.modules[*j].name),
                    span,
                    file,
                );
                ty = SType::Module(*j);
            }
            (ExprKind::Global(Global::Fn(j)), _) => {
                let sig = self.fn_sig(*j);
                self.check_args(
                    &sig,
                    pos.len(),
                    kw_names,
                    &format!("`{}`", self.fns[*j].name),
                    span,
                    file,
                );
            }
            (ExprKind::Global(Global::Config(j)), _)
            | (ExprKind::Global(Global::Namespace(j)), _) => {
                let what = if matches!(c.kind, ExprKind::Global(Global::Config(_))) {
                    format!("config `{}`", self.configs[*j].name)
                } else {
                    format!("imported file `{}`", self.sources.name(*j))
                };
                self.err(
                    Diagnostic::new(
                        "mdl::check::not_callable",
                        file,
                        format!("{what} cannot be called"),
                    )
                    .label(c.span, "not a function or module")
                    .help("configs are built from config.json by the runtime"),
                );
            }
            (ExprKind::Builtin(b), _) => {
                self.check_args(
                    &Self::builtin_sig(*b),
                    pos.len(),
                    kw_names,
                    &format!("`{}`", b.name()),
                    span,
                    file,
                );
            }
            (_, SType::Module(j)) => {
                if let Some(sig) = self.forward_sig(*j, c.span, file) {
                    self.check_args(
                        &sig,
                        pos.len(),
                        kw_names,
                        &format!("`{}.forward`", self.modules[*j].name),
                        span,
                        file,
                    );
                }
            }
            _ => {}
        }
        (
            Expr {
                kind: ExprKind::Call {
                    callee: Box::new(c),
                    args: pos,
                    kwargs: kw,
                },
                span,
            },
            ty,
        )
    }

    pub(super) fn check_args(
        &mut self,
        sig: &Sig,
        npos: usize,
        kw: &[ast::Ident],
        what: &str,
        span: Span,
        file: SourceId,
    ) {
        if npos > sig.params.len() && !sig.variadic {
            self.err(
                Diagnostic::new(
                    "mdl::check::arity",
                    file,
                    format!(
                        "{what} takes at most {} arguments, got {npos}",
                        sig.params.len()
                    ),
                )
                .label(span, "too many arguments")
                .help(format!(
                    "parameters: ({})",
                    sig.params
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
            return;
        }
        let mut filled: Vec<bool> = (0..sig.params.len()).map(|i| i < npos).collect();
        for k in kw {
            match sig.params.iter().position(|(n, _)| *n == k.name) {
                Some(i) if filled[i] => self.err(
                    Diagnostic::new(
                        "mdl::check::duplicate_arg",
                        file,
                        format!("argument `{}` of {what} is given twice", k.name),
                    )
                    .label(k.span, "given a second time here")
                    .help("pass each argument once, by position or by name"),
                ),
                Some(i) => filled[i] = true,
                None => {
                    let help = suggest(&k.name, sig.params.iter().map(|(n, _)| n.as_str()))
                        .unwrap_or_else(|| {
                            format!(
                                "parameters: ({})",
                                sig.params
                                    .iter()
                                    .map(|(n, _)| n.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        });
                    self.err(
                        Diagnostic::new(
                            "mdl::check::unknown_kwarg",
                            file,
                            format!("{what} has no parameter `{}`", k.name),
                        )
                        .label(k.span, "unknown keyword argument")
                        .help(help),
                    );
                }
            }
        }
        let missing: Vec<&str> = sig
            .params
            .iter()
            .zip(&filled)
            .filter(|((_, has_default), f)| !**f && !*has_default)
            .map(|((n, _), _)| n.as_str())
            .collect();
        if !missing.is_empty() {
            self.err(
                Diagnostic::new(
                    "mdl::check::arity",
                    file,
                    format!(
                        "{what} is missing argument{} {}",
                        if missing.len() > 1 { "s" } else { "" },
                        missing
                            .iter()
                            .map(|m| format!("`{m}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .label(span, "in this call")
                .help(format!(
                    "parameters: ({})",
                    sig.params
                        .iter()
                        .map(|(n, d)| if *d { format!("{n} = ...") } else { n.clone() })
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
        }
    }
}
