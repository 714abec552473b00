//! One module per fuzz target, each with `run(data)`: what the target's
//! binary (`fuzz_targets/NAME.rs`) calls on every input, and what
//! `tests/tests/fuzz_corpus.rs` replays the committed corpus through in
//! `cargo test` (the same code without libFuzzer or AddressSanitizer).

pub use super::{fixtures, parts, scratch, touch_all, write};

pub mod chat_template;
pub mod gguf;
pub mod gguf_vocab;
pub mod image;
pub mod mdl_check;
pub mod mdl_run;
pub mod mllm_file;
pub mod pytorch;
pub mod safetensors;
pub mod safetensors_index;
pub mod server_request;
pub mod tokenizer_json;

/// What a target does with one input.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz_targets/` and `corpus/` name them.
pub const ALL: &[(&str, Target)] = &[
    ("chat_template", chat_template::run),
    ("gguf", gguf::run),
    ("gguf_vocab", gguf_vocab::run),
    ("image", image::run),
    ("mdl_check", mdl_check::run),
    ("mdl_run", mdl_run::run),
    ("mllm_file", mllm_file::run),
    ("pytorch", pytorch::run),
    ("safetensors", safetensors::run),
    ("safetensors_index", safetensors_index::run),
    ("server_request", server_request::run),
    ("tokenizer_json", tokenizer_json::run),
];
