//! One file per subcommand.

pub mod chat;
pub mod check;
pub mod exec;
pub mod run;
pub mod template;
pub mod tokenize;
