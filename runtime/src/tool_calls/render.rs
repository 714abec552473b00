//! The conversation as the chat template wants it when tools are involved:
//! templates that know tools (Hermes, Llama 3) get the `tools` variable and
//! the history's calls with their arguments as objects (what transformers'
//! documentation passes, and what `tojson` in those templates expects);
//! templates that know none get the tools described in a system message,
//! past calls written as the JSON the model is asked for, and tool results
//! as user turns (templates such as Gemma 3's refuse other roles).

use serde_json::{json, Value as Json};

use super::{ToolChoice, ToolFormat, ToolRequest};

/// `messages` (OpenAI's: `role`, `content` text, `tool_calls`,
/// `tool_call_id`, `name`) rewritten for a template speaking `format`, and
/// the `tools` template variable (None: leave it undefined). `tools` is
/// None, or its choice is `None`, when no tool may be called; past calls in
/// the history are rendered all the same.
pub fn conversation(
    format: ToolFormat,
    messages: &[Json],
    tools: Option<&ToolRequest>,
) -> (Vec<Json>, Option<Json>) {
    let offered = tools.filter(|t| t.choice != ToolChoice::None && !t.tools.is_empty());
    match format {
        ToolFormat::Hermes | ToolFormat::Llama3 => {
            let msgs = messages.iter().map(arguments_as_objects).collect();
            let var =
                offered.map(|t| Json::Array(t.tools.iter().map(|t| t.spec.clone()).collect()));
            (msgs, var)
        }
        ToolFormat::Generic => {
            let mut msgs: Vec<Json> = messages.iter().map(generic_turn).collect();
            if let Some(t) = offered {
                let text = generic_instructions(t);
                match msgs.first_mut() {
                    Some(first) if first["role"] == "system" => {
                        let old = first["content"].as_str().unwrap_or("").to_string();
                        first["content"] = json!(format!("{old}\n\n{text}").trim_start());
                    }
                    _ => msgs.insert(0, json!({"role": "system", "content": text})),
                }
            }
            (msgs, None)
        }
    }
}

/// Each call's `function.arguments`, sent as a JSON string, as the object
/// it holds (`arguments_value`).
fn arguments_as_objects(m: &Json) -> Json {
    let mut m = m.clone();
    if let Some(calls) = m.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
        for call in calls {
            if let Some(args) = call.pointer_mut("/function/arguments") {
                *args = arguments_value(args);
            }
        }
    }
    m
}

/// A call's arguments: the object a JSON string holds, else as given.
fn arguments_value(args: &Json) -> Json {
    args.as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| args.clone())
}

/// One turn for a template that knows no tools.
fn generic_turn(m: &Json) -> Json {
    let content = m.get("content").and_then(|c| c.as_str()).unwrap_or("");
    match m.get("role").and_then(|r| r.as_str()) {
        Some("assistant") if m.get("tool_calls").is_some_and(|c| c.is_array()) => {
            let calls: Vec<Json> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = &c["function"];
                    json!({"name": f["name"], "arguments": arguments_value(&f["arguments"])})
                })
                .collect();
            let call = json!({ "tool_calls": calls }).to_string();
            let text = if content.is_empty() {
                call
            } else {
                format!("{content}\n{call}")
            };
            json!({"role": "assistant", "content": text})
        }
        Some("tool") => {
            let mut result = json!({ "content": content });
            if let Some(id) = m.get("tool_call_id").filter(|v| v.is_string()) {
                result["tool_call_id"] = id.clone();
            }
            if let Some(name) = m.get("name").filter(|v| v.is_string()) {
                result["name"] = name.clone();
            }
            json!({"role": "user", "content": json!({ "tool_result": result }).to_string()})
        }
        _ => json!({"role": m["role"], "content": content}),
    }
}

/// The system text that offers the tools to a model whose template does
/// not.
fn generic_instructions(t: &ToolRequest) -> String {
    let mut s =
        String::from("You can call these tools (each with a JSON Schema of its arguments):\n");
    for tool in &t.tools {
        let f = tool.spec.get("function").unwrap_or(&tool.spec);
        s.push_str(&f.to_string());
        s.push('\n');
    }
    s.push_str(
        "\nTo call tools, answer with only this JSON: {\"tool_calls\": [{\"name\": \"TOOL_NAME\", \"arguments\": {...}}]}",
    );
    match &t.choice {
        ToolChoice::Required => s.push_str("\nYou must call at least one tool."),
        ToolChoice::Named(n) => s.push_str(&format!("\nYou must call `{n}`.")),
        _ => s.push_str("\nOtherwise, answer normally."),
    }
    if !t.parallel {
        s.push_str("\nCall one tool at a time.");
    }
    s
}
