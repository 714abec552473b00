//! Conversations to prompt text through the model's chat template.

pub use mllm_converter::chat_template::ChatMessage as Message;

use crate::model_files::ModelFiles;
use crate::{Error, Result};

/// Renders `messages` as transformers' `apply_chat_template(...,
/// tokenize=False)` would; `enable_thinking` is passed only when given.
pub fn render(
    files: &ModelFiles,
    messages: &[Message],
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
) -> Result<String> {
    let t = template(files)?;
    Ok(t.render(messages, add_generation_prompt, &thinking(enable_thinking))?)
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
) -> Result<String> {
    let t = template(files)?;
    let format = crate::tool_calls::ToolFormat::detect(t.source());
    let (msgs, tools_var) = crate::tool_calls::render::conversation(format, messages, tools);
    let mut extra = thinking(enable_thinking);
    if let Some(v) = tools_var {
        extra.push(("tools", v));
    }
    Ok(t.render_json(
        &serde_json::Value::Array(msgs),
        add_generation_prompt,
        &extra,
    )?)
}

fn template(files: &ModelFiles) -> Result<&mllm_converter::chat_template::ChatTemplate> {
    files
        .chat_template
        .as_ref()
        .ok_or_else(|| Error::invalid(format!("{} has no chat template", files.path.display())))
}

/// `enable_thinking` as a template variable, only when given.
fn thinking(enable_thinking: Option<bool>) -> Vec<(&'static str, serde_json::Value)> {
    enable_thinking
        .map(|e| ("enable_thinking", serde_json::Value::Bool(e)))
        .into_iter()
        .collect()
}
