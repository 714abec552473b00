//! An answer read as tool calls: `parse` for a whole answer, `ToolStream`
//! for one that streams (text before a call streams on; from the first
//! sign of a call the rest is held until the answer ends, then parsed).
//! A call must name one of the request's tools and carry an object of
//! arguments; anything else is text, so a model that merely talks about
//! JSON is answered as text.

use serde_json::Value as Json;

use super::{call_id, ToolCall, ToolFormat, ToolRequest};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

/// An answer split into its text and its calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

/// `text` read as `format`'s calls of `tools`; None when it holds none.
pub fn parse(format: ToolFormat, text: &str, tools: &ToolRequest) -> Option<Parsed> {
    let callable: Vec<&str> = tools.callable().iter().map(|t| t.name.as_str()).collect();
    let call = |v: &Json| one_call(v, format, &callable);
    match format {
        ToolFormat::Hermes => {
            let mut content = String::new();
            let mut calls = vec![];
            let mut rest = text;
            while let Some(i) = rest.find(OPEN) {
                content.push_str(&rest[..i]);
                let after = &rest[i + OPEN.len()..];
                let (body, next) = match after.find(CLOSE) {
                    Some(j) => (&after[..j], &after[j + CLOSE.len()..]),
                    None => (after, ""),
                };
                calls.push(
                    serde_json::from_str::<Json>(body.trim())
                        .ok()
                        .and_then(|v| call(&v))?,
                );
                rest = next;
            }
            content.push_str(rest);
            (!calls.is_empty()).then(|| Parsed {
                content: content.trim().to_string(),
                calls,
            })
        }
        ToolFormat::Llama3 | ToolFormat::Generic => {
            let body = text.trim();
            let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body).trim();
            let v: Json = serde_json::from_str(body).ok()?;
            let items: Vec<&Json> = match (&v, format) {
                (Json::Object(o), ToolFormat::Generic) => {
                    match (o.get("tool_calls"), o.get("tool_call")) {
                        (Some(Json::Array(a)), _) if o.len() == 1 => a.iter().collect(),
                        (_, Some(c)) if o.len() == 1 => vec![c],
                        _ => return None,
                    }
                }
                (Json::Array(a), _) => a.iter().collect(),
                (Json::Object(_), _) => vec![&v],
                _ => return None,
            };
            let calls = items.into_iter().map(call).collect::<Option<Vec<_>>>()?;
            (!calls.is_empty()).then(|| Parsed {
                content: String::new(),
                calls,
            })
        }
    }
}

/// `{"name": .., "arguments"|"parameters": {..}}` naming a callable tool.
fn one_call(v: &Json, format: ToolFormat, callable: &[&str]) -> Option<ToolCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?;
    if !callable.contains(&name) {
        return None;
    }
    let args = o
        .get(format.arguments_key())
        .or_else(|| o.get("arguments"))
        .or_else(|| o.get("parameters"));
    let arguments = match args {
        None => "{}".to_string(),
        Some(a @ Json::Object(_)) => a.to_string(),
        // Some models write the arguments as a JSON string.
        Some(Json::String(s)) if serde_json::from_str::<Json>(s).is_ok_and(|a| a.is_object()) => {
            s.clone()
        }
        Some(_) => return None,
    };
    Some(ToolCall {
        id: call_id(),
        name: name.to_string(),
        arguments,
    })
}

/// Splits a streamed answer: `push` returns the text that is surely not
/// part of a call; `finish` parses what was held.
pub struct ToolStream {
    format: ToolFormat,
    tools: ToolRequest,
    /// Text not yet given out: a possible start of a call, or the call.
    held: String,
    /// A call has begun: everything from here on is held.
    capturing: bool,
    /// Text has been given out (a JSON call must start the answer).
    started: bool,
}

impl ToolStream {
    pub fn new(format: ToolFormat, tools: ToolRequest) -> ToolStream {
        ToolStream {
            format,
            tools,
            held: String::new(),
            capturing: false,
            started: false,
        }
    }

    /// Takes the next piece of answer; returns the text safe to show now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.capturing {
            return String::new();
        }
        match self.format {
            ToolFormat::Hermes => {
                if let Some(i) = self.held.find(OPEN) {
                    self.capturing = true;
                    return self.held.drain(..i).collect();
                }
                // Hold back a tail that may grow into `<tool_call>`.
                let keep = (1..OPEN.len())
                    .rev()
                    .find(|&n| self.held.ends_with(&OPEN[..n]))
                    .unwrap_or(0);
                let cut = self.held.len() - keep;
                self.held.drain(..cut).collect()
            }
            ToolFormat::Llama3 | ToolFormat::Generic => {
                if self.started {
                    return std::mem::take(&mut self.held);
                }
                let lead = self.held.trim_start();
                if lead.is_empty() || PYTHON_TAG.starts_with(lead) {
                    return String::new(); // not decided yet
                }
                if lead.starts_with('{') || lead.starts_with('[') || lead.starts_with(PYTHON_TAG) {
                    self.capturing = true;
                    return String::new();
                }
                self.started = true;
                std::mem::take(&mut self.held)
            }
        }
    }

    /// The answer ended: the held text parsed into calls, or given back as
    /// text when it holds none.
    pub fn finish(&mut self) -> Parsed {
        let held = std::mem::take(&mut self.held);
        match parse(self.format, &held, &self.tools) {
            // Hermes' text before the call was already given out; any
            // text after it is kept.
            Some(p) => p,
            None => Parsed {
                content: held,
                calls: vec![],
            },
        }
    }
}
