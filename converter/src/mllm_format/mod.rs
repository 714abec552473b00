//! The self-contained `.mllm` model format (spec: `converter/FORMAT.md`):
//! one mmap-able file with aligned tensor data (float or ggml blocks), the
//! model's config, tokenizer, chat template, generation config, the recipe
//! that quantized it and its source's identity.
//!
//! - `layout`: the binary header and tensor table, shared by both sides;
//! - `writer`: `MllmWriter`, streaming a file tensor by tensor;
//! - `reader`: `MllmFile`, validating everything on open, a `WeightSource`;
//! - `recipe`: which type each tensor gets; `kquant`: the quantizers;
//! - `source` / `convert`: checkpoints (safetensors, PyTorch, GGUF) in,
//!   `.mllm` out; `experts`: transposed expert stacks written in the
//!   layout the scripts declare.

mod checksums;
mod convert;
mod experts;
mod kquant;
pub mod layout;
mod reader;
pub mod recipe;
mod source;
pub mod types;
mod writer;

pub use checksums::Checksums;
pub use convert::{convert, convert_cancellable, convert_types, ConvertSummary};
pub use kquant::quantize;
pub use reader::{MllmFile, TensorEntry};
pub use recipe::{glob_match, Plan, Recipe, Rule};
pub use source::SourceModel;
pub use types::StoredType;
pub use writer::{remove_stale_tmps, tmp_path, MllmWriter, PlannedTensor};

/// Whether `path` starts with the `.mllm` magic.
pub fn is_mllm_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|_| magic == layout::MAGIC)
}
