//! mllm-dsl owns the .mdl language: the pest grammar, the parser (source ->
//! AST with spans), the checker (names resolved to slots, arity, keyword
//! arguments, config fields, declared members) that yields a `Program`, and
//! the miette diagnostics with stable codes. It knows no tensors and no
//! backend; the builtin vocabulary here is names and signatures only.

pub mod ast;
pub mod builtins;
pub mod check;
pub mod diagnostic;
pub mod parser;
pub mod program;
pub mod span;

pub use check::{check, NoImports, Resolver};
pub use diagnostic::{Diagnostic, SourceFile, SourceId, Sources};
pub use program::Program;
pub use span::Span;
