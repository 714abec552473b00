//! Configs: fields inherited from base configs (`config A : nn.B, C`),
//! qualified type names, and the order defaults are evaluated in.

use super::*;
use crate::ast;
use crate::diagnostic::{Diagnostic, SourceId};

impl Checker {
    /// A global named `name` in file `fid`, or `ns.name` in a file it imports.
    pub(super) fn lookup_qualified(&self, fid: SourceId, name: &str) -> Option<Global> {
        let mut file = fid;
        let mut parts = name.split('.').peekable();
        while let Some(part) = parts.next() {
            let g = *self.globals.get(file)?.get(part)?;
            match g {
                Global::Namespace(f) if parts.peek().is_some() => file = f,
                _ if parts.peek().is_none() => return Some(g),
                _ => return None,
            }
        }
        None
    }

    /// The fields of config `c` with those of the configs it extends first
    /// (each base's in turn): each with the file its declaration (and
    /// default) belongs to. A field named like an inherited one replaces it
    /// in its place, whether the child or a later base declares it.
    pub(super) fn config_field_decls(
        &mut self,
        fid: SourceId,
        c: &ast::ConfigDecl,
        depth: usize,
    ) -> Vec<(SourceId, ast::ConfigField)> {
        let mut out: Vec<(SourceId, ast::ConfigField)> = vec![];
        for base in &c.bases {
            match self.lookup_qualified(fid, &base.name) {
                Some(Global::Config(j)) if depth < 32 => {
                    let (bf, bi) = self.config_ast[j];
                    if let ast::Item::Config(bc) = self.files[bf].items[bi].clone() {
                        for field in self.config_field_decls(bf, &bc, depth + 1) {
                            match out
                                .iter()
                                .position(|(_, g)| g.name.name == field.1.name.name)
                            {
                                Some(i) => out[i] = field,
                                None => out.push(field),
                            }
                        }
                    }
                }
                Some(Global::Config(_)) => {
                    self.err(
                        Diagnostic::new(
                            "mdl::check::config_cycle",
                            fid,
                            format!("config `{}` extends itself", c.name.name),
                        )
                        .label(base.span, "this chain of bases comes back here")
                        .help("a config may extend another config, but not one that extends it"),
                    );
                    return out;
                }
                _ => {
                    self.err(
                        Diagnostic::new("mdl::check::unknown_type", fid, format!("unknown config `{}`", base.name))
                            .label(base.span, "not a config in scope")
                            .help("a config extends a config of this file or of an imported one (`nn.DecoderConfig`)"),
                    );
                }
            }
        }
        let inherited = out.len();
        for (k, f) in c.fields.iter().enumerate() {
            if c.fields[..k].iter().any(|g| g.name.name == f.name.name) {
                self.err(
                    Diagnostic::new(
                        "mdl::check::duplicate",
                        fid,
                        format!("field `{}` is declared twice", f.name.name),
                    )
                    .label(f.name.span, "second declaration"),
                );
                continue;
            }
            match out[..inherited]
                .iter()
                .position(|(_, g)| g.name.name == f.name.name)
            {
                Some(i) => out[i] = (fid, f.clone()),
                None => out.push((fid, f.clone())),
            }
        }
        out
    }

