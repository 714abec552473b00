//! The HTTP surface: routes, the API key check, and routing a request to
//! its model. The network policies (hosts, origins, local files) are
//! `crate::security`'s.

mod embeddings;
pub mod error;
mod fields;
mod generate;
mod misc;
pub mod request;
mod rerank;
pub mod tools;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::access_log::{self, LogFormat};
use crate::security::{self, ApiKeys, LocalMedia, Policies};
use crate::worker::embed::EmbedHandle;
use crate::worker::ModelHandle;
use error::ApiError;

/// Largest request body: room for a few images as data URIs.
pub const MAX_BODY_BYTES: usize = 64 << 20;

pub struct AppState {
    pub models: Vec<ModelHandle>,
    /// Models served for embeddings (`--embedding`).
    pub embedders: Vec<EmbedHandle>,
    pub api_keys: ApiKeys,
    pub policies: Policies,
    pub media: Arc<LocalMedia>,
    pub http_requests: AtomicU64,
    pub log_format: LogFormat,
    /// `--reasoning-format deepseek` (the default): `<think>` blocks go
    /// to `reasoning_content`.
    pub split_reasoning: bool,
    /// The chat page at `/` (off with `--no-webui`).
    pub webui: bool,
}

pub type Shared = Arc<AppState>;

impl AppState {
    /// The model a request names. With one model loaded, any name (or
    /// none) is served by it, as llama-server does, so clients that send
    /// their own default (`gpt-4o-mini`) work; with several, an unknown
    /// name is a 404 listing them.
    pub fn model(&self, name: Option<&str>) -> Result<&ModelHandle, ApiError> {
        if let ([only], []) = (self.models.as_slice(), self.embedders.as_slice()) {
            return Ok(only);
        }
        if let Some(e) = self
            .embedders
            .iter()
            .find(|e| Some(e.name.as_str()) == name)
        {
            return Err(ApiError::bad_request(format!(
                "model `{}` is served for {} only; start the server without {} for it to generate",
                e.name,
                if e.info.rerank {
                    "reranking (POST /v1/rerank)"
                } else {
                    "embeddings (POST /v1/embeddings)"
                },
                if e.info.rerank {
                    "--rerank"
                } else {
                    "--embedding"
                }
            ))
            .with_param("model"));
        }
        if self.models.is_empty() {
            return Err(ApiError::bad_request(format!(
                "this server serves embeddings or reranking only (models: {}): POST /v1/embeddings, /v1/rerank",
                self.names()
            )));
        }
        match name {
            None | Some("") => Err(ApiError::bad_request(format!(
                "`model` is required when several models are loaded: one of {}",
                self.names()
            ))
            .with_param("model")),
            Some(n) => self.models.iter().find(|m| m.name == n).ok_or_else(|| {
                ApiError::not_found(format!(
                    "model `{n}` is not loaded; loaded: {}",
                    self.names()
                ))
                .with_param("model")
            }),
        }
    }

    /// The embedding model (`rerank`: the reranker) a request names: with
    /// one such model loaded and no other model, any name; a model served
    /// otherwise is a 400 saying how to serve it for this.
    pub fn embedder(&self, name: Option<&str>, rerank: bool) -> Result<&EmbedHandle, ApiError> {
        let (flag, what) = match rerank {
            true => ("--rerank", "reranking"),
            false => ("--embedding", "embeddings"),
        };
        let fit: Vec<&EmbedHandle> = self
            .embedders
            .iter()
            .filter(|e| e.info.rerank == rerank)
            .collect();
        if let ([only], 1) = (fit.as_slice(), self.models.len() + self.embedders.len()) {
            return Ok(only);
        }
        let hint = |n: &str| {
            format!("start the server with {flag} {n} (or {flag} for every model) for {what}")
        };
        let other = self
            .models
            .iter()
            .map(|m| m.name.as_str())
            .chain(
                self.embedders
                    .iter()
                    .filter(|e| e.info.rerank != rerank)
                    .map(|e| e.name.as_str()),
            )
            .find(|n| Some(*n) == name);
        if let Some(n) = other {
            return Err(ApiError::bad_request(format!(
                "model `{n}` is not served for {what}: {}",
                hint(n)
            ))
            .with_param("model"));
        }
        if fit.is_empty() {
            let n = self.models.first().map_or("NAME", |m| m.name.as_str());
            return Err(ApiError::bad_request(format!(
                "no model is served for {what}: {}",
                hint(n)
            )));
        }
        match name {
            Some(n) if !n.is_empty() => fit.into_iter().find(|m| m.name == n).ok_or_else(|| {
                ApiError::not_found(format!(
                    "model `{n}` is not loaded; loaded: {}",
                    self.names()
                ))
                .with_param("model")
            }),
            _ if fit.len() == 1 => Ok(fit[0]),
            _ => Err(ApiError::bad_request(format!(
                "`model` is required when several models are loaded: one of {}",
                self.names()
            ))
            .with_param("model")),
        }
    }

    fn names(&self) -> String {
        self.models
            .iter()
            .map(|m| m.name.as_str())
            .chain(self.embedders.iter().map(|e| e.name.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(generate::chat))
        .route("/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completion))
        .route("/completions", post(generate::completion))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/v1/reranking", post(rerank::rerank))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/apply-template", post(misc::apply_template))
        .route("/metrics", get(misc::metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    // Open without a key, as llama-server: liveness and what is served.
    let open = Router::new()
        .route("/health", get(misc::health))
        .route("/v1/models", get(misc::models))
        .route("/models", get(misc::models))
        .merge(crate::webui::routes(state.webui));
    open.merge(api)
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|req: Request| async move {
            ApiError::method_not_allowed(format!(
                "{} is not a method of {}: see the API's endpoints in the README",
                req.method(),
                req.uri().path()
            ))
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            access_log::log_requests,
        ))
        .with_state(state)
}

/// With `--api-key`/`--api-key-file`, every endpoint but `/health` and
/// the model list wants `Bearer KEY`.
async fn auth(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if s.api_keys.required() {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| s.api_keys.accepts(g)) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}
