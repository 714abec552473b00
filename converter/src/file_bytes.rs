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

    fn release(&self, start: usize, len: usize) {
        #[cfg(unix)]
        if let FileBytes::Mapped(m) = self {
            // SAFETY: the mapping is read-only and never written, so
            // dropping its pages loses nothing: a later read faults them
            // back in from the file. The range is inside the map.
            if start.checked_add(len).is_some_and(|end| end <= m.len()) {
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (start, len);
    }
}
