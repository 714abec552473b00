//! mllm-converter owns checkpoint files: reading Hugging Face safetensors
//! (single file, directory, sharded index) with mmap and zero copies, GGUF
//! (metadata, tensors, the GGUF->HF name table), PyTorch zip checkpoints
//! through a restricted unpickler, tokenizers and chat templates, and the
//! self-contained `.mllm` format (reader, writer, streaming `convert`,
//! recipes; spec in FORMAT.md), and image preprocessing for vision encoders
//! (image files to Qwen-VL `pixel_values`). It uses the backends' tensor and
//! quant block types but never the interpreter.

pub mod chat_template;
pub mod error;
mod file_bytes;
pub mod gguf;
pub mod hf_dir;
pub mod image_preprocess;
pub mod mllm_format;
pub mod pytorch;
pub mod safetensors_dir;
pub mod sentence_transformers;
pub mod tokenizer;

pub use error::{ConvertError, Result};
pub use hf_dir::HfModelDir;
pub use safetensors_dir::SafetensorsDir;
