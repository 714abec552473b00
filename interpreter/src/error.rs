//! Runtime errors: a message, the span of the script expression that failed,
//! and the chain of calls that led there. Rendered as miette diagnostics.

use mllm_dsl::diagnostic::{Diagnostic, SourceId, Sources};
use mllm_dsl::Span;

#[derive(Clone, Debug)]
pub struct RtError {
    pub code: &'static str,
    pub message: String,
    /// Where in which file; `None` until the evaluator attaches it.
    pub at: Option<(SourceId, Span)>,
    pub label: String,
    pub help: Option<String>,
    /// Call sites (or enclosing member declarations), innermost first.
    pub trace: Vec<(SourceId, Span)>,
    /// How each trace entry is introduced ("called from").
    pub trace_label: &'static str,
}

pub type RtResult<T> = Result<T, RtError>;

impl RtError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RtError {
        RtError {
            code,
            message: message.into(),
            at: None,
            label: String::new(),
            help: None,
            trace: vec![],
            trace_label: "called from",
        }
    }

    pub fn msg(message: impl Into<String>) -> RtError {
        RtError::new("mdl::run::error", message)
    }

    pub fn help(mut self, h: impl Into<String>) -> RtError {
        self.help = Some(h.into());
        self
    }

    pub fn label(mut self, l: impl Into<String>) -> RtError {
        self.label = l.into();
        self
    }

    /// Attaches a location unless one is already set.
    pub fn at(mut self, source: SourceId, span: Span) -> RtError {
        if self.at.is_none() {
            self.at = Some((source, span));
        }
        self
    }

    pub fn to_diagnostic(&self, sources: &Sources) -> Diagnostic {
        let (src, span) = self.at.unwrap_or((0, Span::default()));
        let mut d = Diagnostic::new(self.code, src, self.message.clone());
        if self.at.is_some() {
            d = d.label(
                span,
                if self.label.is_empty() {
                    "here"
                } else {
                    &self.label
                },
            );
        }
        let mut help = self.help.clone().unwrap_or_default();
        for (s, sp) in &self.trace {
            let (line, col) = sources.line_col(*s, sp.start);
            if !help.is_empty() {
                help.push('\n');
            }
            help.push_str(&format!(
                "{} {}:{line}:{col}",
                self.trace_label,
                sources.name(*s)
            ));
        }
        if !help.is_empty() {
            d = d.help(help);
        }
        d
    }

    pub fn render(&self, sources: &Sources, color: bool) -> String {
        self.to_diagnostic(sources).render(sources, color)
    }
}

impl std::fmt::Display for RtError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl From<mllm_backends::BackendError> for RtError {
    fn from(e: mllm_backends::BackendError) -> RtError {
        match e {
            mllm_backends::BackendError::NonFinite { msg, .. } => {
                RtError::new("mdl::run::non_finite", msg)
                    .label("made here")
                    .help("--check-numerics stops at the first op whose output is not finite")
            }
            e => RtError::new("mdl::run::op", e.to_string()),
        }
    }
}
