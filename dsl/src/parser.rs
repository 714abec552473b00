//! Source text -> AST: one function per grammar rule, a Pratt parser for
//! operators, and recovery at top-level items so one run reports every
//! syntax error of a file.

use std::sync::OnceLock;

use pest::iterators::Pair;
use pest::pratt_parser::{Assoc, Op, PrattParser};
use pest::Parser as _;
use pest_derive::Parser;

use crate::ast::*;
use crate::diagnostic::{Diagnostic, SourceId};

#[derive(Parser)]
#[grammar = "grammar.pest"]
struct MdlParser;

/// Brackets nested deeper than this are refused before parsing: the parser
/// and the evaluator recurse, and a deep enough file would overflow the stack.
pub const MAX_NESTING: usize = 64;

/// Operators (or postfix calls, indexes, attributes) in one flat chain.
pub const MAX_CHAIN: usize = 256;

/// Deepest expression tree accepted; bounds every recursive walk after parsing.
pub const MAX_EXPR_DEPTH: usize = 160;

/// Parses a whole file. Returns the items that parsed and one diagnostic per
/// syntax error (parsing resumes at the next top-level item).
pub fn parse(src: &str, source: SourceId) -> (File, Vec<Diagnostic>) {
    let mut file = File::default();
    let mut diags = Vec::new();
    pest::set_error_detail(true);
    if let Some(d) = check_nesting(src, source) {
        return (file, vec![d]);
    }
    let mut offset = 0;
    while offset <= src.len() {
        let rest = &src[offset..];
        match MdlParser::parse(Rule::file, rest) {
            Ok(mut pairs) => {
                let p = Parser {
                    source,
                    offset,
                    errors: Default::default(),
                };
                if let Some(fp) = pairs.next() {
                    for item in fp.into_inner() {
                        if item.as_rule() != Rule::EOI {
                            file.items.push(p.item(item));
                        }
                    }
                }
                diags.extend(p.errors.into_inner());
                break;
            }
            Err(e) => {
                let pos = match e.location {
                    pest::error::InputLocation::Pos(p) => p,
                    pest::error::InputLocation::Span((s, _)) => s,
                };
                diags.push(syntax_diagnostic(&e, source, offset, rest));
                // Keep what parsed before the error: re-parse the prefix up to
                // the item the error is in.
                let item_start = last_item_start(rest, pos);
                if item_start > 0 {
                    if let Ok(mut pairs) = MdlParser::parse(Rule::file, &rest[..item_start]) {
                        let p = Parser {
                            source,
                            offset,
                            errors: Default::default(),
                        };
                        if let Some(fp) = pairs.next() {
                            for item in fp.into_inner() {
                                if item.as_rule() != Rule::EOI {
                                    file.items.push(p.item(item));
                                }
                            }
                        }
                        diags.extend(p.errors.into_inner());
                    }
                }
                match next_item_start(rest, pos) {
                    Some(next) => offset += next,
                    None => break,
                }
            }
        }
    }
    (file, diags)
}

const ITEM_KEYWORDS: [&str; 4] = ["module ", "config ", "fn ", "import "];

fn line_starts(s: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(s.match_indices('\n').map(|(i, _)| i + 1))
}

fn is_item_line(s: &str, at: usize) -> bool {
    ITEM_KEYWORDS.iter().any(|k| s[at..].starts_with(k))
}

/// Start of the last top-level item at or before `pos`.
fn last_item_start(s: &str, pos: usize) -> usize {
    line_starts(s)
        .filter(|&l| l <= pos && is_item_line(s, l))
        .last()
        .unwrap_or(0)
}

/// Start of the first top-level item after the line holding `pos`.
fn next_item_start(s: &str, pos: usize) -> Option<usize> {
    line_starts(s).find(|&l| l > pos && is_item_line(s, l))
}

