//! `POST /v1/embeddings` in OpenAI's shape: `input` a string or a list of
//! strings, `encoding_format` `float` or `base64` (little-endian f32, what
//! the official Python client asks for by default), `dimensions` (the
//! first N values, normalised again), and `truncate` (llama-server's and
//! TEI's: cut long inputs instead of refusing them). `user` describes the
//! caller and is accepted; any other field is a 400 naming it.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use mllm_runtime::embeddings::EmbedOptions;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::error::ApiError;
use super::request::parse_body;
use super::Shared;
use crate::worker::embed::EmbedJob;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct EmbeddingsRequest {
    model: Option<String>,
    input: Value,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
    #[serde(default)]
    truncate: bool,
    /// Describes the caller; accepted and not used.
    #[allow(dead_code)]
    user: Option<Value>,
}

/// The texts of `input`, or a 400 naming the item at fault.
fn texts(input: Value) -> Result<Vec<String>, ApiError> {
    let bad = |m: String, p: &str| ApiError::bad_request(m).with_param(p);
    match input {
        Value::String(s) => Ok(vec![s]),
        Value::Array(items) if items.is_empty() => Err(bad(
            "`input` is an empty list: give at least one text".into(),
            "input",
        )),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                Value::Number(_) | Value::Array(_) => Err(bad(
                    format!("`input[{i}]`: token ids are not accepted as input; send the text"),
                    "input",
                )),
                other => Err(bad(
                    format!("`input[{i}]` is {}, not a string", kind(&other)),
                    "input",
                )),
            })
            .collect(),
        other => Err(bad(
            format!(
                "`input` is {}: give a string or a list of strings",
                kind(&other)
            ),
            "input",
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

pub async fn embeddings(State(s): State<Shared>, body: Bytes) -> Response {
    let run = async {
        let r: EmbeddingsRequest = parse_body(&body)?;
        let base64 = match r.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "`encoding_format` must be \"float\" or \"base64\", got {other:?}"
                ))
                .with_param("encoding_format"))
            }
        };
        let m = s.embedder(r.model.as_deref(), false)?;
        if let Some(d) = r.dimensions {
            if d == 0 || d > m.info.dimension {
                return Err(ApiError::bad_request(format!(
                    "`dimensions` must be between 1 and the model's {}, got {d}",
                    m.info.dimension
                ))
                .with_param("dimensions"));
            }
        }
        let texts = texts(r.input)?;
        let (tx, rx) = oneshot::channel();
        m.send(EmbedJob::Embed {
            texts,
            opts: EmbedOptions {
                truncate: r.truncate,
                dimensions: r.dimensions,
                ..EmbedOptions::default()
            },
            reply: tx,
        })?;
        let out = rx
            .await
            .map_err(|_| ApiError::internal(format!("model `{}` has stopped", m.name)))??;
        let data: Vec<Value> = out
            .items
            .iter()
            .enumerate()
            .map(|(i, rows)| {
                let v = rows.first().map(Vec::as_slice).unwrap_or(&[]);
                let embedding = if base64 {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        Ok::<_, ApiError>(
            Json(json!({
                "object": "list",
                "data": data,
                "model": m.name,
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
    fn inputs_are_strings_or_lists_of_strings() {
        assert_eq!(texts(json!("a")).unwrap(), vec!["a"]);
        assert_eq!(texts(json!(["a", ""])).unwrap(), vec!["a", ""]);
        for (v, want) in [
            (json!([]), "empty list"),
            (json!([1, 2]), "`input[0]`: token ids"),
            (json!(["a", null]), "`input[1]` is null"),
            (json!({"a": 1}), "`input` is an object"),
            (json!(3), "`input` is a number"),
        ] {
            let e = texts(v).unwrap_err().body().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
