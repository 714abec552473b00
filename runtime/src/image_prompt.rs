//! Prompt text for images and videos: placeholders written out per turn,
//! the chat template with image parts, and each placeholder expanded to the
//! tokens its image takes (as the Hugging Face processors do before
//! tokenizing).

use serde_json::Value as Json;

use crate::images::{ImageTokens, Images};
use crate::model_files::ModelFiles;
use crate::videos;
use crate::{Error, Result};

/// The prompt text for a user turn with images, placeholders expanded to
/// one token per merged patch (see `conversation_text`).
pub fn prompt_text(
    files: &ModelFiles,
    system: Option<&str>,
    prompt: &str,
    images: &Images,
    spec: &ImageTokens,
    raw: bool,
    enable_thinking: Option<bool>,
) -> Result<String> {
    let mut turns = vec![];
    if let Some(s) = system {
        turns.push(Turn::new("system", s, 0));
    }
    turns.push(Turn::new("user", prompt, images.count()).with_videos(videos::count(images)));
    if raw {
        let inline = inline_placeholders(files, spec, images.count())?;
        let inline_v = inline_video_placeholders(files, spec, videos::count(images))?;
        let pad = token_text(files, Some(spec.image))?;
        let text = expand_placeholders(&format!("{inline}{inline_v}{prompt}"), &pad, images, spec)?;
        return videos::expand_video_placeholders(files, &text, images, spec);
    }
    conversation_text(files, &turns, images, spec, enable_thinking)
}

/// One message of a conversation with the number of images and videos
/// shown in it (they come before its text, images first, in order).
#[derive(Clone, Debug)]
pub struct Turn {
    pub role: String,
    pub text: String,
    pub images: usize,
    pub videos: usize,
}

impl Turn {
    pub fn new(role: &str, text: &str, images: usize) -> Turn {
        Turn {
            role: role.to_string(),
            text: text.to_string(),
            images,
            videos: 0,
        }
    }

    /// The turn showing `videos` videos (after its images).
    pub fn with_videos(mut self, videos: usize) -> Turn {
        self.videos = videos;
        self
    }
}

pub(crate) fn token_text(files: &ModelFiles, id: Option<i32>) -> Result<String> {
    let tok = files.tokenizer()?;
    match id {
        None => Ok(String::new()),
        Some(id) => tok.id_to_token(id as u32).ok_or_else(|| {
            Error::tokenizer(format!(
                "the tokenizer has no token {id}, which config.json names for images"
            ))
        }),
    }
}

/// `n` images written out: `<|vision_start|><|image_pad|><|vision_end|>`
/// each; `<image>` and a newline each for tiled views (as DeepSeek-OCR 2's
/// prompts are written).
fn inline_placeholders(files: &ModelFiles, spec: &ImageTokens, n: usize) -> Result<String> {
    let one = format!(
        "{}{}{}{}",
        token_text(files, spec.vision_start)?,
        token_text(files, Some(spec.image))?,
        token_text(files, spec.vision_end)?,
        if spec.tiled { "\n" } else { "" }
    );
    Ok(one.repeat(n))
}

/// `n` videos written out: `<|vision_start|><|video_pad|><|vision_end|>` each.
fn inline_video_placeholders(files: &ModelFiles, spec: &ImageTokens, n: usize) -> Result<String> {
    if n == 0 {
        return Ok(String::new());
    }
    let one = format!(
        "{}{}{}",
        token_text(files, spec.vision_start)?,
        token_text(files, spec.video)?,
        token_text(files, spec.vision_end)?
    );
    Ok(one.repeat(n))
}

/// Both kinds of placeholders of a turn, images first.
fn inline_all(files: &ModelFiles, spec: &ImageTokens, t: &Turn) -> Result<String> {
    Ok(inline_placeholders(files, spec, t.images)?
        + &inline_video_placeholders(files, spec, t.videos)?)
}

/// A conversation through the chat template (with a generation prompt),
/// each image placeholder expanded to one token per merged patch (as the
/// Hugging Face processor does before tokenizing). Turns with images reach
/// the template as content parts (`{"type": "image"}` per image, then the
/// text), as Qwen-VL templates expect; a template that ignores image parts
/// gets the placeholders written in front of the turn's text instead.
pub fn conversation_text(
    files: &ModelFiles,
    turns: &[Turn],
    images: &Images,
    spec: &ImageTokens,
    enable_thinking: Option<bool>,
) -> Result<String> {
    let shown: usize = turns.iter().map(|t| t.images).sum();
    let shown_v: usize = turns.iter().map(|t| t.videos).sum();
    if shown != images.count() || shown_v != videos::count(images) {
        return Err(Error::invalid(format!("the conversation shows {shown} images and {shown_v} videos but {} and {} were preprocessed",
            images.count(),
            videos::count(images)
        )));
    }
    let pad = token_text(files, Some(spec.image))?;
    let vpad = token_text(files, spec.video)?;
    let expand = |text: &str| -> Result<String> {
        let text = expand_placeholders(text, &pad, images, spec)?;
        videos::expand_video_placeholders(files, &text, images, spec)
    };
    let Some(t) = &files.chat_template else {
        let text: String = turns
            .iter()
            .map(|t| Ok(format!("{}{}", inline_all(files, spec, t)?, t.text)))
            .collect::<Result<Vec<_>>>()?
            .concat();
        return expand(&text);
    };
    let messages: Vec<Json> = turns
        .iter()
        .map(|t| {
            if t.images == 0 && t.videos == 0 {
                return serde_json::json!({"role": t.role, "content": t.text});
            }
            let mut parts = vec![serde_json::json!({"type": "image"}); t.images];
            parts.extend(vec![serde_json::json!({"type": "video"}); t.videos]);
            parts.push(serde_json::json!({"type": "text", "text": t.text}));
            serde_json::json!({"role": t.role, "content": parts})
        })
        .collect();
    let mut extra = vec![];
    if let Some(e) = enable_thinking {
        extra.push(("enable_thinking", Json::Bool(e)));
    }
    let text = match t.render_json(&Json::Array(messages), true, &extra) {
        Ok(r)
            if r.matches(pad.as_str()).count() == shown
                && (shown_v == 0 || r.matches(vpad.as_str()).count() == shown_v) =>
        {
            r
        }
        _ => {
            // A text-only template: the images go before each turn's text.
            let msgs = turns
                .iter()
                .map(|t| {
                    let inline = inline_all(files, spec, t)?;
                    Ok(crate::prompt::Message::new(
                        &t.role,
                        format!("{inline}{}", t.text),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            crate::prompt::render(files, &msgs, true, enable_thinking)?
        }
    };
    expand(&text)
}

/// Replaces the `i`-th `pad` in `text` by as many pads as image `i` has
/// merged patches.
pub fn expand_placeholders(
    text: &str,
    pad: &str,
    images: &Images,
    spec: &ImageTokens,
) -> Result<String> {
    let pieces: Vec<&str> = text.split(pad).collect();
    if pieces.len() != images.count() + 1 {
        return Err(Error::invalid(format!(
            "the prompt has {} image placeholders ({pad}) for {} images",
            pieces.len() - 1,
            images.count()
        )));
    }
    let mut out = String::with_capacity(text.len());
    for (i, piece) in pieces.iter().enumerate() {
        out.push_str(piece);
        if i < images.count() {
            out.push_str(&pad.repeat(images.tokens(i, spec)));
        }
    }
    Ok(out)
}