fn check_nesting(src: &str, source: SourceId) -> Option<Diagnostic> {
    let mut depth = 0usize;
    for (i, c) in src.char_indices() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(
                        Diagnostic::new(
                            "mdl::parse::too_deep",
                            source,
                            format!("brackets nested more than {MAX_NESTING} deep"),
                        )
                        .label(Span::new(i, i + 1), "this bracket is too deep")
                        .help("split the expression into named steps with `let`"),
                    );
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

fn rule_name(r: &Rule) -> Option<&'static str> {
    Some(match r {
        Rule::ident => "a name",
        Rule::expr | Rule::term => "an expression",
        Rule::int | Rule::float => "a number",
        Rule::string => "a string",
        Rule::block => "a block `{ ... }`",
        Rule::type_expr => "a type",
        Rule::pattern => "a name or a tuple pattern",
        Rule::EOI => "end of file",
        Rule::config_decl => "`config`",
        Rule::module_decl => "`module`",
        Rule::fn_decl => "`fn`",
        Rule::import => "`import`",
        Rule::param_decl => "`param`",
        Rule::member_decl | Rule::path => "a member declaration `name = ...`",
        Rule::call => "`(`",
        Rule::index => "`[`",
        Rule::attr => "`.`",
        Rule::assign_op => "`=`",
        Rule::args | Rule::arg => "an argument",
        Rule::params | Rule::param => "a parameter",
        Rule::config_field => "a config field `name: type`",
        Rule::cond => "`if`",
        Rule::stmt
        | Rule::let_stmt
        | Rule::for_stmt
        | Rule::if_stmt
        | Rule::return_stmt
        | Rule::assign_stmt
        | Rule::expr_stmt => "a statement",
        r if is_operator(r) => return Some("an operator"),
        _ => return None,
    })
}

fn is_operator(r: &Rule) -> bool {
    matches!(
        r,
        Rule::range
            | Rule::or
            | Rule::and
            | Rule::eq
            | Rule::ne
            | Rule::le
            | Rule::ge
            | Rule::lt
            | Rule::gt
            | Rule::add
            | Rule::sub
            | Rule::matmul
            | Rule::pow
            | Rule::mul
            | Rule::floordiv
            | Rule::div
            | Rule::rem
    )
}

fn syntax_diagnostic(
    e: &pest::error::Error<Rule>,
    source: SourceId,
    offset: usize,
    rest: &str,
) -> Diagnostic {
    let mut pos = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    };
    let mut expected: Vec<String> = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => positives
            .iter()
            .filter_map(rule_name)
            .map(String::from)
            .collect(),
        pest::error::ErrorVariant::CustomError { .. } => vec![],
    };
    // Literal tokens (`,`, `)`) are not rules; the attempt tracker knows the
    // farthest place the parser got to and which tokens would have fit there.
    if let Some(att) = e.parse_attempts() {
        if att.max_position > pos && att.max_position <= rest.len() {
            pos = att.max_position;
            expected = att
                .expected_tokens()
                .iter()
                .filter_map(|t| {
                    // Only literal tokens are worth showing (not char ranges).
                    let t = t.to_string();
                    let skip =
                        t.trim().is_empty() || t == "#" || (t.contains("..") && t.len() <= 6);
                    (!skip).then(|| format!("`{t}`"))
                })
                .collect();
        }
    }
    let found = rest[pos..].chars().next();
    let end = pos + found.map_or(0, |c| c.len_utf8());
    expected.sort();
    expected.dedup();
    let found_text = match found {
        None => "end of file".to_string(),
        Some(c) if c.is_whitespace() => "whitespace".to_string(),
        Some(_) => {
            let word = |c: &char| c.is_alphanumeric() || *c == '_';
            let tok: String = match rest[pos..].chars().next() {
                Some(c) if word(&c) => rest[pos..].chars().take_while(word).take(24).collect(),
                Some(c) => c.to_string(),
                None => String::new(),
            };
            format!("`{tok}`")
        }
    };
    let expected_text = match expected.len() {
        0 => "something else".to_string(),
        1 => expected[0].to_string(),
        _ => format!(
            "{} or {}",
            expected[..expected.len() - 1].join(", "),
            expected[expected.len() - 1]
        ),
    };
    let mut help = format!("expected {expected_text}");
    if found == Some('(') || found == Some('[') {
        help.push_str("; a call or index must touch what it applies to, as in `f(x)` and `x[0]`");
    }
    Diagnostic::new(
        "mdl::parse::unexpected",
        source,
        format!("unexpected {found_text}"),
    )
    .label(
        Span::new(offset + pos, offset + end),
        format!("expected {expected_text} here"),
    )
    .help(help)
}

