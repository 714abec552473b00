//! mllm-runtime is the engine a program embeds: open a model (Hugging Face
//! directory, GGUF or `.mllm`), pick and check its script (the stdlib and
//! model scripts are embedded; a file on disk overrides), bind the weights,
//! then prefill, decode and sample, with images for vision-language
//! scripts and steps run eagerly or as captured graphs. `generation` is
//! the one generation core every front end drives; `embeddings` turns
//! texts into vectors with encoder (BERT) and decoder embedding models. The `mllm` CLI, and
//! later the server and the C/Python bindings, are thin layers over it; it
//! prints nothing except warnings on stderr.

pub mod assets;
pub mod captured;
pub mod devices;
pub mod embeddings;
pub mod engine;
mod error;
pub mod export;
pub mod families;
pub mod generation;
pub mod hidden_rows;
pub mod image_prompt;
pub mod images;
pub mod inspect;
pub mod loaded;
pub mod memory;
pub mod model_files;
pub mod npu;
pub mod perplexity;
pub mod prompt;
pub mod runner;
pub mod sequence;
pub mod speculative;
pub mod tiled_images;
pub mod tool_calls;
pub mod videos;
pub mod weight_check;

pub use engine::{generate, generate_with, Engine, GenRequest, GenStats, Speculation};
pub use error::{Error, ErrorKind};
pub use generation::{Generation, GenerationConfig, SamplerConfig, StopReason};
pub use loaded::{load, load_with, Loaded};
pub use mllm_backends::kv::KvPage;
pub use mllm_backends::Tensor;
pub use mllm_interpreter::{ForwardInputs, KvCache};
pub use runner::{Runner, PREFILL_CHUNK};
pub use sequence::{Checkpoint, Sequence};

/// The tokenizer, image decoding and the `.mllm` format (`convert` and its
/// reader), for front ends that see only the runtime.
pub use mllm_converter::{image_preprocess, mllm_format, tokenizer};

use std::io::IsTerminal;

/// Sizes the compute threads' pool (once per process; later calls do
/// nothing): `-t` of the CLI, `threads` of the C ABI and Python.
pub fn set_threads(n: Option<usize>) {
    if let Some(n) = n {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Whether diagnostics rendered for stderr may use color.
pub fn color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}
