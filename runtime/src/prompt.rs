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
