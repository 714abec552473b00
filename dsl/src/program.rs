//! The checked program: every name resolved to a slot, a member index or a
//! global, so the interpreter never looks a string up on the hot path.
//! Attribute names that stay dynamic are interned symbols.

use std::collections::HashMap;

use crate::ast::{BinOp, UnOp};
use crate::builtins::Builtin;
use crate::diagnostic::{SourceId, Sources};
use crate::span::Span;

/// An interned name.
pub type Sym = u32;

#[derive(Clone, Debug, Default)]
pub struct Interner {
    names: Vec<String>,
    ids: HashMap<String, Sym>,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.names.len() as Sym;
        self.names.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }

    pub fn get(&self, s: &str) -> Option<Sym> {
        self.ids.get(s).copied()
    }

    pub fn name(&self, id: Sym) -> &str {
        self.names.get(id as usize).map_or("?", |s| s)
    }
}

/// Static types, as declared on config fields and parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    Int,
    Float,
    Bool,
    Str,
    Tensor,
    Any,
    List(Box<Ty>),
    Config(usize),
    Optional(Box<Ty>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    Config(usize),
    Module(usize),
    Fn(usize),
    /// An imported file, by source id.
    Namespace(SourceId),
}

#[derive(Clone, Debug)]
pub struct Program {
    pub sources: Sources,
    pub syms: Interner,
    pub configs: Vec<Config>,
    pub modules: Vec<Module>,
    pub fns: Vec<Function>,
    /// Top-level names of each source file.
    pub globals: Vec<HashMap<String, Global>>,
    /// The file that was checked (the others are its imports).
    pub main: SourceId,
}

impl Program {
    pub fn module_by_name(&self, name: &str) -> Option<usize> {
        match self.globals.get(self.main)?.get(name)? {
            Global::Module(i) => Some(*i),
            _ => None,
        }
    }

    /// The modules declared in the main file, in order.
    pub fn main_modules(&self) -> Vec<usize> {
        (0..self.modules.len())
            .filter(|&i| self.modules[i].source == self.main)
            .collect()
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    /// The configs this one extends; their fields come first in `fields`.
    pub bases: Vec<usize>,
    pub fields: Vec<ConfigField>,
    /// Slots needed to evaluate defaults (comprehension variables).
    pub frame: usize,
    pub source: SourceId,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ConfigField {
    pub name: String,
    pub sym: Sym,
    pub ty: Ty,
    pub default: Option<Expr>,
    /// The file that declares the field (a base config's, when inherited).
    pub source: SourceId,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Module {
    pub name: String,
    /// Constructor parameters; in the constructor frame they are slots
    /// `0..params.len()`, in functions they are `Expr::CtorArg`.
    pub params: Vec<FnParam>,
    pub members: Vec<Member>,
    /// Member namespace tree; node 0 is the root. Dotted member paths
    /// (`model.layers`) create inner nodes.
    pub ns: Vec<NsNode>,
    pub fns: Vec<Function>,
    /// `module M(..) = expr`: constructing M evaluates `expr` (in the
    /// constructor frame, at M's path) and returns the module it builds.
    pub alias: Option<Expr>,
    pub ctor_frame: usize,
    pub source: SourceId,
    pub span: Span,
}

impl Module {
    pub fn fn_index(&self, name: &str) -> Option<usize> {
        self.fns.iter().position(|f| f.name == name)
    }
}

#[derive(Clone, Debug, Default)]
pub struct NsNode {
    pub entries: Vec<(Sym, NsEntry)>,
}

impl NsNode {
    pub fn find(&self, sym: Sym) -> Option<NsEntry> {
        self.entries
            .iter()
            .find(|(s, _)| *s == sym)
            .map(|(_, e)| *e)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsEntry {
    Node(usize),
    Member(usize),
}

#[derive(Clone, Debug)]
pub struct Member {
    /// Dotted path inside the module (`["model", "embed_tokens"]`).
    pub path: Vec<String>,
    pub kind: MemberKind,
    pub cond: Option<Expr>,
    pub span: Span,
    /// Module type when statically known (`q_proj = nn.Linear(...)`).
    pub module_ty: Option<usize>,
}

#[derive(Clone, Debug)]
pub enum MemberKind {
    Param {
        shape: Vec<Expr>,
    },
    Value(Expr),
    /// Evaluated once at construction into constructor slot `slot` (for the
    /// members below) and the member list (for the functions).
    Let {
        value: Expr,
        slot: usize,
    },
}

#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub params: Vec<FnParam>,
    pub body: Vec<Stmt>,
    pub frame: usize,
    pub source: SourceId,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct FnParam {
    pub name: String,
    pub sym: Sym,
    pub ty: Option<Ty>,
    pub default: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Pattern {
    Slot(usize),
    Tuple(Vec<Pattern>, Span),
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    Let(Pattern, Expr),
    Assign(usize, Option<BinOp>, Expr),
    For(Pattern, Expr, Vec<Stmt>),
    If(Vec<(Expr, Vec<Stmt>)>, Option<Vec<Stmt>>),
    Return(Option<Expr>),
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Lit {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(std::rc::Rc<str>),
    None,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(Lit),
    Local(usize),
    /// A constructor argument, read from the module instance (in functions).
    CtorArg(usize),
    /// A member of the current module instance.
    Member(usize),
    /// A member namespace node of the current instance (`model` in `model.norm`).
    MemberNs(usize),
    /// The current module instance itself: the receiver of a call to a
    /// sibling function (`views(x)` inside the module that defines `views`).
    SelfInstance,
    /// An earlier field of the config being built (in config defaults).
    ConfigField(usize),
    Global(Global),
    Builtin(Builtin),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Range(Box<Expr>, Box<Expr>),
    Call {
        callee: Box<Expr>,
        args: Vec<Expr>,
        kwargs: Vec<(Sym, Expr)>,
    },
    /// `recv.name(args)`: a module function when `recv` is a module, else
    /// the builtin `name` with `recv` first.
    Method {
        recv: Box<Expr>,
        name: Sym,
        builtin: Option<Builtin>,
        args: Vec<Expr>,
        kwargs: Vec<(Sym, Expr)>,
    },
    Attr(Box<Expr>, Sym),
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
pub enum IndexItem {
    Expr(Expr),
    Slice(Option<Expr>, Option<Expr>, Option<Expr>),
    Ellipsis,
}
