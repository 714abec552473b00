//! The checker: loads a script and its imports, declares every global, then
//! resolves each body into a `Program` while collecting every error it finds
//! (unknown names, wrong arity, unknown keyword arguments, unknown config
//! fields, members referenced but never declared, unknown types, duplicates).

use std::collections::HashMap;

use crate::ast;
use crate::builtins::{Builtin, BUILTINS};
use crate::diagnostic::{Diagnostic, SourceId, Sources};
use crate::parser;
use crate::program::*;
use crate::span::Span;

/// Finds the text of an imported file: `import nn` asks for `"nn"`.
pub trait Resolver {
    /// Returns a display name (a path) and the text.
    fn resolve(&self, name: &str) -> Option<(String, String)>;
}

/// Resolves nothing: scripts without imports.
pub struct NoImports;

impl Resolver for NoImports {
    fn resolve(&self, _: &str) -> Option<(String, String)> {
        None
    }
}

/// Parses and checks `text` (named `name`) with its imports. The program is
/// usable only when the diagnostics are empty.
pub fn check(name: &str, text: &str, resolver: &dyn Resolver) -> (Program, Vec<Diagnostic>) {
    let mut c = Checker::default();
    c.load(name, text, resolver);
    c.declare();
    c.resolve_all();
    let prog = Program {
        sources: std::mem::take(&mut c.sources),
        syms: std::mem::take(&mut c.syms),
        configs: std::mem::take(&mut c.configs),
        modules: std::mem::take(&mut c.modules),
        fns: std::mem::take(&mut c.fns),
        globals: std::mem::take(&mut c.globals),
        main: 0,
    };
    (prog, c.diags)
}

/// What the checker knows statically about a value.
#[derive(Clone, Debug, PartialEq)]
enum SType {
    Unknown,
    Config(usize),
    Module(usize),
    ModuleList(usize),
    /// A member namespace node of a module type.
    Ns(usize, usize),
    Namespace(SourceId),
}

#[derive(Clone, Copy, PartialEq)]
enum ScopeKind {
    Config(usize, usize),
    Ctor(usize),
    Fn(Option<usize>),
}

struct Scope {
    file: SourceId,
    kind: ScopeKind,
    locals: Vec<(String, usize, SType)>,
    frame: usize,
}

impl Scope {
    fn new(file: SourceId, kind: ScopeKind) -> Scope {
        Scope {
            file,
            kind,
            locals: vec![],
            frame: 0,
        }
    }

    fn bind(&mut self, name: &str, ty: SType) -> usize {
        let slot = self.frame;
        self.frame += 1;
        self.locals.push((name.to_string(), slot, ty));
        slot
    }

    fn lookup(&self, name: &str) -> Option<(usize, SType)> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _, _)| n == name)
            .map(|(_, s, t)| (*s, t.clone()))
    }
}

/// Signature of something callable, from the AST: parameter names and
/// whether each has a default.
#[derive(Clone, Debug, Default)]
struct Sig {
    params: Vec<(String, bool)>,
    variadic: bool,
}

#[derive(Default)]
struct Checker {
    sources: Sources,
    files: Vec<ast::File>,
    diags: Vec<Diagnostic>,
    syms: Interner,
    globals: Vec<HashMap<String, Global>>,
    configs: Vec<Config>,
    modules: Vec<Module>,
    fns: Vec<Function>,
    // AST indexes of each declared global, parallel to configs/modules/fns.
    config_ast: Vec<(SourceId, usize)>,
    module_ast: Vec<(SourceId, usize)>,
    fn_ast: Vec<(SourceId, usize)>,
    /// Per module: member top-level names with static types, fn signatures.
    module_info: Vec<ModuleInfo>,
    import_ids: HashMap<String, SourceId>,
}

#[derive(Default, Clone)]
struct ModuleInfo {
    ctor: Sig,
    fns: HashMap<String, Sig>,
    /// Full dotted path -> static type of every member.
    members: HashMap<Vec<String>, SType>,
}

