//! One file per subcommand.

pub mod check;
pub mod exec;
