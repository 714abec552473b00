//! mllm-runtime is the engine a program embeds: open a model (Hugging Face
//! directory, GGUF or `.mllm`), pick and check its script (the stdlib and
//! model scripts are embedded; a file on disk overrides), bind the weights,
//! then prefill, decode and sample, with images for vision-language
//! scripts and steps run eagerly or as captured graphs. The `mllm` CLI, and
//! later the server and the C/Python bindings, are thin layers over it; it
//! prints nothing except warnings on stderr.

pub mod assets;
pub mod engine;
pub mod image_prompt;
pub mod images;
pub mod loaded;
pub mod memory;
pub mod model_files;
pub mod npu;
pub mod prompt;
pub mod runner;
pub mod sequence;
pub mod tiled_images;
pub mod videos;
pub mod weight_check;

pub use engine::{generate, Engine, GenRequest, GenStats, StopReason};
pub use loaded::{load, load_with, Loaded};
pub use mllm_interpreter::ForwardInputs;
pub use runner::{Runner, PREFILL_CHUNK};
pub use sequence::Sequence;

use std::io::IsTerminal;

/// A failure already explained for a person (the text is what to print).
#[derive(Debug)]
pub struct Error(pub String);

impl<E: std::fmt::Display> From<E> for Error {
    fn from(e: E) -> Error {
        Error(format!("error: {e}"))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Whether diagnostics rendered for stderr may use color.
pub fn color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}
