//! Conversations to prompt text through the model's chat template.

pub use mllm_converter::chat_template::ChatMessage as Message;

use crate::model_files::ModelFiles;
use crate::{Error as CliError, Result as CliResult};

/// Renders `messages` as transformers' `apply_chat_template(...,
/// tokenize=False)` would; `enable_thinking` is passed only when given.
pub fn render(
    files: &ModelFiles,
    messages: &[Message],
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
) -> CliResult<String> {
    let Some(t) = &files.chat_template else {
        return Err(CliError(format!(
            "error: {} has no chat template",
            files.path.display()
        )));
    };
    let mut extra = vec![];
    if let Some(e) = enable_thinking {
        extra.push(("enable_thinking", serde_json::Value::Bool(e)));
    }
    Ok(t.render(messages, add_generation_prompt, &extra)?)
}

/// Renders OpenAI-shaped messages (`role`, `content`, `tool_calls`,
/// `tool_call_id`, `name`) with any tools, in the tool-call format the
/// model's template speaks (`tool_calls::render`).
pub fn render_with_tools(
    files: &ModelFiles,
    messages: &[serde_json::Value],
    tools: Option<&crate::tool_calls::ToolRequest>,
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
) -> CliResult<String> {
    let Some(t) = &files.chat_template else {
        return Err(CliError(format!(
            "error: {} has no chat template",
            files.path.display()
        )));
    };
    let format = crate::tool_calls::ToolFormat::detect(t.source());
    let (msgs, tools_var) = crate::tool_calls::render::conversation(format, messages, tools);
    let mut extra = vec![];
    if let Some(e) = enable_thinking {
        extra.push(("enable_thinking", serde_json::Value::Bool(e)));
    }
    if let Some(v) = tools_var {
        extra.push(("tools", v));
    }
    Ok(t.render_json(
        &serde_json::Value::Array(msgs),
        add_generation_prompt,
        &extra,
    )?)
}
