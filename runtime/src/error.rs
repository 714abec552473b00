//! The runtime's errors: what kind of failure it was, so each front end maps
//! it its own way (an exit code, an HTTP status, a C status, a Python
//! exception), and a message for a person, plain: no `error: ` prefix and no
//! colour. The front ends add those (`Error::render`).

/// What failed, as far as a caller can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A bad argument, option, prompt, image or request: the caller can fix it.
    InvalidArgument,
    /// A path that does not exist.
    NotFound,
    /// A model that exists but does not load (format, config, weights,
    /// script for its architecture).
    Load,
    /// A script that does not parse or check.
    Script,
    /// Text that does not tokenize, ids that do not decode, no tokenizer.
    Tokenizer,
    /// A step or an answer failed (the context is full, a kernel failed).
    Generate,
    /// Something this build, backend or model does not do.
    Unsupported,
    /// Reading or writing a file failed.
    Io,
}

/// A failure, explained for a person.
#[derive(Clone, Debug)]
pub struct Error {
    kind: ErrorKind,
    /// Plain text, without the `error: ` prefix.
    message: String,
    /// Script diagnostics (source snippets with their own `error:` lines)
    /// rendered in colour for a terminal; `message` is the same uncoloured.
    /// Such a message is printed as it is, without a prefix.
    colored: Option<String>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            colored: None,
        }
    }

    /// Diagnostics that render themselves (`render(color)`), kept both plain
    /// and coloured so the front end chooses.
    pub fn diagnostics(kind: ErrorKind, render: impl Fn(bool) -> String) -> Error {
        Error {
            kind,
            message: render(false),
            colored: Some(render(true)),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NotFound, message)
    }

    pub fn load(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Load, message)
    }

    pub fn tokenizer(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Tokenizer, message)
    }

    pub fn generate(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Generate, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unsupported, message)
    }

    pub fn io(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Io, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The plain message (no prefix, no colour).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` before its message (`CONTEXT: MESSAGE`).
    pub fn context(mut self, context: impl std::fmt::Display) -> Error {
        self.message = format!("{context}: {}", self.message);
        self.colored = self.colored.map(|c| format!("{context}:\n{c}"));
        self
    }

    /// The text a terminal shows: `error: MESSAGE` (the prefix red and bold
    /// with `color`), or the diagnostics as rendered.
    pub fn render(&self, color: bool) -> String {
        match (&self.colored, color) {
            (Some(c), true) => c.clone(),
            (Some(_), false) => self.message.clone(),
            (None, true) => format!("\u{1b}[1;31merror\u{1b}[0m: {}", self.message),
            (None, false) => format!("error: {}", self.message),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The engine layers' errors, each under the kind it means here.
macro_rules! from_errors {
    ($($ty:ty => $kind:ident),* $(,)?) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Error {
                Error::new(ErrorKind::$kind, e.to_string())
            }
        }
    )*};
}

from_errors! {
    mllm_backends::BackendError => Generate,
    mllm_graph::GraphError => Generate,
    std::io::Error => Io,
    serde_json::Error => InvalidArgument,
}

impl From<crate::generation::GenerationError> for Error {
    fn from(e: crate::generation::GenerationError) -> Error {
        use crate::generation::GenerationError as G;
        let kind = match &e {
            G::Detokenize(_) => ErrorKind::Tokenizer,
            G::NonFinite(_) | G::NothingAllowed | G::Processor(_) => ErrorKind::Generate,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<mllm_converter::ConvertError> for Error {
    fn from(e: mllm_converter::ConvertError) -> Error {
        use mllm_converter::ConvertError as C;
        let kind = match &e {
            C::NotFound(_) => ErrorKind::NotFound,
            C::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ErrorKind::NotFound
            }
            C::Unsupported(_) => ErrorKind::Unsupported,
            C::Corrupt(_) | C::Io { .. } => ErrorKind::Load,
        };
        Error::new(kind, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_and_colour_are_added_at_the_edge_only() {
        let e = Error::invalid("a bad flag");
        assert_eq!(e.to_string(), "a bad flag");
        assert_eq!(e.render(false), "error: a bad flag");
        assert!(e.render(true).contains("\u{1b}[1;31merror"));
        let d = Error::diagnostics(ErrorKind::Script, |c| {
            if c {
                "\u{1b}[31merror\u{1b}[0m: x".into()
            } else {
                "error: x".into()
            }
        });
        assert_eq!(d.render(false), "error: x");
        assert_eq!(d.message(), "error: x");
        assert!(d.render(true).starts_with('\u{1b}'));
        assert_eq!(
            Error::not_found("m").context("loading").message(),
            "loading: m"
        );
    }
}
