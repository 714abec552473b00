//! Declaration: every global (configs, modules, functions, imports) and
//! every module member is named before any body is resolved.

use super::*;
use crate::ast;
use crate::builtins::Builtin;
use crate::diagnostic::{Diagnostic, SourceId};

impl Checker {
    // ---------------------------------------------------------- declaration

    pub(super) fn declare(&mut self) {
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
                            bases: vec![],
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
                            alias: None,
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
                    ast::MemberKind::Param { .. } | ast::MemberKind::Let(_) => SType::Unknown,
                    ast::MemberKind::Value(e) => self.static_member_type(e, fid),
                };
                info.members
                    .insert(mem.path.iter().map(|i| i.name.clone()).collect(), ty);
            }
            self.module_info.push(info);
        }
    }

    /// The module type a member declaration builds, when it is evident.
    pub(super) fn static_member_type(&self, e: &ast::Expr, fid: SourceId) -> SType {
        match &e.kind {
            ast::ExprKind::Call(callee, _) => match self.static_global(callee, fid) {
                Some(Global::Module(j)) => self.alias_target(j, 0),
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

    /// The module type module `j` builds: itself, or what its alias builds.
    fn alias_target(&self, j: usize, depth: usize) -> SType {
        let (fid, ii) = self.module_ast[j];
        match &self.files[fid].items[ii] {
            ast::Item::Module(m) => match &m.alias {
                Some(e) if depth < 16 => match &e.kind {
                    ast::ExprKind::Call(callee, _) => match self.static_global(callee, fid) {
                        Some(Global::Module(k)) => self.alias_target(k, depth + 1),
                        _ => SType::Unknown,
                    },
                    _ => SType::Unknown,
                },
                Some(_) => SType::Unknown,
                None => SType::Module(j),
            },
            _ => SType::Unknown,
        }
    }

    pub(super) fn static_global(&self, e: &ast::Expr, fid: SourceId) -> Option<Global> {
        match &e.kind {
            ast::ExprKind::Name(n) => self.globals[fid].get(n).copied(),
            ast::ExprKind::Attr(base, name) => match self.static_global(base, fid)? {
                Global::Namespace(f) => self.globals.get(f)?.get(&name.name).copied(),
                _ => None,
            },
            _ => None,
        }
    }
}
