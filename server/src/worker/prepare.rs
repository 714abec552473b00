//! From a request to token ids (and preprocessed images), on the worker:
//! the chat template, the tokenizer and the context check; and the quick
//! jobs (tokenize, detokenize, apply the template).

use std::hash::{Hash, Hasher};

use mllm_runtime::images::{self, ImageTokens, Images, Turn};
use mllm_runtime::model_files::ModelFiles;
use mllm_runtime::prompt;
use mllm_runtime::tool_calls::ToolRequest;
use serde_json::json;

use super::PreparedPrompt;
use crate::api::error::{engine_message, ApiError};
use crate::api::request::Message;

/// A prompt ready for a slot.
pub struct Prepared {
    pub ids: Vec<u32>,
    /// Images with their tokens and a key identifying their pixels.
    pub images: Option<(Images, ImageTokens, u64)>,
}

fn bad(e: mllm_runtime::Error) -> ApiError {
    ApiError::bad_request(engine_message(&e))
}

fn tokenizer(files: &ModelFiles) -> Result<&mllm_runtime::tokenizer::Tokenizer, ApiError> {
    files
        .tokenizer()
        .map_err(|e| ApiError::internal(engine_message(&e)))
}

pub fn prompt(
    files: &ModelFiles,
    p: &PreparedPrompt,
    context: usize,
) -> Result<Prepared, ApiError> {
    let tok = tokenizer(files)?;
    let prepared = match p {
        PreparedPrompt::Text(t) => Prepared {
            ids: tok
                .encode(t, true)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            images: None,
        },
        PreparedPrompt::Ids(ids) => {
            if let Some(bad) = ids.iter().find(|&&i| i as usize >= tok.vocab_size()) {
                return Err(ApiError::bad_request(format!(
                    "token id {bad} is out of range: the vocabulary has {} tokens",
                    tok.vocab_size()
                ))
                .with_param("prompt"));
            }
            Prepared {
                ids: ids.clone(),
                images: None,
            }
        }
        PreparedPrompt::Chat {
            messages,
            images,
            enable_thinking,
            truncate,
            tools,
        } => {
            if files.chat_template.is_none() {
                return Err(ApiError::bad_request(format!(
                    "{} has no chat template: use /v1/completions with a plain prompt",
                    files.path.display()
                )));
            }
            let c = Conversation {
                images,
                enable_thinking: *enable_thinking,
                tools: tools.as_ref(),
            };
            let first = chat(files, messages, &c)?;
            if !*truncate || first.ids.len() < context {
                first
            } else {
                truncated(files, messages, &c, context)?
            }
        }
    };
    if prepared.ids.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty").with_param("prompt"));
    }
    if prepared.ids.len() >= context {
        return Err(ApiError::bad_request(format!(
            "the prompt has {} tokens but the context is {context} tokens (and at least one must be left to generate); shorten the prompt, start the server with a larger --ctx-size, or (a chat) send \"truncate\": true to drop its oldest turns",
            prepared.ids.len()
        ))
        .with_param("messages"));
    }
    Ok(prepared)
}

/// What a conversation's messages are rendered with.
struct Conversation<'a> {
    images: &'a [mllm_runtime::image_preprocess::RgbImage],
    enable_thinking: Option<bool>,
    tools: Option<&'a ToolRequest>,
}

/// A conversation's ids (and images) through the chat template.
fn chat(files: &ModelFiles, messages: &[Message], c: &Conversation) -> Result<Prepared, ApiError> {
    let (images, enable_thinking) = (c.images, c.enable_thinking);
    let tok = tokenizer(files)?;
    if images.is_empty() {
        let text = render(files, messages, enable_thinking, c.tools)?;
        return Ok(Prepared {
            ids: tok
                .encode(&text, false)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            images: None,
        });
    }
    let (imgs, spec) = images::from_decoded(files, images).map_err(bad)?;
    let turns: Vec<Turn> = messages
        .iter()
        .map(|m| Turn::new(&m.role, &m.text, m.images.len()))
        .collect();
    let text =
        images::conversation_text(files, &turns, &imgs, &spec, enable_thinking).map_err(bad)?;
    let ids = tok
        .encode(&text, false)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let key = image_key(images);
    Ok(Prepared {
        ids,
        images: Some((imgs, spec, key)),
    })
}

