//! No request field is silently ignored: every top-level field of a chat or
//! completion request is one this server honours, one that only describes
//! the caller (accepted and ignored, as OpenAI's docs allow: `user`,
//! `metadata`, `store`, `service_tier`, `safety_identifier`,
//! `prompt_cache_key`), or a 400 naming it and saying what to do instead.
//! A client that asks for audio, predicted outputs or a field with a typo
//! learns so, instead of getting an answer that quietly ignored it.

use serde_json::Value;

use super::error::ApiError;

/// Fields both endpoints honour (OpenAI's and llama-server's / vLLM's
/// extensions that `request::Common` reads).
const COMMON: &[&str] = &[
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "n",
    "stream",
    "stream_options",
    "ignore_eos",
    "truncate",
    "response_format",
    "json_schema",
    "grammar",
    "logit_bias",
    "reasoning_format",
    "reasoning_effort",
    // Refused by `request::Common` with their own messages.
    "functions",
    "function_call",
];

const CHAT: &[&str] = &[
    "messages",
    "logprobs",
    "top_logprobs",
    "chat_template_kwargs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "modalities",
];

const COMPLETION: &[&str] = &["prompt", "logprobs", "echo", "best_of", "suffix"];

/// Describe the caller; accepted and ignored.
const CALLER: &[&str] = &[
    "user",
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
];

/// OpenAI fields this server cannot honour, with what to do instead.
fn unsupported(name: &str) -> Option<&'static str> {
    Some(match name {
        "audio" => "audio output is not supported; ask for text",
        "prediction" => {
            "predicted outputs are not supported; send the request without `prediction`"
        }
        "verbosity" => {
            "`verbosity` is not supported; say how long the answer should be in the prompt"
        }
        "web_search_options" => "web search is not available on this server",
        _ => return None,
    })
}

fn refuse(name: &str, why: String) -> ApiError {
    ApiError::bad_request(why).with_param(name)
}

/// Checks a chat request's fields (`chat` true) or a completion's.
pub fn check(body: &[u8], chat: bool) -> Result<(), ApiError> {
    // A body that is not an object is `request::parse`'s to report.
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let own = if chat { CHAT } else { COMPLETION };
    for (name, v) in &fields {
        let name = name.as_str();
        if let Some(why) = unsupported(name) {
            return Err(refuse(name, format!("`{name}`: {why}")));
        }
        if !(COMMON.contains(&name) || own.contains(&name) || CALLER.contains(&name)) {
            // The other endpoint's own fields.
            let other = if chat { COMPLETION } else { CHAT };
            let hint = if other.contains(&name) {
                format!(
                    " (it belongs to {})",
                    if chat {
                        "/v1/completions"
                    } else {
                        "/v1/chat/completions"
                    }
                )
            } else {
                String::new()
            };
            return Err(refuse(
                name,
                format!("`{name}` is not a field this server knows{hint}; remove it (docs/serve.md lists the fields)"),
            ));
        }
        match (name, v) {
            ("modalities", Value::Array(m)) if m.iter().all(|x| x == "text") => {}
            ("modalities", _) => {
                return Err(refuse(
                    name,
                    "`modalities`: only [\"text\"] is supported".into(),
                ))
            }
            ("best_of", v) if !(v.is_null() || v == 1) => {
                return Err(refuse(
                    name,
                    "`best_of` must be 1: this server returns one completion per request".into(),
                ))
            }
            ("suffix", v) if !(v.is_null() || v == "") => {
                return Err(refuse(
                    name,
                    "`suffix` (fill-in-the-middle) is not supported; send the prompt alone".into(),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: &str, chat: bool) -> Option<String> {
        check(body.as_bytes(), chat).err().map(|e| {
            let b = e.body();
            b["error"]["param"].as_str().unwrap_or_default().to_string()
        })
    }

    #[test]
    fn every_field_is_honoured_ignored_or_refused_by_name() {
        let ok = r#"{"model": "m", "messages": [], "user": "u", "metadata": {}, "store": false,
            "service_tier": "auto", "tools": [], "modalities": ["text"], "temperature": 1}"#;
        assert_eq!(param(ok, true), None);
        assert_eq!(
            param(r#"{"prompt": "x", "best_of": 1, "suffix": ""}"#, false),
            None
        );
        for (body, chat, named) in [
            (r#"{"messages": [], "audio": {}}"#, true, "audio"),
            (r#"{"messages": [], "prediction": {}}"#, true, "prediction"),
            (r#"{"messages": [], "temprature": 0}"#, true, "temprature"),
            (
                r#"{"messages": [], "modalities": ["text", "audio"]}"#,
                true,
                "modalities",
            ),
            (r#"{"messages": [], "echo": true}"#, true, "echo"),
            (r#"{"prompt": "x", "best_of": 3}"#, false, "best_of"),
            (r#"{"prompt": "x", "suffix": "end"}"#, false, "suffix"),
            (r#"{"prompt": "x", "tools": []}"#, false, "tools"),
        ] {
            assert_eq!(param(body, chat).as_deref(), Some(named), "{body}");
        }
        let e = check(br#"{"prompt": "x", "messages": []}"#, false).unwrap_err();
        assert!(e.body()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/chat/completions"));
    }
}