fn sig_of(params: &[ast::Param]) -> Sig {
    Sig {
        params: params
            .iter()
            .map(|p| (p.name.name.clone(), p.default.is_some()))
            .collect(),
        variadic: false,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// "did you mean `x`?" when a candidate is close.
fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let limit = if name.len() <= 3 {
        1
    } else {
        (name.len() / 3).clamp(2, 3)
    };
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

impl Checker {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    // ---------------------------------------------------------------- loading

    fn load(&mut self, name: &str, text: &str, resolver: &dyn Resolver) {
        self.add_file(name, text);
        let mut next = 0;
        while next < self.files.len() {
            let imports: Vec<ast::Import> = self.files[next]
                .items
                .iter()
                .filter_map(|i| {
                    if let ast::Item::Import(imp) = i {
                        Some(imp.clone())
                    } else {
                        None
                    }
                })
                .collect();
            for imp in imports {
                let key = imp.name.name.clone();
                if self.import_ids.contains_key(&key) {
                    continue;
                }
                match resolver.resolve(&key) {
                    Some((path, src)) => {
                        let id = self.add_file(&path, &src);
                        self.import_ids.insert(key, id);
                    }
                    None => self.err(
                        Diagnostic::new("mdl::check::unknown_import", next, format!("cannot find module file `{key}`"))
                            .label(imp.name.span, "no stdlib file or file beside the script has this name")
                            .help(format!("the stdlib ships `nn`; a local import needs `{key}.mdl` next to the script")),
                    ),
                }
            }
            next += 1;
        }
    }

    fn add_file(&mut self, name: &str, text: &str) -> SourceId {
        let id = self.sources.add(name, text);
        let (file, diags) = parser::parse(text, id);
        self.diags.extend(diags);
        self.files.push(file);
        self.globals.push(HashMap::new());
        id
    }
}

impl Checker {
    // ---------------------------------------------------------- declaration

    fn declare(&mut self) {
        for fid in 0..self.files.len() {
            let items = std::mem::take(&mut self.files[fid].items);
            for (ii, item) in items.iter().enumerate() {
                let (name, global) = match item {
                    ast::Item::Import(imp) => {
                        let Some(&target) = self.import_ids.get(&imp.name.name) else {
                            continue;
                        };
                        (
                            imp.alias.as_ref().unwrap_or(&imp.name).clone(),
                            Global::Namespace(target),
                        )
                    }
                    ast::Item::Config(c) => {
                        self.configs.push(Config {
                            name: c.name.name.clone(),
                            fields: vec![],
                            frame: 0,
                            source: fid,
                            span: c.span,
                        });
                        self.config_ast.push((fid, ii));
                        (c.name.clone(), Global::Config(self.configs.len() - 1))
                    }
                    ast::Item::Module(m) => {
                        self.modules.push(Module {
                            name: m.name.name.clone(),
                            params: vec![],
                            members: vec![],
                            ns: vec![NsNode::default()],
                            fns: vec![],
                            ctor_frame: 0,
                            source: fid,
                            span: m.span,
                        });
                        self.module_ast.push((fid, ii));
                        (m.name.clone(), Global::Module(self.modules.len() - 1))
                    }
                    ast::Item::Fn(f) => {
                        self.fns.push(Function {
                            name: f.name.name.clone(),
                            params: vec![],
                            body: vec![],
                            frame: 0,
                            source: fid,
                            span: f.span,
                        });
                        self.fn_ast.push((fid, ii));
                        (f.name.clone(), Global::Fn(self.fns.len() - 1))
                    }
                };
                if Builtin::lookup(&name.name).is_some() && !matches!(global, Global::Namespace(_))
                {
                    self.err(
                        Diagnostic::new(
                            "mdl::check::shadows_builtin",
                            fid,
                            format!("`{}` is the name of a builtin", name.name),
                        )
                        .label(name.span, "pick another name")
                        .help("builtins cannot be redefined at the top level"),
                    );
                } else if self.globals[fid]
                    .insert(name.name.clone(), global)
                    .is_some()
                {
                    self.err(
                        Diagnostic::new(
                            "mdl::check::duplicate",
                            fid,
                            format!("`{}` is defined twice", name.name),
                        )
                        .label(name.span, "second definition"),
                    );
                }
            }
            self.files[fid].items = items;
        }
        // Signatures and member types, needed before any body is resolved.
        for mi in 0..self.modules.len() {
            let (fid, ii) = self.module_ast[mi];
            let ast::Item::Module(m) = &self.files[fid].items[ii] else {
                continue;
            };
            let mut info = ModuleInfo {
                ctor: sig_of(&m.params),
                ..Default::default()
            };
            for f in &m.fns {
                info.fns.insert(f.name.name.clone(), sig_of(&f.params));
            }
            for mem in &m.members {
                let ty = match &mem.kind {
                    ast::MemberKind::Param { .. } => SType::Unknown,
                    ast::MemberKind::Value(e) => self.static_member_type(e, fid),
                };
                info.members
                    .insert(mem.path.iter().map(|i| i.name.clone()).collect(), ty);
            }
            self.module_info.push(info);
        }
    }

    /// The module type a member declaration builds, when it is evident.
    fn static_member_type(&self, e: &ast::Expr, fid: SourceId) -> SType {
        match &e.kind {
            ast::ExprKind::Call(callee, _) => match self.static_global(callee, fid) {
                Some(Global::Module(j)) => SType::Module(j),
                _ => SType::Unknown,
            },
            ast::ExprKind::Comprehension { elem, .. } => match self.static_member_type(elem, fid) {
                SType::Module(j) => SType::ModuleList(j),
                _ => SType::Unknown,
            },
            ast::ExprKind::List(items) if !items.is_empty() => {
                let tys: Vec<SType> = items
                    .iter()
                    .map(|i| self.static_member_type(i, fid))
                    .collect();
                match &tys[0] {
                    SType::Module(j) if tys.iter().all(|t| t == &tys[0]) => SType::ModuleList(*j),
                    _ => SType::Unknown,
                }
            }
            ast::ExprKind::If(_, a, b) => {
                let (ta, tb) = (
                    self.static_member_type(a, fid),
                    self.static_member_type(b, fid),
                );
                if ta == tb {
                    ta
                } else {
                    SType::Unknown
                }
            }
            _ => SType::Unknown,
        }
    }

    fn static_global(&self, e: &ast::Expr, fid: SourceId) -> Option<Global> {
        match &e.kind {
            ast::ExprKind::Name(n) => self.globals[fid].get(n).copied(),
            ast::ExprKind::Attr(base, name) => match self.static_global(base, fid)? {
                Global::Namespace(f) => self.globals[f].get(&name.name).copied(),
                _ => None,
            },
            _ => None,
        }
    }

    // ------------------------------------------------------------ resolving

    fn resolve_all(&mut self) {
        for ci in 0..self.configs.len() {
            let (fid, ii) = self.config_ast[ci];
            let ast::Item::Config(c) = self.files[fid].items[ii].clone() else {
                continue;
            };
            self.resolve_config(ci, fid, &c);
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

    fn resolve_type(&mut self, t: &ast::TypeExpr, fid: SourceId) -> Ty {
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
            other => match self.globals[fid].get(other) {
                Some(Global::Config(i)) => Ty::Config(*i),
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

    fn resolve_config(&mut self, ci: usize, fid: SourceId, c: &ast::ConfigDecl) {
        let mut scope = Scope::new(fid, ScopeKind::Config(ci, 0));
        let mut fields: Vec<ConfigField> = vec![];
        for (k, f) in c.fields.iter().enumerate() {
            if fields.iter().any(|g| g.name == f.name.name) {
                self.err(
                    Diagnostic::new(
                        "mdl::check::duplicate",
                        fid,
                        format!("field `{}` is declared twice", f.name.name),
                    )
                    .label(f.name.span, "second declaration"),
                );
            }
            let ty = self.resolve_type(&f.ty, fid);
            scope.kind = ScopeKind::Config(ci, k);
            // Defaults may read earlier fields; publish them as we go.
            self.configs[ci].fields = fields.clone();
            let default = f.default.as_ref().map(|e| self.expr(e, &mut scope).0);
            let sym = self.syms.intern(&f.name.name);
            fields.push(ConfigField {
                name: f.name.name.clone(),
                sym,
                ty,
                default,
                span: f.span,
            });
        }
        self.configs[ci].fields = fields;
        self.configs[ci].frame = scope.frame;
    }

    fn fn_params(
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

    fn resolve_module(&mut self, mi: usize, fid: SourceId, m: &ast::ModuleDecl) {
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
            };
            scope.locals.truncate(mark);
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

    fn resolve_fn(&mut self, f: &ast::FnDecl, fid: SourceId, module: Option<usize>) -> Function {
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

    fn block(&mut self, b: &ast::Block, scope: &mut Scope) -> Vec<Stmt> {
        let mark = scope.locals.len();
        let out = b.stmts.iter().map(|s| self.stmt(s, scope)).collect();
        scope.locals.truncate(mark);
        out
    }

    fn pattern(&mut self, p: &ast::Pattern, scope: &mut Scope, ty: SType) -> Pattern {
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

    fn stmt(&mut self, s: &ast::Stmt, scope: &mut Scope) -> Stmt {
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
    fn enumerate_elem(&mut self, iter: &ast::Expr, scope: &mut Scope) -> SType {
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

impl Checker {
    fn expr(&mut self, e: &ast::Expr, scope: &mut Scope) -> (Expr, SType) {
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

    fn name(&mut self, n: &str, span: Span, scope: &mut Scope) -> (ExprKind, SType) {
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
    fn ns_names(&self, mi: usize, node: usize) -> Vec<String> {
        self.modules[mi].ns.get(node).map_or(vec![], |n| {
            n.entries
                .iter()
                .map(|(s, _)| self.syms.name(*s).to_string())
                .collect()
        })
    }

    /// Static view of `module mi`'s namespace node: looks `name` up among
    /// the module's member paths (known from the AST before resolution).
    fn ns_lookup(&self, mi: usize, prefix: &[String], name: &str) -> Option<SType> {
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

    fn node_path(&self, mi: usize, node: usize) -> Vec<String> {
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

    fn attr(
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

    fn unknown_member(
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

impl Checker {
    fn fn_sig(&self, fi: usize) -> Sig {
        let (fid, ii) = self.fn_ast[fi];
        match &self.files[fid].items[ii] {
            ast::Item::Fn(f) => sig_of(&f.params),
            _ => Sig::default(),
        }
    }

    fn builtin_sig(b: Builtin) -> Sig {
        let s = b.sig();
        Sig {
            params: s
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.to_string(), i >= s.required))
                .collect(),
            variadic: s.variadic,
        }
    }

    fn forward_sig(&mut self, mi: usize, span: Span, file: SourceId) -> Option<Sig> {
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

    fn call(
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
        let (c, cty) = self.expr(callee, scope);
        self.finish_call(c, cty, pos, kw, &kw_names, span, scope)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_call(
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

    fn check_args(
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
