//! mllm-cli: the `mllm` command. Each subcommand lives in its own file under
//! `commands/`; this crate is the only one that sees every other crate, and
//! the one that embeds the stdlib and model scripts.

pub mod assets;
pub mod commands;
pub mod engine;
pub mod images;
pub mod model_files;
pub mod prompt;

use std::io::IsTerminal;

/// A failure already explained to the user; `main` prints it and exits 1.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> CliError {
        CliError(format!("error: {e}"))
    }
}

pub type CliResult<T> = Result<T, CliError>;

pub fn color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Sizes rayon's global pool (once; later calls are ignored).
pub fn set_threads(n: Option<usize>) {
    if let Some(n) = n {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
    }
}
