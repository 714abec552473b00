//! OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`, read into
//! the runtime's `ToolRequest`, and the answer's calls written back as
//! `message.tool_calls` / `delta.tool_calls`. What depends on the model
//! (its template's format, parsing, the forced-call grammar) is the
//! runtime's `tool_calls`.

use mllm_runtime::tool_calls::{Tool, ToolCall, ToolChoice, ToolRequest};
use serde_json::{json, Value};

use super::error::ApiError;
use super::request::Common;

fn bad(param: &str, m: String) -> ApiError {
    ApiError::bad_request(m).with_param(param)
}

/// The request's tools; None when it offers none.
pub fn tool_request(c: &Common) -> Result<Option<ToolRequest>, ApiError> {
    let tools = match &c.tools {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, t)| tool(i, t))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(bad("tools", "`tools` must be a list of functions".into())),
    };
    let choice = match &c.tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(
                    "tool_choice",
                    format!("`tool_choice` `{other}` is not one of auto, none, required, or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"),
                ))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(|n| n.as_str()) {
            Some(n) => ToolChoice::Named(n.to_string()),
            None => {
                return Err(bad(
                    "tool_choice",
                    "`tool_choice` must be auto, none, required, or {\"type\": \"function\", \"function\": {\"name\": ...}}".into(),
                ))
            }
        },
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Required | ToolChoice::Named(_) => Err(bad(
                "tool_choice",
                "`tool_choice` asks for a call but no `tools` are given".into(),
            )),
            _ => Ok(None),
        };
    }
    if let ToolChoice::Named(n) = &choice {
        if !tools.iter().any(|t| &t.name == n) {
            return Err(bad(
                "tool_choice",
                format!("`tool_choice` names `{n}`, which is not one of `tools`"),
            ));
        }
    }
    Ok(Some(ToolRequest {
        tools,
        choice,
        parallel: c.parallel_tool_calls.unwrap_or(true),
    }))
}

/// `tools[i]`: `{"type": "function", "function": {"name", "description",
/// "parameters"}}`.
fn tool(i: usize, t: &Value) -> Result<Tool, ApiError> {
    let param = format!("tools[{i}]");
    match t.get("type").and_then(|k| k.as_str()) {
        Some("function") => {}
        Some(other) => {
            return Err(bad(
                &param,
                format!("`tools[{i}].type` `{other}` is not supported: only `function` tools are"),
            ))
        }
        None => return Err(bad(&param, format!("`tools[{i}].type` must be `function`"))),
    }
    let f = t
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| bad(&param, format!("`tools[{i}].function` is missing")))?;
    let name = f
        .get("name")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(&param, format!("`tools[{i}].function.name` is missing")))?;
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(bad(
                &param,
                format!("`tools[{i}].function.parameters` must be a JSON Schema (an object)"),
            ))
        }
    };
    Ok(Tool {
        name: name.to_string(),
        parameters,
        spec: t.clone(),
    })
}

/// `message.tool_calls`.
pub fn calls_json(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })
        })
        .collect()
}

/// The stream's `delta.tool_calls` for each call, as OpenAI streams them:
/// a first delta with the id, type, name and empty arguments, then the
/// arguments.
pub fn call_deltas(calls: &[ToolCall]) -> Vec<Value> {
    let mut out = vec![];
    for (i, c) in calls.iter().enumerate() {
        out.push(json!({ "tool_calls": [{
            "index": i, "id": c.id, "type": "function",
            "function": { "name": c.name, "arguments": "" },
        }]}));
        out.push(json!({ "tool_calls": [{
            "index": i, "function": { "arguments": c.arguments },
        }]}));
    }
    out
}
