//! GGUF files (llama.cpp's format) as a weight source: `GgufFile` is the
//! mmapped file with its metadata and tensor table (reader.rs parses it,
//! refusing corrupt input with a clear error); `GgufWeights` presents its
//! tensors under Hugging Face names (names.rs holds the one mapping table;
//! fixes.rs undoes what llama.cpp's converter did to the values),
//! dequantizing quantized ones with `mllm_backends::quant`; `hf_config`
//! turns its metadata into a config.json-style object (config.rs);
//! `VisionLanguage` joins a text GGUF with its `mmproj` file (the vision
//! tower llama.cpp writes apart) into one VL model (mmproj.rs,
//! mmproj_deepseek.rs, mmproj_weights.rs).

mod config;
mod family;
mod fixes;
mod mmproj;
mod mmproj_deepseek;
mod mmproj_weights;
mod names;
mod reader;
mod types;
mod value;
mod weights;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mllm_backends::ByteOwner;

use crate::error::{ConvertError, Result};
use crate::file_bytes::FileBytes;

pub use config::hf_config;
pub use family::gguf_families;
pub use mmproj::VisionLanguage;
pub use mmproj_weights::{MmprojWeights, VisionLanguageWeights};
pub use names::{gguf_name, gguf_name_for, hf_name, hf_name_for};
pub use types::GgmlType;
pub use value::MetaValue;
pub use weights::GgufWeights;

/// One tensor as the file describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    /// The GGUF name (`blk.0.attn_q.weight`).
    pub name: String,
    /// PyTorch order: ggml's dims reversed, outermost first.
    pub shape: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Absolute byte offset of the data in the file (data section start
    /// plus the offset the file records).
    pub offset: usize,
    /// Bytes of data.
    pub len: usize,
}

impl GgufTensorInfo {
    pub fn numel(&self) -> usize {
        // A zero dimension makes it 0 in any order; otherwise the reader
        // checked that the product fits, and partial products of
        // dimensions >= 1 never exceed it. (Multiplied in this order, a
        // shape like [2^40, 2^40, 0] would overflow before reaching the 0.)
        if self.shape.contains(&0) {
            0
        } else {
            self.shape.iter().product()
        }
    }
}

/// A parsed GGUF file (versions 2 and 3). Tensor data stays in the mapping.
pub struct GgufFile {
    path: PathBuf,
    storage: Arc<FileBytes>,
    version: u32,
    meta: BTreeMap<String, MetaValue>,
    tensors: Vec<GgufTensorInfo>,
    alignment: usize,
    data_start: usize,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.meta.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile> {
        Self::parse(path, FileBytes::map(path)?)
    }

    /// Parses a GGUF image held in memory; `label` names it in messages.
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(Path::new(label), FileBytes::Owned(bytes))
    }

    fn parse(path: &Path, storage: FileBytes) -> Result<GgufFile> {
        let p = reader::parse(storage.bytes()).map_err(|e| match e {
            reader::ParseError::Corrupt(m) => {
                ConvertError::Corrupt(format!("{}: not a valid GGUF file: {m}", path.display()))
            }
            reader::ParseError::Unsupported(m) => {
                ConvertError::Unsupported(format!("{}: {m}", path.display()))
            }
        })?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            storage: Arc::new(storage),
            version: p.version,
            meta: p.meta,
            tensors: p.tensors,
            alignment: p.alignment,
            data_start: p.data_start,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.meta.get(key)
    }

    /// All metadata keys, sorted.
    pub fn meta_keys(&self) -> Vec<&str> {
        self.meta.keys().map(String::as_str).collect()
    }

    /// `general.architecture` (`llama`, `qwen2`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.meta("general.architecture")
            .and_then(MetaValue::as_str)
    }

    /// The tensors in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The tensor called `name` (GGUF name).
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor of this file (bounds were checked on open;
    /// an info from elsewhere that does not fit gives an empty slice).
    pub fn tensor_data(&self, info: &GgufTensorInfo) -> &[u8] {
        let b = self.storage.bytes();
        info.offset
            .checked_add(info.len)
            .and_then(|end| b.get(info.offset..end))
            .unwrap_or(&[])
    }

    /// `general.alignment`, or 32.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Byte offset where the data section starts.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    pub(crate) fn owner(&self) -> Arc<dyn ByteOwner> {
        self.storage.clone()
    }

    /// A metadata value under the architecture's prefix (`{arch}.{key}`).
    pub fn arch_meta(&self, key: &str) -> Option<&MetaValue> {
        let arch = self.architecture()?;
        self.meta(&format!("{arch}.{key}"))
    }
}
