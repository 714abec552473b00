//! The grammar of a forced call (`tool_choice` `required` or a named
//! function): the format's wrapping around a JSON object whose `name` is a
//! callable tool's and whose arguments follow that tool's parameter schema,
//! in llguidance's Lark (`%json {schema}` embeds a JSON Schema). Under it
//! every answer parses as calls, whatever the weights.

use serde_json::{json, Value as Json};

use super::{ToolFormat, ToolRequest};
use crate::generation::ConstraintSpec;

/// Most calls one forced answer may hold with `parallel_tool_calls`: real
/// models stop after a few; random or looping ones would go on until the
/// token limit and leave an answer that does not parse.
pub const MAX_PARALLEL_CALLS: usize = 8;

/// The constraint for `tools`' forced call in `format`; an error (the
/// client's: a named function that is not among the tools) says why.
pub fn forced(format: ToolFormat, tools: &ToolRequest) -> Result<ConstraintSpec, String> {
    let callable = tools.callable();
    if callable.is_empty() {
        return Err(match &tools.choice {
            super::ToolChoice::Named(n) => {
                format!("`tool_choice` names `{n}`, which is not one of `tools`")
            }
            _ => "`tool_choice` asks for a call but `tools` is empty".to_string(),
        });
    }
    let key = format.arguments_key();
    let calls: Vec<Json> = callable
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {
                    "name": { "const": t.name },
                    key: arguments_schema(&t.parameters),
                },
                "required": ["name", key],
                "additionalProperties": false,
            })
        })
        .collect();
    let one = if calls.len() == 1 {
        calls[0].clone()
    } else {
        json!({ "anyOf": calls })
    };
    let lark = match format {
        ToolFormat::Hermes => {
            let repeat = if tools.parallel {
                format!(" (\"\\n\" call){{0,{}}}", MAX_PARALLEL_CALLS - 1)
            } else {
                String::new()
            };
            format!(
                "start: call{repeat}\ncall: \"<tool_call>\\n\" body \"\\n</tool_call>\"\nbody: %json {}\n",
                bounded(one)
            )
        }
        ToolFormat::Llama3 => format!("start: %json {}\n", bounded(one)),
        ToolFormat::Generic => {
            let mut list = json!({ "type": "array", "items": one, "minItems": 1 });
            list["maxItems"] = json!(if tools.parallel {
                MAX_PARALLEL_CALLS
            } else {
                1
            });
            let whole = json!({
                "type": "object",
                "properties": { "tool_calls": list },
                "required": ["tool_calls"],
                "additionalProperties": false,
            });
            format!("start: %json {}\n", bounded(whole))
        }
    };
    Ok(ConstraintSpec::Lark(lark))
}

/// A tool's parameter schema as the arguments' schema: an object whatever
/// it says (OpenAI requires one). A missing or empty schema is a function
/// without parameters, whose arguments are `{}`.
fn arguments_schema(p: &Json) -> Json {
    match p {
        Json::Object(o) if !o.is_empty() => {
            let mut s = p.clone();
            if !o.contains_key("type") {
                s["type"] = json!("object");
            }
            s
        }
        _ => json!({ "type": "object", "properties": {}, "additionalProperties": false }),
    }
}

/// At most 4 whitespace characters between JSON tokens (a call is one
/// line in every format's examples; `response_format` allows 20): room for
/// the `": "` and `", "` models are trained on, none for padding a call
/// past the token limit.
fn bounded(mut schema: Json) -> Json {
    schema["x-guidance"] = json!({ "whitespace_pattern": "[\\x20\\x0A\\x09]{1,4}" });
    schema
}
