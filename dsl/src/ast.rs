//! The syntax tree. Every node carries the byte span it came from, so any
//! later stage can point at the exact source of a problem.

pub use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, Default)]
pub struct File {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug)]
pub enum Item {
    Import(Import),
    Config(ConfigDecl),
    Module(ModuleDecl),
    Fn(FnDecl),
}

#[derive(Clone, Debug)]
pub struct Import {
    pub name: Ident,
    pub alias: Option<Ident>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ConfigDecl {
    pub name: Ident,
    /// The configs this one extends (`nn.DecoderConfig`), dotted, in the
    /// order their fields come.
    pub bases: Vec<Ident>,
    pub fields: Vec<ConfigField>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ConfigField {
    pub name: Ident,
    pub ty: TypeExpr,
    pub default: Option<Expr>,
    pub span: Span,
}

/// `int`, `float`, `bool`, `str`, `tensor`, `any`, `list[T]`, a config name
/// (dotted for a config of an imported file); a trailing `?` allows `none`.
#[derive(Clone, Debug)]
pub struct TypeExpr {
    pub name: Ident,
    pub arg: Option<Box<TypeExpr>>,
    pub optional: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ModuleDecl {
    pub name: Ident,
    pub params: Vec<Param>,
    pub members: Vec<Member>,
    pub fns: Vec<FnDecl>,
    /// `module M(...) = expr`: M builds what `expr` builds (no body).
    pub alias: Option<Expr>,
    pub span: Span,
}

/// A declared parameter tensor or submodule, present only when `cond` holds.
#[derive(Clone, Debug)]
pub struct Member {
    pub path: Vec<Ident>,
    pub kind: MemberKind,
    pub cond: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum MemberKind {
    /// `param weight[out, in]`
    Param { shape: Vec<Expr> },
    /// `q_proj = nn.Linear(...)`, `layers = [Layer(c) for i in 0..n]`
    Value(Expr),
    /// `let rope_dim = c.head_dim // 2`: a value, not a checkpoint path.
    Let(Expr),
}

#[derive(Clone, Debug)]
pub struct FnDecl {
    pub name: Ident,
    pub params: Vec<Param>,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    Let(Pattern, Expr),
    /// `x = e`, or `x += e` with the operator.
    Assign(Ident, Option<BinOp>, Expr),
    For(Pattern, Expr, Block),
    /// `if a {} else if b {} else {}` as branches plus an optional else.
    If(Vec<(Expr, Block)>, Option<Block>),
    Return(Option<Expr>),
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub enum Pattern {
    Name(Ident),
    Tuple(Vec<Pattern>, Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Rem,
    Pow,
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
            BinOp::MatMul => "@",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    None,
    Name(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Range(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Arg>),
    Attr(Box<Expr>, Ident),
    Index(Box<Expr>, Vec<IndexItem>),
    List(Vec<Expr>),
    Tuple(Vec<Expr>),
    Comprehension {
        elem: Box<Expr>,
        pat: Pattern,
        iter: Box<Expr>,
        cond: Option<Box<Expr>>,
    },
    If(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
}

#[derive(Clone, Debug)]
pub enum IndexItem {
    Expr(Expr),
    Slice(Option<Expr>, Option<Expr>, Option<Expr>),
    Ellipsis(Span),
}
