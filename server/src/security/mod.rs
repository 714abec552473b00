//! What a caller on the network may make the server do, beyond asking for
//! answers: which `Host` names it answers to (DNS rebinding), which web
//! origins may call it from a browser (CORS), which local files a request
//! may name as images, and which API keys it takes. Each policy is built
//! once from the command line (bad flags fail at start, not per request)
//! and checked before a request reaches its handler. The threat model is
//! in docs/security.md.

mod cors;
mod host;
mod keys;
mod media;

pub use cors::CorsPolicy;
pub use host::HostPolicy;
pub use keys::ApiKeys;
pub use media::LocalMedia;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;
use crate::api::Shared;

/// What the network flags of `mllm serve` say, checked together.
#[derive(Debug)]
pub struct Policies {
    pub hosts: HostPolicy,
    pub cors: CorsPolicy,
    /// Whether the server speaks TLS: same-origin pages are `https://`.
    pub tls: bool,
}

/// The authority a request was sent to: HTTP/2's `:authority` (hyper puts
/// it in the URI) or HTTP/1.1's `Host` header.
fn authority(req: &Request) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.as_str().to_string());
    }
    req.headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The outermost layer: refuses a foreign `Host`, then answers or refuses
/// cross-origin requests, before authentication or any handler runs.
pub async fn guard(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let p = &s.policies;
    let Some(host) = authority(&req) else {
        return ApiError::bad_request("the request has no Host header").into_response();
    };
    if !p.hosts.allows(&host) {
        return ApiError::misdirected(format!(
            "this server does not answer to the host name `{}`; if that name is yours, start the server with --allowed-host {}",
            host::name_of(&host),
            host::name_of(&host)
        ))
        .into_response();
    }
    let origin = req
        .headers()
        .get(ORIGIN)
        .map(|v| v.to_str().unwrap_or("(not text)").to_string());
    let Some(origin) = origin else {
        // Not a browser's cross-origin request (curl, SDKs, or a page's
        // same-origin GET): nothing to answer for CORS.
        return next.run(req).await;
    };
    let same = cors::same_origin(&origin, &host, p.tls);
    let listed = p.cors.allows(&origin);
    if cors::is_preflight(&req) {
        return if same || listed {
            p.cors.preflight(&origin, &req)
        } else {
            ApiError::forbidden(cors::refusal(&origin)).into_response()
        };
    }
    if !same && !listed {
        // Refused rather than answered without CORS headers: a browser
        // sends a "simple" cross-origin POST before it knows whether it
        // may read the answer, so the model would run for that page.
        return ApiError::forbidden(cors::refusal(&origin)).into_response();
    }
    let mut r = next.run(req).await;
    if listed {
        p.cors.decorate(&origin, r.headers_mut());
    }
    r
}
