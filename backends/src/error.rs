//! Backend errors. They carry no source span: the interpreter attaches the span
//! of the call that failed.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum BackendError {
    #[error("shape error in {op}: {msg}")]
    Shape { op: &'static str, msg: String },
    #[error("dtype error in {op}: {msg}")]
    DType { op: &'static str, msg: String },
    #[error("invalid input to {op}: {msg}")]
    Invalid { op: &'static str, msg: String },
    #[error(
        "`{op}` has no kernel on the {backend} backend (`--fallback cpu` runs such ops on the CPU)"
    )]
    Unsupported {
        op: &'static str,
        backend: &'static str,
    },
    /// A NaN or infinity in an op's output, found by a numerics check
    /// (`--check-numerics`); `msg` says where.
    #[error("{msg}")]
    NonFinite { op: &'static str, msg: String },
}

pub type Result<T> = std::result::Result<T, BackendError>;

pub(crate) fn shape_err<T>(op: &'static str, msg: impl Into<String>) -> Result<T> {
    Err(BackendError::Shape {
        op,
        msg: msg.into(),
    })
}

pub(crate) fn dtype_err<T>(op: &'static str, msg: impl Into<String>) -> Result<T> {
    Err(BackendError::DType {
        op,
        msg: msg.into(),
    })
}

pub(crate) fn invalid<T>(op: &'static str, msg: impl Into<String>) -> Result<T> {
    Err(BackendError::Invalid {
        op,
        msg: msg.into(),
    })
}
