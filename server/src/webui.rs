//! The chat page at `/` (`--no-webui` turns it off): one HTML page, its
//! script, Markdown renderer and style sheet, compiled into the binary
//! (no CDN, nothing fetched at run time). The page talks to `/v1` of the
//! same server, so it needs no CORS; its Content-Security-Policy lets it
//! load and call nothing else, which also keeps any markup a model writes
//! from running (the renderer escapes answers first, too).

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderName;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::api::error::ApiError;
use crate::api::Shared;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// Each file's path, content type and text.
const FILES: [(&str, &str, &str); 5] = [
    ("/", HTML, include_str!("../webui/index.html")),
    ("/index.html", HTML, include_str!("../webui/index.html")),
    ("/webui/app.js", JS, include_str!("../webui/app.js")),
    (
        "/webui/markdown.js",
        JS,
        include_str!("../webui/markdown.js"),
    ),
    (
        "/webui/app.css",
        "text/css; charset=utf-8",
        include_str!("../webui/app.css"),
    ),
];

/// Images are data URLs the user attached; everything else is this origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            // A new binary serves a new page: the browser asks each time
            // (the files are small) instead of keeping an old copy.
            (CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("content-security-policy"), CSP),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
            (HeaderName::from_static("referrer-policy"), "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `GET /` and the page's files; with the page off, `/` says how to turn
/// it on instead of a bare 404.
pub fn routes(enabled: bool) -> Router<Shared> {
    if !enabled {
        return Router::new().route(
            "/",
            get(|| async {
                ApiError::not_found("the chat page is off (--no-webui); the API is under /v1")
            }),
        );
    }
    FILES
        .into_iter()
        .fold(Router::new(), |router, (path, kind, body)| {
            router.route(path, get(move || async move { asset(kind, body) }))
        })
}
