//! Errors as the C ABI and Python report them: a status code and a
//! message for a person.

/// How a call went (`mllm_status` in C); 0 is success.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// A null pointer, text that is not UTF-8, a bad option or argument.
    InvalidArgument = 1,
    /// The model path does not exist.
    NotFound = 2,
    /// The model exists but could not be loaded (format, config, weights,
    /// no tokenizer).
    Load = 3,
    /// Text could not be tokenized or ids could not be decoded.
    Tokenizer = 4,
    /// Generation failed (the context is full, an image failed to load, an
    /// error in a step).
    Generate = 5,
    /// A bug: a panic was caught, or an earlier one left the model unusable.
    Internal = 6,
}

impl Status {
    /// A short name for the code (`mllm_status_string`).
    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::InvalidArgument => "invalid argument",
            Status::NotFound => "model not found",
            Status::Load => "model could not be loaded",
            Status::Tokenizer => "tokenizer error",
            Status::Generate => "generation failed",
            Status::Internal => "internal error",
        }
    }
}

/// A failure: a code and a message for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// A runtime error under `status`, what the call was doing, refined by
    /// the error's kind where it says more: a missing model path while
    /// loading is `NotFound` (a missing image while generating stays
    /// `Generate`, as mllm.h documents), a tokenizer failure `Tokenizer`,
    /// and a failed step during a call about its arguments (embedding,
    /// ranking) `Generate`. The text is the plain message (diagnostics
    /// uncoloured, no leading `error: `).
    pub(crate) fn runtime(status: Status, e: mllm_runtime::Error) -> Error {
        use mllm_runtime::ErrorKind as K;
        let status = match (e.kind(), status) {
            (K::NotFound, Status::Load) => Status::NotFound,
            (K::Tokenizer, _) => Status::Tokenizer,
            (K::Generate, Status::InvalidArgument) => Status::Generate,
            _ => status,
        };
        Error::new(status, clean_message(e.message()))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Drops ANSI escape sequences and a leading `error: `.
pub fn clean_message(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params final-byte (0x40..=0x7e).
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    match out.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None => out,
    }
}
