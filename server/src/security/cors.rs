//! Cross-origin requests from browsers. By default no page of another
//! origin may call the server: its requests are refused (403) and its
//! preflights get no CORS headers, so a page the user happens to visit
//! cannot run the model or read its answers. `--cors-origin ORIGIN`
//! (repeatable) names the origins that may; `*` lets any page, and is
//! accepted only with an API key, which those pages must then send.
//! Pages of the server's own origin (the chat page) always may.

use axum::extract::Request;
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

#[derive(Debug, Clone, Default)]
pub struct CorsPolicy {
    /// Normalized `scheme://host[:port]` values.
    origins: Vec<String>,
    any: bool,
}

impl CorsPolicy {
    /// `with_key`: whether the server requires an API key.
    pub fn new(origins: &[String], with_key: bool) -> Result<CorsPolicy, String> {
        let mut p = CorsPolicy::default();
        for o in origins {
            if o.trim() == "*" {
                if !with_key {
                    return Err("--cors-origin '*' lets every web page call the server; it needs --api-key or --api-key-file, so that those pages still need the key (or name the origins that may, e.g. --cors-origin https://app.example)".into());
                }
                p.any = true;
                continue;
            }
            let n = normalize(o);
            let valid = n == "null"
                || n.split_once("://").is_some_and(|(scheme, rest)| {
                    matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
                });
            if !valid {
                return Err(format!(
                    "--cors-origin {o:?} is not an origin: give scheme://host[:port] as a browser sends it (e.g. https://app.example or http://localhost:3000), or '*'"
                ));
            }
            p.origins.push(n);
        }
        Ok(p)
    }

    /// Whether `--cors-origin` lets this origin call the server.
    pub fn allows(&self, origin: &str) -> bool {
        self.any || self.origins.contains(&normalize(origin))
    }

    /// The answer to an allowed preflight: the methods the API has and the
    /// headers the page asked to send.
    pub fn preflight(&self, origin: &str, req: &Request) -> Response {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        self.decorate(origin, h);
        h.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        let asked = req
            .headers()
            .get(ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type"));
        h.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked);
        h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        r
    }

    /// The headers that let the page read an answer.
    pub fn decorate(&self, origin: &str, h: &mut HeaderMap) {
        let value = if self.any {
            HeaderValue::from_static("*")
        } else {
            match HeaderValue::from_str(origin) {
                Ok(v) => v,
                Err(_) => return,
            }
        };
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, value);
        // The answer differs by origin: caches must not share it.
        h.append(VARY, HeaderValue::from_static("Origin"));
    }
}

pub fn is_preflight(req: &Request) -> bool {
    req.method() == Method::OPTIONS && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}

/// Whether `origin` is the server's own: same scheme and authority as the
/// request was sent to.
pub fn same_origin(origin: &str, host: &str, tls: bool) -> bool {
    let scheme = if tls { "https" } else { "http" };
    let default_port = if tls { ":443" } else { ":80" };
    let strip = |s: String| match s.strip_suffix(default_port) {
        Some(t) => t.to_string(),
        None => s,
    };
    strip(normalize(origin)) == strip(format!("{scheme}://{}", host.trim().to_ascii_lowercase()))
}

pub fn refusal(origin: &str) -> String {
    format!(
        "cross-origin requests from {origin:?} are not allowed; to let that web page call this server, start it with --cors-origin {origin}"
    )
}

fn normalize(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn listed_origins_only() {
        let p = CorsPolicy::new(
            &strings(&["https://App.example/", "http://localhost:3000"]),
            false,
        )
        .expect("valid");
        assert!(p.allows("https://app.example"));
        assert!(p.allows("http://localhost:3000"));
        assert!(!p.allows("http://app.example"));
        assert!(!p.allows("https://app.example.evil"));
        assert!(!p.allows("null"));
        assert!(!CorsPolicy::default().allows("https://app.example"));
    }

    #[test]
    fn star_needs_a_key() {
        assert!(CorsPolicy::new(&strings(&["*"]), false).is_err());
        assert!(CorsPolicy::new(&strings(&["*"]), true)
            .expect("with a key")
            .allows("https://any.example"));
    }

    #[test]
    fn malformed_origins_fail_at_start() {
        for bad in ["app.example", "ftp://a", "https://a/path", "https://"] {
            assert!(CorsPolicy::new(&strings(&[bad]), false).is_err(), "{bad}");
        }
    }

    #[test]
    fn same_origin_by_scheme_and_authority() {
        assert!(same_origin(
            "http://127.0.0.1:8080",
            "127.0.0.1:8080",
            false
        ));
        assert!(same_origin("https://box.lan", "box.lan:443", true));
        assert!(!same_origin(
            "https://127.0.0.1:8080",
            "127.0.0.1:8080",
            false
        ));
        assert!(!same_origin(
            "http://127.0.0.1:8081",
            "127.0.0.1:8080",
            false
        ));
        assert!(!same_origin("http://evil.example", "127.0.0.1:8080", false));
    }
}
