//! Errors of checkpoint reading: what was wrong, and where.

use std::path::Path;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConvertError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl ConvertError {
    pub fn io(path: &Path, source: std::io::Error) -> ConvertError {
        ConvertError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, ConvertError>;
