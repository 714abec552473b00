//! A checkpoint file's bytes, shared by the tensors that borrow from it: a
//! read-only mapping, or a buffer (files parsed from memory in tests).

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use mllm_backends::ByteOwner;

use crate::error::{ConvertError, Result};

pub(crate) enum FileBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Maps `path` read-only.
    pub(crate) fn map(path: &Path) -> Result<FileBytes> {
        let f = File::open(path).map_err(|e| ConvertError::io(path, e))?;
        // SAFETY: the mapping is read-only; like every mmap-based loader we
        // assume the file is not truncated while the model runs.
        let map = unsafe { Mmap::map(&f) }.map_err(|e| ConvertError::io(path, e))?;
        Ok(FileBytes::Mapped(map))
    }
}

impl ByteOwner for FileBytes {
    fn bytes(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(v) => v,
        }
    }
}
