//! `mllm template --model PATH --messages FILE.json`: prints the prompt the
//! chat template renders (what `run` and `chat` tokenize).

use crate::model_files;
use crate::prompt::{self, Message};
use crate::{CliError, CliResult};

pub fn run(
    model: &str,
    messages: &str,
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
) -> CliResult<()> {
    let files = model_files::open_without_weights(model)?;
    let text = std::fs::read_to_string(messages)
        .map_err(|e| CliError::invalid(format!("{messages}: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::invalid(format!("{messages}: not valid JSON: {e}")))?;
    let list = json
        .as_array()
        .or_else(|| json.get("messages").and_then(|m| m.as_array()))
        .ok_or_else(|| {
            CliError::invalid(format!(
                "{messages}: expected a JSON list of {{\"role\": ..., \"content\": ...}} messages"
            ))
        })?;
    let mut msgs = vec![];
    for (i, m) in list.iter().enumerate() {
        let role = m.get("role").and_then(|r| r.as_str());
        let content = m.get("content").and_then(|c| c.as_str());
        match (role, content) {
            (Some(r), Some(c)) => msgs.push(Message::new(r, c)),
            _ => {
                return Err(CliError::invalid(format!(
                    "{messages}: message {i} needs string fields \"role\" and \"content\""
                )))
            }
        }
    }
    print!(
        "{}",
        prompt::render(&files, &msgs, add_generation_prompt, enable_thinking)?
    );
    Ok(())
}
