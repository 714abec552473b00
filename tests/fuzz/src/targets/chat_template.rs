//! Chat-template rendering with hostile templates and messages: the input
//! is a Jinja template and the messages (`PART`-separated). Messages that
//! parse as JSON are rendered as given (`render_json`, any shape); other
//! text becomes the content of a system and a user turn. Each template is
//! rendered with and without the generation prompt and with
//! `enable_thinking` false, and with special tokens set.

use mllm_converter::chat_template::{ChatMessage, ChatTemplate};

/// One fuzz input.
pub fn run(data: &[u8]) {
    let p = super::parts(data, 2);
    let Ok(source) = std::str::from_utf8(p[0]) else {
        return;
    };
    let Ok(t) = ChatTemplate::new(source, "fuzz template") else {
        return;
    };
    let t = t
        .with_special_token("bos_token", Some("<s>"))
        .with_special_token("eos_token", Some("</s>"));
    let messages = p.get(1).copied().unwrap_or_default();
    let no_think = [("enable_thinking", serde_json::Value::Bool(false))];
    match serde_json::from_slice::<serde_json::Value>(messages) {
        Ok(json) => {
            if t.render_json(&json, true, &[]).is_ok() {
                let _ = t.render_json(&json, false, &no_think);
            }
        }
        Err(_) => {
            let text = String::from_utf8_lossy(messages);
            let list = [
                ChatMessage::new("system", text.clone()),
                ChatMessage::new("user", text),
            ];
            if t.render(&list, true, &[]).is_ok() {
                let _ = t.render(&list, false, &no_think);
            }
        }
    }
}
