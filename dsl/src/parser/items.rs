//! Declarations: configs, types, parameters, modules, functions, blocks,
//! statements and patterns.

use pest::iterators::Pair;

use super::{Parser, Rule};
use crate::ast::*;

impl Parser {
    pub(super) fn config(&self, p: Pair<Rule>) -> ConfigDecl {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: config name"));
        let mut bases = vec![];
        let fields = it
            .filter(|f| {
                if f.as_rule() == Rule::config_base {
                    bases.extend(f.clone().into_inner().map(|q| self.ident(q)));
                    return false;
                }
                true
            })
            .map(|f| {
                let span = self.span(&f);
                let mut fi = f.into_inner();
                let name = self.ident(fi.next().expect("grammar: field name"));
                let ty = self.type_expr(fi.next().expect("grammar: field type"));
                let default = fi.next().map(|e| self.expr(e));
                ConfigField {
                    name,
                    ty,
                    default,
                    span,
                }
            })
            .collect();
        ConfigDecl {
            name,
            bases,
            fields,
            span,
        }
    }

    pub(super) fn type_expr(&self, p: Pair<Rule>) -> TypeExpr {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: type name"));
        let mut arg = None;
        let mut optional = false;
        for q in it {
            match q.as_rule() {
                Rule::type_expr => arg = Some(Box::new(self.type_expr(q))),
                _ => optional = true,
            }
        }
        TypeExpr {
            name,
            arg,
            optional,
            span,
        }
    }

    pub(super) fn params(&self, p: Pair<Rule>) -> Vec<Param> {
        p.into_inner()
            .map(|q| {
                let span = self.span(&q);
                let mut it = q.into_inner();
                let name = self.ident(it.next().expect("grammar: param name"));
                let mut ty = None;
                let mut default = None;
                for r in it {
                    match r.as_rule() {
                        Rule::type_expr => ty = Some(self.type_expr(r)),
                        _ => default = Some(self.expr(r)),
                    }
                }
                Param {
                    name,
                    ty,
                    default,
                    span,
                }
            })
            .collect()
    }

    pub(super) fn module(&self, p: Pair<Rule>) -> ModuleDecl {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: module name"));
        let mut m = ModuleDecl {
            name,
            params: vec![],
            members: vec![],
            fns: vec![],
            alias: None,
            span,
        };
        for q in it {
            match q.as_rule() {
                Rule::params => m.params = self.params(q),
                Rule::fn_decl => m.fns.push(self.fn_decl(q)),
                Rule::module_alias => {
                    m.alias = Some(self.expr(q.into_inner().next().expect("grammar: alias")))
                }
                Rule::let_member => {
                    let span = self.span(&q);
                    let mut qi = q.into_inner();
                    let name = self.ident(qi.next().expect("grammar: let name"));
                    let value = self.expr(qi.next().expect("grammar: let value"));
                    m.members.push(Member {
                        path: vec![name],
                        kind: MemberKind::Let(value),
                        cond: None,
                        span,
                    });
                }
                Rule::param_decl => {
                    let span = self.span(&q);
                    let mut qi = q.into_inner();
                    let name = self.ident(qi.next().expect("grammar: param name"));
                    let mut shape = vec![];
                    let mut cond = None;
                    for r in qi {
                        match r.as_rule() {
                            Rule::expr_list => {
                                shape = r.into_inner().map(|e| self.expr(e)).collect()
                            }
                            _ => cond = Some(self.cond(r)),
                        }
                    }
                    m.members.push(Member {
                        path: vec![name],
                        kind: MemberKind::Param { shape },
                        cond,
                        span,
                    });
                }
                _ => {
                    let span = self.span(&q);
                    let mut qi = q.into_inner();
                    let path = qi
                        .next()
                        .expect("grammar: member path")
                        .into_inner()
                        .map(|i| self.ident(i))
                        .collect();
                    let value = self.expr(qi.next().expect("grammar: member value"));
                    let cond = qi.next().map(|c| self.cond(c));
                    m.members.push(Member {
                        path,
                        kind: MemberKind::Value(value),
                        cond,
                        span,
                    });
                }
            }
        }
        m
    }

    pub(super) fn cond(&self, p: Pair<Rule>) -> Expr {
        self.expr(p.into_inner().next().expect("grammar: cond expr"))
    }

    pub(super) fn fn_decl(&self, p: Pair<Rule>) -> FnDecl {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: fn name"));
        let mut params = vec![];
        let mut body = None;
        for q in it {
            match q.as_rule() {
                Rule::params => params = self.params(q),
                _ => body = Some(self.block(q)),
            }
        }
        let body = body.unwrap_or(Block {
            stmts: vec![],
            span,
        });
        FnDecl {
            name,
            params,
            body,
            span,
        }
    }

    pub(super) fn block(&self, p: Pair<Rule>) -> Block {
        let span = self.span(&p);
        Block {
            stmts: p.into_inner().map(|s| self.stmt(s)).collect(),
            span,
        }
    }

    pub(super) fn stmt(&self, p: Pair<Rule>) -> Stmt {
        let span = self.span(&p);
        let rule = p.as_rule();
        let mut it = p.into_inner();
        let kind = match rule {
            Rule::let_stmt => {
                let pat = self.pattern(it.next().expect("grammar: let pattern"));
                StmtKind::Let(pat, self.expr(it.next().expect("grammar: let value")))
            }
            Rule::assign_stmt => {
                let name = self.ident(it.next().expect("grammar: assign target"));
                let op = match it.next().expect("grammar: assign op").as_str() {
                    "+=" => Some(BinOp::Add),
                    "-=" => Some(BinOp::Sub),
                    "*=" => Some(BinOp::Mul),
                    "/=" => Some(BinOp::Div),
                    _ => None,
                };
                StmtKind::Assign(
                    name,
                    op,
                    self.expr(it.next().expect("grammar: assign value")),
                )
            }
            Rule::for_stmt => {
                let pat = self.pattern(it.next().expect("grammar: for pattern"));
                let iter = self.expr(it.next().expect("grammar: for iterable"));
                StmtKind::For(pat, iter, self.block(it.next().expect("grammar: for body")))
            }
            Rule::if_stmt => {
                let mut branches = vec![];
                let mut els = None;
                let mut cur = it;
                loop {
                    let c = self.expr(cur.next().expect("grammar: if cond"));
                    let b = self.block(cur.next().expect("grammar: if body"));
                    branches.push((c, b));
                    match cur.next() {
                        Some(n) if n.as_rule() == Rule::if_stmt => cur = n.into_inner(),
                        Some(n) => {
                            els = Some(self.block(n));
                            break;
                        }
                        None => break,
                    }
                }
                StmtKind::If(branches, els)
            }
            Rule::return_stmt => StmtKind::Return(it.next().map(|e| self.expr(e))),
            _ => StmtKind::Expr(self.expr(it.next().expect("grammar: expression"))),
        };
        Stmt { kind, span }
    }

    pub(super) fn pattern(&self, p: Pair<Rule>) -> Pattern {
        let inner = p.into_inner().next().expect("grammar: pattern");
        match inner.as_rule() {
            Rule::ident => Pattern::Name(self.ident(inner)),
            _ => {
                let span = self.span(&inner);
                Pattern::Tuple(inner.into_inner().map(|q| self.pattern(q)).collect(), span)
            }
        }
    }
}
