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

mod exprs;
mod items;

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
        Rule::ident | Rule::qual_name => "a name",
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
        Rule::let_member => "`let`",
        Rule::module_alias => "`= module(...)`",
        Rule::config_base => "`: BaseConfig`",
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
    pub(super) fn span(&self, p: &Pair<Rule>) -> Span {
        let s = p.as_span();
        let trimmed = p.as_str().trim_end().len();
        Span::new(s.start() + self.offset, s.start() + trimmed + self.offset)
    }

    pub(super) fn ident(&self, p: Pair<Rule>) -> Ident {
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
}
