//! Expressions: the Pratt parser's output turned into nodes, terms with
//! their calls, indexes and attributes, literals, and the depth guard.

use pest::iterators::Pair;

use super::*;

impl Parser {
    pub(super) fn too_complex(&self, span: Span, what: &str) -> Expr {
        self.errors.borrow_mut().push(
            Diagnostic::new("mdl::parse::too_complex", self.source, format!("{what} is too complex"))
                .label(span, "split this up")
                .help(format!("an expression may chain at most {MAX_CHAIN} operators and nest {MAX_EXPR_DEPTH} deep; name intermediate steps with `let`")),
        );
        Expr {
            kind: ExprKind::None,
            span,
        }
    }

    pub(super) fn expr(&self, p: Pair<Rule>) -> Expr {
        let span = self.span(&p);
        if p.clone().into_inner().count() > 2 * MAX_CHAIN + 1 {
            return self.too_complex(span, "this expression");
        }
        let e = self.expr_tree(p);
        if exceeds_depth(&e, MAX_EXPR_DEPTH) {
            return self.too_complex(span, "this expression");
        }
        e
    }

    pub(super) fn expr_tree(&self, p: Pair<Rule>) -> Expr {
        pratt()
            .map_primary(|t| self.term(t))
            .map_prefix(|op, rhs| {
                let span = self.span(&op).join(rhs.span);
                let u = if op.as_rule() == Rule::neg {
                    UnOp::Neg
                } else {
                    UnOp::Not
                };
                Expr {
                    kind: ExprKind::Unary(u, Box::new(rhs)),
                    span,
                }
            })
            .map_infix(|lhs, op, rhs| {
                let span = lhs.span.join(rhs.span);
                let b = match op.as_rule() {
                    Rule::range => {
                        return Expr {
                            kind: ExprKind::Range(Box::new(lhs), Box::new(rhs)),
                            span,
                        }
                    }
                    Rule::or => BinOp::Or,
                    Rule::and => BinOp::And,
                    Rule::eq => BinOp::Eq,
                    Rule::ne => BinOp::Ne,
                    Rule::le => BinOp::Le,
                    Rule::ge => BinOp::Ge,
                    Rule::lt => BinOp::Lt,
                    Rule::gt => BinOp::Gt,
                    Rule::add => BinOp::Add,
                    Rule::sub => BinOp::Sub,
                    Rule::matmul => BinOp::MatMul,
                    Rule::pow => BinOp::Pow,
                    Rule::mul => BinOp::Mul,
                    Rule::floordiv => BinOp::FloorDiv,
                    Rule::div => BinOp::Div,
                    _ => BinOp::Rem,
                };
                Expr {
                    kind: ExprKind::Binary(b, Box::new(lhs), Box::new(rhs)),
                    span,
                }
            })
            .parse(p.into_inner())
    }

    pub(super) fn term(&self, p: Pair<Rule>) -> Expr {
        if p.clone().into_inner().count() > MAX_CHAIN + 1 {
            return self.too_complex(self.span(&p), "this chain of calls and indexes");
        }
        let mut it = p.into_inner();
        let mut e = self.primary(it.next().expect("grammar: primary"));
        for post in it {
            let span = e.span.join(self.span(&post));
            let kind = match post.as_rule() {
                Rule::call => {
                    let args = post
                        .into_inner()
                        .next()
                        .map(|a| self.args(a))
                        .unwrap_or_default();
                    ExprKind::Call(Box::new(e), args)
                }
                Rule::index => ExprKind::Index(
                    Box::new(e),
                    post.into_inner().map(|i| self.index_item(i)).collect(),
                ),
                _ => {
                    let name = self.ident(post.into_inner().next().expect("grammar: attr name"));
                    ExprKind::Attr(Box::new(e), name)
                }
            };
            e = Expr { kind, span };
        }
        e
    }

    pub(super) fn args(&self, p: Pair<Rule>) -> Vec<Arg> {
        p.into_inner()
            .map(|a| {
                let mut it = a.into_inner().peekable();
                let first = it.next().expect("grammar: arg");
                if first.as_rule() == Rule::ident {
                    let value = self.expr(it.next().expect("grammar: kwarg value"));
                    Arg {
                        name: Some(self.ident(first)),
                        value,
                    }
                } else {
                    Arg {
                        name: None,
                        value: self.expr(first),
                    }
                }
            })
            .collect()
    }

    pub(super) fn index_item(&self, p: Pair<Rule>) -> IndexItem {
        let inner = p.into_inner().next().expect("grammar: index item");
        match inner.as_rule() {
            Rule::ellipsis => IndexItem::Ellipsis(self.span(&inner)),
            Rule::slice => {
                // Bounds are identified by their position among the colons.
                let mut parts: [Option<Expr>; 3] = [None, None, None];
                let mut slot = 0;
                let text_start = inner.as_span().start();
                let text = inner.as_str();
                let colon_offsets: Vec<usize> = text
                    .match_indices(':')
                    .map(|(i, _)| text_start + i)
                    .collect();
                for b in inner.into_inner() {
                    let at = b.as_span().start();
                    slot = colon_offsets.iter().filter(|&&c| c < at).count().max(slot);
                    parts[slot.min(2)] =
                        Some(self.expr(b.into_inner().next().expect("grammar: slice bound")));
                }
                let [a, b, c] = parts;
                IndexItem::Slice(a, b, c)
            }
            _ => IndexItem::Expr(self.expr(inner)),
        }
    }