/// `"truncate": true` on a conversation over the context: the oldest
/// turns (a message and the answers and tool results after it) are
/// dropped, with their images, until it fits; system messages and the
/// last message stay, and if those alone do not fit it is a 400 as without
/// `truncate`.
fn truncated(
    files: &ModelFiles,
    messages: &[Message],
    c: &Conversation,
    context: usize,
) -> Result<Prepared, ApiError> {
    let mut msgs = messages.to_vec();
    let mut imgs = c.images.to_vec();
    while let Some(first) = msgs.iter().position(|m| m.role != "system") {
        let mut end = first + 1;
        while end < msgs.len() && !matches!(msgs[end].role.as_str(), "user" | "system") {
            end += 1;
        }
        if end >= msgs.len() {
            break; // the last message stays
        }
        let before: usize = msgs[..first].iter().map(|m| m.images.len()).sum();
        let dropped: usize = msgs[first..end].iter().map(|m| m.images.len()).sum();
        imgs.drain(before..before + dropped);
        msgs.drain(first..end);
        let p = chat(
            files,
            &msgs,
            &Conversation {
                images: &imgs,
                ..*c
            },
        )?;
        if p.ids.len() < context {
            return Ok(p);
        }
    }
    chat(
        files,
        &msgs,
        &Conversation {
            images: &imgs,
            ..*c
        },
    )
}

/// What identifies a request's images for prefix reuse: their sizes and pixels.
fn image_key(images: &[mllm_runtime::image_preprocess::RgbImage]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for i in images {
        (i.width, i.height).hash(&mut h);
        i.data.hash(&mut h);
    }
    h.finish()
}

pub fn template(
    files: &ModelFiles,
    messages: &[Message],
    enable_thinking: Option<bool>,
) -> Result<String, ApiError> {
    if messages.iter().any(|m| !m.images.is_empty()) {
        return Err(ApiError::bad_request(
            "/apply-template renders text only; remove the image parts",
        ));
    }
    render(files, messages, enable_thinking, None)
}

/// A text conversation through the template, with the tools offered and
/// past calls written as the template's tool-call format wants them.
fn render(
    files: &ModelFiles,
    messages: &[Message],
    enable_thinking: Option<bool>,
    tools: Option<&ToolRequest>,
) -> Result<String, ApiError> {
    let msgs: Vec<serde_json::Value> = messages.iter().map(Message::to_json).collect();
    prompt::render_with_tools(files, &msgs, tools, true, enable_thinking).map_err(bad)
}

pub fn tokenize(
    files: &ModelFiles,
    text: &str,
    add_special: bool,
    with_pieces: bool,
) -> Result<serde_json::Value, ApiError> {
    let tok = tokenizer(files)?;
    let ids = tok
        .encode(text, add_special)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !with_pieces {
        return Ok(json!({ "tokens": ids }));
    }
    let tokens: Vec<_> = ids
        .iter()
        .map(|&id| json!({ "id": id, "piece": tok.decode(&[id], false).unwrap_or_default() }))
        .collect();
    Ok(json!({ "tokens": tokens }))
}

pub fn detokenize(files: &ModelFiles, ids: &[u32]) -> Result<String, ApiError> {
    tokenizer(files)?
        .decode(ids, false)
        .map_err(|e| ApiError::bad_request(e.to_string()).with_param("tokens"))
}

/// Whether a prompt ends inside an opened `<think>` (templates that start
/// the model's reasoning for it): the last few tokens, decoded.
pub fn opens_thinking(files: &ModelFiles, ids: &[u32]) -> bool {
    let Ok(tok) = files.tokenizer() else {
        return false;
    };
    let tail = &ids[ids.len().saturating_sub(6)..];
    tok.decode(tail, false)
        .is_ok_and(|t| t.trim_end().ends_with("<think>"))
}
