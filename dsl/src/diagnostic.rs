//! User-facing errors: a stable code, a message, labelled spans and help,
//! rendered by miette. Library layers below produce these; nothing here
//! panics on any input.

use std::fmt;
use std::sync::Arc;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};

use crate::span::Span;

/// Index of a source file in a `Sources` set.
pub type SourceId = usize;

#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: Arc<String>,
}

/// Every file a program was built from (the script and its imports).
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub files: Vec<SourceFile>,
}

impl Sources {
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> SourceId {
        self.files.push(SourceFile {
            name: name.into(),
            text: Arc::new(text.into()),
        });
        self.files.len() - 1
    }

    pub fn name(&self, id: SourceId) -> &str {
        self.files.get(id).map_or("<unknown>", |f| &f.name)
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, id: SourceId, offset: usize) -> (usize, usize) {
        let Some(f) = self.files.get(id) else {
            return (0, 0);
        };
        let upto = &f.text[..offset.min(f.text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto.len() - upto.rfind('\n').map_or(0, |i| i + 1) + 1;
        (line, col)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub span: Span,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// Stable, documented code such as `mdl::check::unknown_name`.
    pub code: &'static str,
    pub message: String,
    pub source: SourceId,
    pub labels: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: &'static str, source: SourceId, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            source,
            labels: vec![],
            help: None,
        }
    }

    pub fn label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The primary span, if any.
    pub fn span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.span)
    }

    /// Renders with miette against `sources`; `color` picks the themed output.
    pub fn render(&self, sources: &Sources, color: bool) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme).with_width(100);
        let report = Rendered {
            diag: self,
            src: named(sources, self.source),
        };
        let mut out = String::new();
        if handler.render_report(&mut out, &report).is_err() {
            out = format!("error[{}]: {}", self.code, self.message);
        }
        out
    }
}

fn named(sources: &Sources, id: SourceId) -> NamedSource<String> {
    let (name, text) = match sources.files.get(id) {
        Some(f) => (f.name.clone(), f.text.as_str().to_string()),
        None => ("<unknown>".to_string(), String::new()),
    };
    NamedSource::new(name, text)
}

/// Renders all diagnostics, one after another.
pub fn render_all(diags: &[Diagnostic], sources: &Sources, color: bool) -> String {
    diags
        .iter()
        .map(|d| d.render(sources, color))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Rendered<'a> {
    diag: &'a Diagnostic,
    src: NamedSource<String>,
}

impl fmt::Debug for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.diag)
    }
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}

impl std::error::Error for Rendered<'_> {}

impl miette::Diagnostic for Rendered<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diag.code))
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.src)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let len = self.src.inner().len();
        Some(Box::new(self.diag.labels.iter().map(move |l| {
            let start = l.span.start.min(len);
            let end = l.span.end.clamp(start, len);
            LabeledSpan::new_with_span(Some(l.text.clone()), (start, end - start))
        })))
    }
}
