//! mllm-hub: models by name. Owns turning `hf://ORG/NAME[@REV][:FILE_OR_QUANT]`
//! into files on disk: which files a reference needs (a model directory, or
//! one GGUF by quantization tag with its mmproj), fetching the missing ones
//! through the Hub's own Rust client (`hf-hub`) into the Hugging Face cache
//! layout Python's `huggingface_hub` uses (so each sees the other's
//! downloads), checking them against their ETags, and reading the cache
//! alone when offline. The CLI resolves every `--model hf://...` here before
//! a command runs, so the engine only ever sees paths.

mod error;
mod fetch;
mod reference;
mod select;
mod settings;

pub use error::HubError;
pub use fetch::{pull, Pulled};
pub use reference::{HubRef, SCHEME};
pub use select::{tag_matches, tag_of};
pub use settings::Settings;
