//! Tool calls (OpenAI's `tools`): the format a chat template speaks, the
//! conversation as that template wants it (`render`), an answer parsed into
//! calls, whole or as it streams (`parse`), and the grammar that makes a
//! forced call always parse (`grammar`). Front ends (the server) own the
//! request's wire format; this owns what depends on the model.

use serde_json::Value as Json;

pub mod grammar;
pub mod parse;
pub mod render;

pub use parse::{parse, Parsed, ToolStream};

/// One function the model may call, as the request gave it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The JSON Schema of its arguments (an object's).
    pub parameters: Json,
    /// The whole `{"type": "function", "function": {...}}` entry, which
    /// templates render as written.
    pub spec: Json,
}

/// OpenAI's `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default when tools are given).
    Auto,
    /// No call: tools are neither shown nor parsed.
    None,
    /// At least one call, of any tool.
    Required,
    /// A call of this function.
    Named(String),
}

/// What a request asks of tools.
#[derive(Clone, Debug)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// More than one call in one answer (OpenAI's default: true).
    pub parallel: bool,
}

impl ToolRequest {
    /// A call must come: the answer is generated under `grammar::forced`.
    pub fn forced(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// The tools a call may name (`Named`: that one).
    pub fn callable(&self) -> Vec<&Tool> {
        match &self.choice {
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            ToolChoice::None => vec![],
            _ => self.tools.iter().collect(),
        }
    }
}

/// One call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON object's text (OpenAI sends a string).
    pub arguments: String,
}

/// How a model writes calls, read off its chat template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>`, one
    /// block per call: Qwen2.5, Qwen3 (and their VL models), SmolLM3,
    /// Hermes.
    Hermes,
    /// A bare `{"name": .., "parameters": {..}}` object, after an optional
    /// `<|python_tag|>`: Llama 3.1-3.3 (tool results are `ipython` turns).
    Llama3,
    /// A template that knows no tools (SmolLM2, Gemma 3, Llama 2): the
    /// tools are described in a system message and the model answers
    /// `{"tool_calls": [{"name": .., "arguments": {..}}]}`.
    Generic,
}

impl ToolFormat {
    /// The format `template` (a Jinja source) renders tool calls in.
    pub fn detect(template: &str) -> ToolFormat {
        if !template.contains("tools") {
            ToolFormat::Generic
        } else if template.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template.contains("ipython") || template.contains("<|python_tag|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The key that holds a call's arguments.
    pub fn arguments_key(self) -> &'static str {
        match self {
            ToolFormat::Llama3 => "parameters",
            ToolFormat::Hermes | ToolFormat::Generic => "arguments",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Generic => "generic",
        }
    }
}

/// A fresh call id (`call_` and 24 hex digits), unique within the process
/// and unlikely across processes.
pub fn call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("call_{t:016x}{:08x}", n as u32)
}

#[cfg(test)]
mod tests;
