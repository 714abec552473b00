//! One line on stderr per request: method, path, status, duration, and the
//! prompt and generated tokens of a generation, as text or JSON
//! (`--log-format`). A streamed answer is logged when its stream ends (or
//! the client leaves), so the duration and tokens are the whole answer's.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

use crate::api::Shared;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("--log-format is text or json, not `{s}`")),
        }
    }
}

/// Where a generation handler leaves (prompt, generated) token counts for
/// the log line; put in every request's extensions.
#[derive(Clone, Default)]
pub struct Tokens(Arc<Mutex<Option<(usize, usize)>>>);

impl Tokens {
    pub fn set(&self, prompt: usize, generated: usize) {
        if let Ok(mut t) = self.0.lock() {
            *t = Some((prompt, generated));
        }
    }

    fn get(&self) -> Option<(usize, usize)> {
        self.0.lock().ok().and_then(|t| *t)
    }
}

/// What the line says, written when dropped.
struct Line {
    format: LogFormat,
    method: String,
    path: String,
    status: u16,
    start: Instant,
    tokens: Tokens,
}

impl Drop for Line {
    fn drop(&mut self) {
        let ms = self.start.elapsed().as_secs_f64() * 1e3;
        let tokens = self.tokens.get();
        let line = match self.format {
            LogFormat::Text => {
                let t = tokens.map_or(String::new(), |(p, g)| format!(" prompt={p} generated={g}"));
                format!("{} {} {} {ms:.1}ms{t}", self.method, self.path, self.status)
            }
            LogFormat::Json => serde_json::json!({
                "method": self.method,
                "path": self.path,
                "status": self.status,
                "ms": (ms * 10.0).round() / 10.0,
                "prompt_tokens": tokens.map(|t| t.0),
                "generated_tokens": tokens.map(|t| t.1),
            })
            .to_string(),
        };
        eprintln!("{line}");
    }
}

/// The outermost layer: counts the request, and logs it.
pub async fn log_requests(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    s.http_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tokens = Tokens::default();
    req.extensions_mut().insert(tokens.clone());
    let mut line = Line {
        format: s.log_format,
        method: req.method().to_string(),
        // The path only: a query string may carry what is not ours to log.
        path: req.uri().path().to_string(),
        status: 0,
        start: Instant::now(),
        tokens,
    };
    let r = next.run(req).await;
    line.status = r.status().as_u16();
    let streamed = r
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        return r; // `line` is dropped, and written, here.
    }
    // Written when the stream is dropped: finished, or the client left.
    let (parts, body) = r.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _ = &line;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