    pub(super) fn primary(&self, p: Pair<Rule>) -> Expr {
        let span = self.span(&p);
        let kind = match p.as_rule() {
            Rule::int => match p.as_str().parse::<i64>() {
                Ok(v) => ExprKind::Int(v),
                Err(_) => ExprKind::Float(p.as_str().parse::<f64>().unwrap_or(f64::INFINITY)),
            },
            Rule::float => ExprKind::Float(p.as_str().parse::<f64>().unwrap_or(f64::NAN)),
            Rule::string => ExprKind::Str(unescape(p.as_str())),
            Rule::boolean => ExprKind::Bool(p.as_str() == "true"),
            Rule::none => ExprKind::None,
            Rule::ident => ExprKind::Name(p.as_str().to_string()),
            Rule::if_expr => {
                let mut it = p.into_inner();
                let c = self.expr(it.next().expect("grammar: if cond"));
                let a = self.expr(it.next().expect("grammar: if then"));
                let b = it.next().expect("grammar: if else");
                let b = if b.as_rule() == Rule::if_expr {
                    self.primary(b)
                } else {
                    self.expr(b)
                };
                ExprKind::If(Box::new(c), Box::new(a), Box::new(b))
            }
            Rule::list => match p.into_inner().next() {
                None => ExprKind::List(vec![]),
                Some(items) => {
                    let mut it = items.into_inner();
                    let first = self.expr(it.next().expect("grammar: list element"));
                    match it.next() {
                        Some(tail) if tail.as_rule() == Rule::comp_tail => {
                            let mut t = tail.into_inner();
                            let pat =
                                self.pattern(t.next().expect("grammar: comprehension pattern"));
                            let iter = Box::new(
                                self.expr(t.next().expect("grammar: comprehension iterable")),
                            );
                            let cond = t.next().map(|c| Box::new(self.expr(c)));
                            ExprKind::Comprehension {
                                elem: Box::new(first),
                                pat,
                                iter,
                                cond,
                            }
                        }
                        Some(second) => {
                            let mut items = vec![first, self.expr(second)];
                            items.extend(it.map(|e| self.expr(e)));
                            ExprKind::List(items)
                        }
                        None => ExprKind::List(vec![first]),
                    }
                }
            },
            _ => {
                // paren: `(e)` is grouping, `(e,)`, `(a, b)` and `()` are tuples.
                let mut items = vec![];
                let mut trailing = false;
                for q in p.into_inner() {
                    match q.as_rule() {
                        Rule::trailing_comma => trailing = true,
                        _ => items.push(self.expr(q)),
                    }
                }
                if items.len() == 1 && !trailing {
                    let mut e = items.pop().expect("one item");
                    e.span = span;
                    return e;
                }
                ExprKind::Tuple(items)
            }
        };
        Expr { kind, span }
    }
}

fn unescape(quoted: &str) -> String {
    let inner = &quoted[1..quoted.len().saturating_sub(1).max(1)];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `e` is deeper than `budget`; recursion stops at the budget, so
/// this is safe on any tree.
fn exceeds_depth(e: &Expr, budget: usize) -> bool {
    if budget == 0 {
        return true;
    }
    let b = budget - 1;
    let any = |es: &mut dyn Iterator<Item = &Expr>| {
        for x in es {
            if exceeds_depth(x, b) {
                return true;
            }
        }
        false
    };
    match &e.kind {
        ExprKind::Unary(_, x) | ExprKind::Attr(x, _) => exceeds_depth(x, b),
        ExprKind::Binary(_, x, y) | ExprKind::Range(x, y) => {
            exceeds_depth(x, b) || exceeds_depth(y, b)
        }
        ExprKind::Call(c, args) => exceeds_depth(c, b) || any(&mut args.iter().map(|a| &a.value)),
        ExprKind::Index(x, items) => {
            exceeds_depth(x, b)
                || items.iter().any(|i| match i {
                    IndexItem::Expr(e) => exceeds_depth(e, b),
                    IndexItem::Slice(p, q, r) => [p, q, r]
                        .iter()
                        .any(|o| o.as_ref().is_some_and(|e| exceeds_depth(e, b))),
                    IndexItem::Ellipsis(_) => false,
                })
        }
        ExprKind::List(xs) | ExprKind::Tuple(xs) => any(&mut xs.iter()),
        ExprKind::Comprehension {
            elem, iter, cond, ..
        } => {
            exceeds_depth(elem, b)
                || exceeds_depth(iter, b)
                || cond.as_ref().is_some_and(|c| exceeds_depth(c, b))
        }
        ExprKind::If(c, x, y) => exceeds_depth(c, b) || exceeds_depth(x, b) || exceeds_depth(y, b),
        _ => false,
    }
}
