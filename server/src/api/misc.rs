//! The small endpoints: health, models, tokenize, detokenize,
//! apply-template, metrics.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::oneshot;

use super::error::ApiError;
use super::request::{self, DetokenizeRequest, TemplateRequest, TokenizeRequest};
use super::Shared;
use crate::worker::Job;

pub async fn health() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

pub async fn models(State(s): State<Shared>) -> Response {
    let data: Vec<_> = s
        .models
        .iter()
        .map(|m| {
            json!({
                "id": m.name,
                "object": "model",
                "created": m.info.created,
                "owned_by": "mllm",
                "meta": {
                    "n_ctx": m.info.context,
                    "slots": m.metrics.slots,
                    "vision": m.info.vision,
                    "chat_template": m.info.has_template,
                },
            })
        })
        .chain(s.embedders.iter().map(|e| {
            json!({
                "id": e.name,
                "object": "model",
                "created": e.info.created,
                "owned_by": "mllm",
                "meta": {
                    "embedding": !e.info.rerank,
                    "rerank": e.info.rerank,
                    "n_embd": e.info.dimension,
                    "max_input_tokens": e.info.max_tokens,
                    "pooling": e.info.pooling,
                },
            })
        }))
        .collect();
    Json(json!({ "object": "list", "data": data })).into_response()
}

/// Sends a quick job to the model and waits for its answer.
async fn ask<T>(
    s: &Shared,
    model: Option<&str>,
    job: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> Job,
) -> Result<T, ApiError> {
    let m = s.model(model)?;
    let (tx, rx) = oneshot::channel();
    m.send(job(tx))?;
    rx.await
        .map_err(|_| ApiError::internal(format!("model `{}` has stopped", m.name)))?
}

pub async fn tokenize(State(s): State<Shared>, body: Bytes) -> Response {
    let run = async {
        let r: TokenizeRequest = request::parse_body(&body)?;
        let v = ask(&s, r.model.as_deref(), |reply| Job::Tokenize {
            text: r.content,
            add_special: r.add_special,
            with_pieces: r.with_pieces,
            reply,
        })
        .await?;
        Ok::<_, ApiError>(Json(v).into_response())
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

pub async fn detokenize(State(s): State<Shared>, body: Bytes) -> Response {
    let run = async {
        let r: DetokenizeRequest = request::parse_body(&body)?;
        let text = ask(&s, r.model.as_deref(), |reply| Job::Detokenize {
            ids: r.tokens,
            reply,
        })
        .await?;
        Ok::<_, ApiError>(Json(json!({ "content": text })).into_response())
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

pub async fn apply_template(State(s): State<Shared>, body: Bytes) -> Response {
    let run = async {
        let r: TemplateRequest = request::parse_body(&body)?;
        let chat = r.as_chat();
        let messages = chat.messages()?;
        let enable_thinking = chat.enable_thinking()?;
        let text = ask(&s, chat.common.model.as_deref(), |reply| Job::Template {
            messages,
            enable_thinking,
            reply,
        })
        .await?;
        Ok::<_, ApiError>(Json(json!({ "prompt": text })).into_response())
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

pub async fn metrics(State(s): State<Shared>) -> Response {
    let samples: Vec<_> = s
        .models
        .iter()
        .map(|m| crate::metrics::Sample {
            model: &m.name,
            metrics: &m.metrics,
            queued: m.queue_depth(),
        })
        .chain(s.embedders.iter().map(|e| crate::metrics::Sample {
            model: &e.name,
            metrics: &e.metrics,
            queued: e.queue_depth(),
        }))
        .collect();
    let text = crate::metrics::render(&samples, s.http_requests.load(Ordering::Relaxed));
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
