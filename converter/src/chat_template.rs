//! Chat templates: the Jinja template a model ships (tokenizer_config.json's
//! `chat_template`, or GGUF `tokenizer.chat_template`) rendered with
//! minijinja, byte-identical to transformers'
//! `apply_chat_template(messages, tokenize=False, add_generation_prompt=..)`.
//!
//! What transformers' Jinja environment does and this mirrors:
//! `trim_blocks` and `lstrip_blocks` on, no autoescape, the loop-controls
//! extension (`{% break %}`), a `tojson` filter that is Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)` (`", "`/`": "` separators, no HTML escaping),
//! `raise_exception(msg)`, `strftime_now(fmt)`, the `{% generation %}` tag
//! (transparent when no assistant mask is asked for), and the variables
//! `messages`, `add_generation_prompt`, `tools`/`documents` (none), the
//! tokenizer's special tokens (`bos_token`, `eos_token`, `unk_token`,
//! `pad_token`) and any extra keyword (`enable_thinking`). Python string
//! methods (`.strip()`, `.split()`, `.startswith()`) come from
//! minijinja-contrib's pycompat.

use std::path::Path;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior, Value};
use serde::Serialize;

use crate::error::{ConvertError, Result};
use crate::tokenizer::Tokenizer;

mod limits;
mod python;

pub use limits::TemplateLimits;
use python::{strftime_now, tojson};

