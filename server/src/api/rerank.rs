//! `POST /v1/rerank` (also `/rerank`, `/v1/reranking`), in the shape
//! llama-server, Jina and Cohere share: `query`, `documents` (strings, or
//! `{"text": ...}` objects), `top_n`, `return_documents`; the answer's
//! `results` are `{index, relevance_score}` sorted best first.
//! `relevance_score` is the sigmoid of the reranker's logit (what
//! sentence-transformers' `CrossEncoder.predict` gives); `truncate` cuts
//! pairs longer than the model takes instead of refusing them;
//! `instruction` replaces a decoder reranker's task description
//! (Qwen3-Reranker's "Given a web search query, ...").

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::error::ApiError;
use super::request::parse_body;
use super::Shared;
use crate::worker::embed::EmbedJob;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RerankRequest {
    model: Option<String>,
    query: String,
    documents: Vec<Value>,
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: bool,
    #[serde(default)]
    truncate: bool,
    instruction: Option<String>,
}

/// The texts of `documents`: strings or `{"text": string}`.
fn documents(docs: Vec<Value>) -> Result<Vec<String>, ApiError> {
    if docs.is_empty() {
        return Err(
            ApiError::bad_request("`documents` is an empty list: give at least one")
                .with_param("documents"),
        );
    }
    docs.into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            Value::String(s) => Ok(s),
            Value::Object(mut o) => match o.remove("text") {
                Some(Value::String(s)) => Ok(s),
                _ => Err(ApiError::bad_request(format!(
                    "`documents[{i}]` is an object without a string `text`"
                ))
                .with_param("documents")),
            },
            _ => Err(ApiError::bad_request(format!(
                "`documents[{i}]` is not a string (or an object with `text`)"
            ))
            .with_param("documents")),
        })
        .collect()
}

pub async fn rerank(State(s): State<Shared>, body: Bytes) -> Response {
    let run = async {
        let r: RerankRequest = parse_body(&body)?;
        let m = s.embedder(r.model.as_deref(), true)?;
        if r.top_n == Some(0) {
            return Err(ApiError::bad_request("`top_n` must be at least 1").with_param("top_n"));
        }
        let docs = documents(r.documents)?;
        let (tx, rx) = oneshot::channel();
        m.send(EmbedJob::Rerank {
            query: r.query,
            documents: docs.clone(),
            truncate: r.truncate,
            instruction: r.instruction,
            reply: tx,
        })?;
        let out = rx
            .await
            .map_err(|_| ApiError::internal(format!("model `{}` has stopped", m.name)))??;
        let mut order: Vec<usize> = (0..out.scores.len()).collect();
        // Best first; ties keep the documents' order.
        order.sort_by(|&a, &b| out.scores[b].logit.total_cmp(&out.scores[a].logit));
        order.truncate(r.top_n.unwrap_or(order.len()));
        let results: Vec<Value> = order
            .into_iter()
            .map(|i| {
                let mut v = json!({"index": i, "relevance_score": out.scores[i].relevance, "logit": out.scores[i].logit});
                if r.return_documents {
                    v["document"] = json!({"text": docs[i]});
                }
                v
            })
            .collect();
        Ok::<_, ApiError>(
            Json(json!({
                "object": "list",
                "model": m.name,
                "results": results,
                "usage": {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens},
            }))
            .into_response(),
        )
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_strings_or_text_objects() {
        assert_eq!(
            documents(vec![json!("a"), json!({"text": "b"})]).unwrap(),
            vec!["a", "b"]
        );
        for (v, want) in [
            (vec![], "empty list"),
            (vec![json!(1)], "`documents[0]` is not a string"),
            (
                vec![json!("a"), json!({"title": "x"})],
                "`documents[1]` is an object without",
            ),
        ] {
            let e = documents(v).unwrap_err().body().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
