//! mllm-converter owns checkpoint files: reading Hugging Face safetensors
//! (single file, directory, sharded index) with mmap and zero copies, and the
//! model directory conventions (config.json beside the weights). Later it
//! reads GGUF and PyTorch checkpoints and writes the .mllm format. It uses
//! the backends' tensor types but never the interpreter.

pub mod chat_template;
pub mod error;
pub mod gguf;
pub mod hf_dir;
pub mod safetensors_dir;
pub mod tokenizer;

pub use error::{ConvertError, Result};
pub use hf_dir::HfModelDir;
pub use safetensors_dir::SafetensorsDir;