fn pratt() -> &'static PrattParser<Rule> {
    static P: OnceLock<PrattParser<Rule>> = OnceLock::new();
    P.get_or_init(|| {
        PrattParser::new()
            .op(Op::infix(Rule::range, Assoc::Left))
            .op(Op::infix(Rule::or, Assoc::Left))
            .op(Op::infix(Rule::and, Assoc::Left))
            .op(Op::infix(Rule::eq, Assoc::Left) | Op::infix(Rule::ne, Assoc::Left))
            .op(Op::infix(Rule::lt, Assoc::Left)
                | Op::infix(Rule::le, Assoc::Left)
                | Op::infix(Rule::gt, Assoc::Left)
                | Op::infix(Rule::ge, Assoc::Left))
            .op(Op::infix(Rule::add, Assoc::Left) | Op::infix(Rule::sub, Assoc::Left))
            .op(Op::infix(Rule::mul, Assoc::Left)
                | Op::infix(Rule::div, Assoc::Left)
                | Op::infix(Rule::floordiv, Assoc::Left)
                | Op::infix(Rule::rem, Assoc::Left)
                | Op::infix(Rule::matmul, Assoc::Left))
            .op(Op::prefix(Rule::neg) | Op::prefix(Rule::not))
            .op(Op::infix(Rule::pow, Assoc::Right))
    })
}

/// Builds AST nodes from pest pairs. The grammar guarantees each pair's
/// shape, so the builders only match; `offset` shifts spans when parsing
/// resumed mid-file.
struct Parser {
    source: SourceId,
    offset: usize,
    errors: std::cell::RefCell<Vec<Diagnostic>>,
}

impl Parser {
    /// The pair's span without the trailing whitespace that pest's implicit
    /// whitespace leaves inside a rule ending in an optional part.
    fn span(&self, p: &Pair<Rule>) -> Span {
        let s = p.as_span();
        let trimmed = p.as_str().trim_end().len();
        Span::new(s.start() + self.offset, s.start() + trimmed + self.offset)
    }

    fn ident(&self, p: Pair<Rule>) -> Ident {
        Ident {
            name: p.as_str().to_string(),
            span: self.span(&p),
        }
    }

    fn item(&self, p: Pair<Rule>) -> Item {
        match p.as_rule() {
            Rule::import => {
                let span = self.span(&p);
                let mut it = p.into_inner();
                let name = self.ident(it.next().expect("grammar: import name"));
                let alias = it.next().map(|a| self.ident(a));
                Item::Import(Import { name, alias, span })
            }
            Rule::config_decl => Item::Config(self.config(p)),
            Rule::module_decl => Item::Module(self.module(p)),
            _ => Item::Fn(self.fn_decl(p)),
        }
    }

    fn config(&self, p: Pair<Rule>) -> ConfigDecl {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: config name"));
        let fields = it
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
        ConfigDecl { name, fields, span }
    }

    fn type_expr(&self, p: Pair<Rule>) -> TypeExpr {
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

    fn params(&self, p: Pair<Rule>) -> Vec<Param> {
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

    fn module(&self, p: Pair<Rule>) -> ModuleDecl {
        let span = self.span(&p);
        let mut it = p.into_inner();
        let name = self.ident(it.next().expect("grammar: module name"));
        let mut m = ModuleDecl {
            name,
            params: vec![],
            members: vec![],
            fns: vec![],
            span,
        };
        for q in it {
            match q.as_rule() {
                Rule::params => m.params = self.params(q),
                Rule::fn_decl => m.fns.push(self.fn_decl(q)),
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

    fn cond(&self, p: Pair<Rule>) -> Expr {
        self.expr(p.into_inner().next().expect("grammar: cond expr"))
    }

    fn fn_decl(&self, p: Pair<Rule>) -> FnDecl {
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

    fn block(&self, p: Pair<Rule>) -> Block {
        let span = self.span(&p);
        Block {
            stmts: p.into_inner().map(|s| self.stmt(s)).collect(),
            span,
        }
    }

    fn stmt(&self, p: Pair<Rule>) -> Stmt {
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

    fn pattern(&self, p: Pair<Rule>) -> Pattern {
        let inner = p.into_inner().next().expect("grammar: pattern");
        match inner.as_rule() {
            Rule::ident => Pattern::Name(self.ident(inner)),
            _ => {
                let span = self.span(&inner);
                Pattern::Tuple(inner.into_inner().map(|q| self.pattern(q)).collect(), span)
            }
        }
    }

    fn too_complex(&self, span: Span, what: &str) -> Expr {
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

    fn expr(&self, p: Pair<Rule>) -> Expr {
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

    fn expr_tree(&self, p: Pair<Rule>) -> Expr {
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

    fn term(&self, p: Pair<Rule>) -> Expr {
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

    fn args(&self, p: Pair<Rule>) -> Vec<Arg> {
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

    fn index_item(&self, p: Pair<Rule>) -> IndexItem {
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

    fn primary(&self, p: Pair<Rule>) -> Expr {
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