    pub(super) fn resolve_config(&mut self, ci: usize, fid: SourceId, c: &ast::ConfigDecl) {
        self.configs[ci].bases = c
            .bases
            .iter()
            .filter_map(|b| match self.lookup_qualified(fid, &b.name) {
                Some(Global::Config(j)) => Some(j),
                _ => None,
            })
            .collect();
        let decls = self.config_field_decls(fid, c, 0);
        let decls = self.dependency_order(fid, &c.name, decls);
        let mut scope = Scope::new(fid, ScopeKind::Config(ci, 0));
        let mut fields: Vec<ConfigField> = vec![];
        for (k, (ffid, f)) in decls.iter().enumerate() {
            // Types and defaults are read in the file that declared them.
            scope.file = *ffid;
            let ty = self.resolve_type(&f.ty, *ffid);
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
                source: *ffid,
                span: f.span,
            });
        }
        self.configs[ci].fields = fields;
        self.configs[ci].frame = scope.frame;
    }

    /// The fields in an order where every default reads only fields before
    /// it: the declared order (base fields first, overrides in their base's
    /// place) wherever that works, a field moved after the fields its
    /// default names otherwise. So an override may read a field the child
    /// adds, and a base default reads the child's replacement of a field.
    fn dependency_order(
        &mut self,
        fid: SourceId,
        name: &ast::Ident,
        decls: Vec<(SourceId, ast::ConfigField)>,
    ) -> Vec<(SourceId, ast::ConfigField)> {
        let names: Vec<&str> = decls.iter().map(|(_, f)| f.name.name.as_str()).collect();
        let deps: Vec<Vec<usize>> = decls
            .iter()
            .enumerate()
            .map(|(k, (_, f))| {
                let mut used = vec![];
                if let Some(e) = &f.default {
                    names_in(e, &mut used);
                }
                let mut d: Vec<usize> = used
                    .iter()
                    .filter_map(|u| names.iter().position(|n| n == u))
                    .filter(|&j| j != k)
                    .collect();
                d.sort_unstable();
                d.dedup();
                d
            })
            .collect();
        let mut done = vec![false; decls.len()];
        let mut order = Vec::with_capacity(decls.len());
        while order.len() < decls.len() {
            // The first field (in declared order) whose dependencies are placed.
            let Some(k) = (0..decls.len()).find(|&k| !done[k] && deps[k].iter().all(|&j| done[j]))
            else {
                let stuck: Vec<&str> = (0..decls.len())
                    .filter(|&k| !done[k])
                    .map(|k| names[k])
                    .collect();
                self.err(
                    Diagnostic::new(
                        "mdl::check::config_cycle",
                        fid,
                        format!(
                            "the defaults of config `{}` read each other in a cycle",
                            name.name
                        ),
                    )
                    .label(name.span, format!("among {}", stuck.join(", ")))
                    .help("give one of these fields a default that does not read the others"),
                );
                order.extend((0..decls.len()).filter(|&k| !done[k]));
                break;
            };
            done[k] = true;
            order.push(k);
        }
        let mut slots: Vec<Option<(SourceId, ast::ConfigField)>> =
            decls.into_iter().map(Some).collect();
        order.into_iter().filter_map(|k| slots[k].take()).collect()
    }
}

/// Every plain name an expression reads (over-approximate: a comprehension's
/// own variable counts too, which only orders fields more strictly).
fn names_in(e: &ast::Expr, out: &mut Vec<String>) {
    use ast::ExprKind as K;
    match &e.kind {
        K::Name(n) => out.push(n.clone()),
        K::Unary(_, x) | K::Attr(x, _) => names_in(x, out),
        K::Binary(_, a, b) | K::Range(a, b) => {
            names_in(a, out);
            names_in(b, out);
        }
        K::Call(c, args) => {
            names_in(c, out);
            args.iter().for_each(|a| names_in(&a.value, out));
        }
        K::Index(x, items) => {
            names_in(x, out);
            for i in items {
                match i {
                    ast::IndexItem::Expr(e) => names_in(e, out),
                    ast::IndexItem::Slice(a, b, c) => [a, b, c]
                        .into_iter()
                        .flatten()
                        .for_each(|e| names_in(e, out)),
                    ast::IndexItem::Ellipsis(_) => {}
                }
            }
        }
        K::List(xs) | K::Tuple(xs) => xs.iter().for_each(|x| names_in(x, out)),
        K::Comprehension {
            elem, iter, cond, ..
        } => {
            names_in(elem, out);
            names_in(iter, out);
            if let Some(c) = cond {
                names_in(c, out);
            }
        }
        K::If(c, a, b) => {
            names_in(c, out);
            names_in(a, out);
            names_in(b, out);
        }
        _ => {}
    }
}