/// One chat turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the special tokens it may refer to.
pub struct ChatTemplate {
    /// Where the template came from, for error messages.
    origin: String,
    /// The template as written (tool-call formats are read off it).
    source: String,
    env: Environment<'static>,
    special_tokens: Vec<(&'static str, String)>,
    limits: TemplateLimits,
}

const TEMPLATE_NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`. `origin` names it in errors ("Qwen3's
    /// tokenizer_config.json", "the GGUF metadata of x.gguf").
    pub fn new(source: &str, origin: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        // keep_trailing_newline off is Jinja2's default too: the one newline
        // ending the template source goes.
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| template_error(origin, "cannot be set up", &e))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))
            .map_err(|e| template_error(origin, "does not compile", &e))?;
        let limits = TemplateLimits::from_env().map_err(ConvertError::Unsupported)?;
        let mut t = ChatTemplate {
            origin: origin.to_string(),
            source: source.to_string(),
            env,
            special_tokens: Vec::new(),
            limits,
        };
        t.set_limits(limits);
        Ok(t)
    }

    /// Bounds later renders (the defaults, or the environment's, are set
    /// by `new`).
    pub fn set_limits(&mut self, limits: TemplateLimits) {
        self.env.set_fuel(Some(limits.fuel));
        self.env.set_recursion_limit(limits.max_depth);
        self.limits = limits;
    }

    pub fn limits(&self) -> TemplateLimits {
        self.limits
    }

    /// The template's Jinja source, as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `tokenizer_config.json`'s `chat_template` (a string, or a list of
    /// `{name, template}` where "default" is taken) with the config's
    /// special tokens. Errors when the file has no template.
    pub fn from_tokenizer_config(path: &Path) -> Result<ChatTemplate> {
        let text = std::fs::read_to_string(path).map_err(|e| ConvertError::io(path, e))?;
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ConvertError::Corrupt(format!("{}: not valid JSON: {e}", path.display()))
        })?;
        let origin = path.display().to_string();
        let source = template_of_config(&config, &origin)?;
        let mut t = ChatTemplate::new(&source, &origin)?;
        for key in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            let token = match config.get(key) {
                Some(serde_json::Value::String(s)) => Some(s.as_str()),
                Some(serde_json::Value::Object(o)) => o.get("content").and_then(|c| c.as_str()),
                _ => None,
            };
            t = t.with_special_token(key, token);
        }
        Ok(t)
    }

    /// Takes the special token strings from a tokenizer.
    pub fn with_tokenizer(self, tok: &Tokenizer) -> ChatTemplate {
        self.with_special_token("bos_token", tok.bos_token())
            .with_special_token("eos_token", tok.eos_token())
            .with_special_token("unk_token", tok.unk_token())
            .with_special_token("pad_token", tok.pad_token())
    }

    /// Sets (or, with `None`, removes) one of `bos_token`, `eos_token`,
    /// `unk_token`, `pad_token`. transformers passes only the ones that are
    /// set, so an unset one is undefined in the template.
    pub fn with_special_token(mut self, name: &str, value: Option<&str>) -> ChatTemplate {
        let Some(name) = ["bos_token", "eos_token", "unk_token", "pad_token"]
            .into_iter()
            .find(|n| *n == name)
        else {
            return self;
        };
        self.special_tokens.retain(|(n, _)| *n != name);
        if let Some(v) = value {
            self.special_tokens.push((name, v.to_string()));
        }
        self
    }

    /// Renders `messages`. `extra` are further template variables (e.g.
    /// `("enable_thinking", false)`); they override the special tokens, as
    /// keyword arguments do in transformers.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &[(&str, serde_json::Value)],
    ) -> Result<String> {
        self.render_value(to_value(messages), add_generation_prompt, extra)
    }

    /// Renders messages given as JSON (for fields beyond role and content:
    /// `reasoning_content`, `tool_calls`). As transformers does, keys whose
    /// value is null are dropped and `reasoning_content` is filled from
    /// `thinking`/`reasoning` (and `thinking` from it). A message's keys
    /// reach the template as `role`, `content`, then the rest in the order
    /// given (serde_json's `preserve_order`), as a Python dict keeps them.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        extra: &[(&str, serde_json::Value)],
    ) -> Result<String> {
        let list = messages.as_array().ok_or_else(|| {
            ConvertError::Corrupt(format!(
                "chat template {}: messages must be a JSON array",
                self.origin
            ))
        })?;
        let mut normalized = Vec::with_capacity(list.len());
        for m in list {
            let obj = m.as_object().ok_or_else(|| {
                ConvertError::Corrupt(format!(
                    "chat template {}: each message must be a JSON object",
                    self.origin
                ))
            })?;
            let mut out: Vec<(String, serde_json::Value)> = obj
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // Stable: role first, content second, the rest as they were.
            out.sort_by_key(|(k, _)| match k.as_str() {
                "role" => 0,
                "content" => 1,
                _ => 2,
            });
            let reasoning = ["reasoning_content", "thinking", "reasoning"]
                .iter()
                .find_map(|k| obj.get(*k).filter(|v| !v.is_null()).cloned());
            if let Some(r) = reasoning {
                for key in ["thinking", "reasoning_content"] {
                    out.retain(|(k, _)| k != key);
                }
                out.insert(0, ("thinking".into(), r.clone()));
                out.push(("reasoning_content".into(), r));
            }
            normalized.push(Value::from_pairs(
                out.into_iter().map(|(k, v)| (k, to_value(v))),
            ));
        }
        self.render_value(Value::from(normalized), add_generation_prompt, extra)
    }

    fn render_value(
        &self,
        messages: Value,
        add_generation_prompt: bool,
        extra: &[(&str, serde_json::Value)],
    ) -> Result<String> {
        // What transformers' render() gets: special tokens, overridden by
        // the caller's keywords (which may also supply `tools`/`documents`,
        // else none), then `messages` and `add_generation_prompt`.
        let mut ctx: Vec<(String, Value)> = Vec::new();
        let mut set = |k: &str, v: Value| {
            ctx.retain(|(name, _)| name != k);
            ctx.push((k.to_string(), v));
        };
        set("tools", Value::from(()));
        set("documents", Value::from(()));
        for (k, v) in &self.special_tokens {
            set(k, Value::from(v.as_str()));
        }
        for (k, v) in extra {
            set(k, to_value(v));
        }
        set("messages", messages);
        set("add_generation_prompt", Value::from(add_generation_prompt));
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&self.origin, "is missing", &e))?;
        let mut out = limits::CappedOutput::new(self.limits.max_output);
        let rendered = template.render_captured_to(Value::from_pairs(ctx), &mut out);
        if let Err(e) = rendered {
            return Err(self.render_error(&e, out.overflowed));
        }
        String::from_utf8(out.buf).map_err(|_| {
            ConvertError::Corrupt(format!(
                "chat template ({}) rendered text that is not UTF-8",
                self.origin
            ))
        })
    }

    /// A render failure; running into a limit says which and how to raise it.
    fn render_error(&self, e: &Error, overflowed: bool) -> ConvertError {
        let l = &self.limits;
        let limit = if overflowed {
            Some(format!(
                "rendered more than {} bytes of text (MLLM_TEMPLATE_MAX_OUTPUT raises the limit)",
                l.max_output
            ))
        } else if e.kind() == ErrorKind::OutOfFuel {
            Some(format!(
                "used up its fuel of {} (instructions, and bytes of data / 64): does it loop without end or build huge values? \
                 (MLLM_TEMPLATE_FUEL raises the limit)",
                l.fuel
            ))
        } else if e.to_string().contains("recursion limit exceeded") {
            Some(format!(
                "nests calls more than {} deep: does a macro call itself without end? \
                 (MLLM_TEMPLATE_MAX_DEPTH raises the limit, up to 500)",
                l.max_depth
            ))
        } else {
            None
        };
        match limit {
            Some(m) => ConvertError::Corrupt(format!(
                "chat template ({}) was stopped: it {m}",
                self.origin
            )),
            None => template_error(&self.origin, "failed to render", e),
        }
    }
}

fn to_value<T: Serialize>(v: T) -> Value {
    Value::from(Serde(v))
}

/// The template of a parsed tokenizer_config.json.
/// Where a Hugging Face directory keeps its chat template, in the order
/// transformers 5 prefers: `chat_template.jinja` (what `save_pretrained`
/// writes now; a vision model's processor template too), the
/// `chat_template` of `tokenizer_config.json` (`tok_config`, already read),
/// then a processor's `chat_template.json`. Returns the source and the file.
pub fn find_in_dir(
    dir: &Path,
    tok_config: Option<&serde_json::Value>,
) -> Result<Option<(String, std::path::PathBuf)>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let s = std::fs::read_to_string(&jinja).map_err(|e| ConvertError::io(&jinja, e))?;
        return Ok(Some((s, jinja)));
    }
    let tc = dir.join("tokenizer_config.json");
    if let Some(c) = tok_config.filter(|c| c.get("chat_template").is_some_and(|t| !t.is_null())) {
        let s = template_of_config(c, &tc.display().to_string())?;
        return Ok(Some((s, tc)));
    }
    let json = dir.join("chat_template.json");
    if json.is_file() {
        let text = std::fs::read_to_string(&json).map_err(|e| ConvertError::io(&json, e))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ConvertError::Corrupt(format!("{}: not valid JSON: {e}", json.display()))
        })?;
        let s = template_of_config(&v, &json.display().to_string())?;
        return Ok(Some((s, json)));
    }
    Ok(None)
}

fn template_of_config(config: &serde_json::Value, origin: &str) -> Result<String> {
    match config.get("chat_template") {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Array(list)) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(|x| x.as_str()) == Some(n))
                    .and_then(|t| t.get("template"))
                    .and_then(|t| t.as_str())
            };
            named("default").map(str::to_string).ok_or_else(|| {
                let names: Vec<&str> = list.iter().filter_map(|t| t.get("name")?.as_str()).collect();
                ConvertError::Corrupt(format!(
                    "{origin}: chat_template lists templates {names:?} but none is named \"default\""
                ))
            })
        }
        Some(_) => Err(ConvertError::Corrupt(format!(
            "{origin}: chat_template must be a string or a list of {{name, template}}"
        ))),
        None => Err(ConvertError::NotFound(format!(
            "{origin}: no chat_template"
        ))),
    }
}

/// A template error with the template's origin and, from minijinja's debug
/// info, the line and source it failed at. A `raise_exception` message is
/// given as the template wrote it.
fn template_error(origin: &str, what: &str, e: &Error) -> ConvertError {
    let mut msg = format!("chat template ({origin}) {what}: ");
    if e.kind() == ErrorKind::InvalidOperation && e.detail().is_some_and(|d| d.starts_with(RAISED))
    {
        msg.push_str(e.detail().unwrap_or_default().trim_start_matches(RAISED));
    } else {
        msg.push_str(&e.to_string());
    }
    if let Some(line) = e.line() {
        msg.push_str(&format!(" (template line {line})"));
    }
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        msg.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    ConvertError::Corrupt(msg)
}

const RAISED: &str = "raise_exception: ";

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

/// `{% generation %}...{% endgeneration %}` marks assistant text for
/// transformers' assistant-token mask and renders its body unchanged.
/// minijinja has no such tag, so it becomes `{% if true %}...{% endif %}`,
/// keeping the whitespace-control markers.
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        // The block ends at the first `%}` after its `{%` (`{%}` does not
        // close itself).
        let Some(close) = tag[2..].find("%}").map(|i| i + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..close];
        let (open_mark, body) = split_marker_start(inner);
        let (body, close_mark) = split_marker_end(body);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{open_mark} {r} {close_mark}%}}")),
            None => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    out
}

fn split_marker_start(s: &str) -> (&str, &str) {
    match s.chars().next() {
        Some(c @ ('-' | '+')) => s.split_at(c.len_utf8()),
        _ => ("", s),
    }
}

fn split_marker_end(s: &str) -> (&str, &str) {
    match s.chars().last() {
        Some(c @ ('-' | '+')) => s.split_at(s.len() - c.len_utf8()),
        _ => (s, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_transparent() {
        assert_eq!(
            strip_generation_tags("a{%- generation -%}b{% endgeneration %}{% if x %}c{% endif %}"),
            "a{%- if true -%}b{% endif %}{% if x %}c{% endif %}"
        );
    }

    #[test]
    fn template_errors_name_the_template() {
        let e = ChatTemplate::new("{% for %}", "test.json")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("test.json") && e.contains("does not compile"),
            "{e}"
        );
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "t").unwrap();
        let e = t.render(&[], false, &[]).unwrap_err().to_string();
        assert!(e.contains("roles must alternate"), "{e}");
        let t = ChatTemplate::new("{{ messages[0].content.nosuchmethod() }}", "t").unwrap();
        let e = t
            .render(&[ChatMessage::new("user", "x")], false, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failed to render") && e.contains("line 1"),
            "{e}"
        );
    }
}
