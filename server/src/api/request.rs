//! OpenAI request bodies, parsed and checked into what a model worker runs.
//! Everything a client can get wrong is a 400 naming the field: a known
//! field of the wrong type here, a field this server does not honour in
//! `super::fields`. Pure functions of the body, so the fuzzer drives them.

use serde::Deserialize;

use mllm_runtime::generation::{clock_seed, ConstraintSpec, SamplerConfig};

use super::error::ApiError;

/// A number or list of strings where OpenAI takes either.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields chat and completion requests share.
#[derive(Deserialize, Debug, Default)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<OneOrMany>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// llama-server's extension: never end at an end-of-sequence token
    /// (benchmarks ask for exactly `max_tokens`).
    #[serde(default)]
    pub ignore_eos: bool,
    /// A conversation longer than the context drops its oldest turns (the
    /// system message and the last message stay) instead of a 400.
    #[serde(default)]
    pub truncate: bool,
    /// OpenAI's `{"type": "text" | "json_object" | "json_schema", ...}`.
    pub response_format: Option<serde_json::Value>,
    /// llama-server's extensions: a JSON Schema, or a GBNF grammar.
    pub json_schema: Option<serde_json::Value>,
    pub grammar: Option<String>,
    /// Token id (as a string key) -> bias added to its logit, -100..100.
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    /// OpenAI's tools (`super::tools` reads them); the legacy `functions`
    /// and `function_call` are refused by name.
    pub tools: Option<serde_json::Value>,
    pub tool_choice: Option<serde_json::Value>,
    pub parallel_tool_calls: Option<bool>,
    pub functions: Option<serde_json::Value>,
    pub function_call: Option<serde_json::Value>,
    /// `deepseek`: `<think>...</think>` goes to `reasoning_content`;
    /// `none`: it stays in `content` (default: the server's
    /// `--reasoning-format`).
    pub reasoning_format: Option<String>,
    /// OpenAI's effort: `none` turns a thinking template's thinking off;
    /// `minimal`, `low`, `medium` and `high` leave it on.
    pub reasoning_effort: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum ImageUrl {
    Url(String),
    Object { url: String },
}

#[derive(Deserialize, Debug)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug)]
pub struct MessageIn {
    pub role: String,
    pub content: Option<Content>,
    /// An assistant turn's calls, as OpenAI returned them.
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn: the call it answers.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    /// Parsed on its own (see `parse_chat`): flattened fields would lose
    /// their names in error messages.
    #[serde(skip)]
    pub common: Common,
    pub messages: Vec<MessageIn>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    /// Extra template variables (vLLM's and llama-server's name), e.g.
    /// `{"enable_thinking": false}` for Qwen3.
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum PromptIn {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

#[derive(Deserialize, Debug)]
pub struct CompletionRequest {
    #[serde(skip)]
    pub common: Common,
    pub prompt: PromptIn,
    /// The legacy API's count of top alternatives per token.
    pub logprobs: Option<u64>,
    #[serde(default)]
    pub echo: bool,
}

/// A message ready for the template: text, and the images shown in it
/// (before its text, as Qwen-VL templates place them).
#[derive(Debug, Clone)]
pub struct Message {
    pub role: String,
    pub text: String,
    /// Where each image comes from: a data URI's bytes or a local file.
    pub images: Vec<ImageSource>,
    /// `tool_calls`, `tool_call_id` and `name` when given.
    pub tool_calls: Option<Vec<serde_json::Value>>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

impl Message {
    /// The turn as OpenAI's JSON, for the chat template.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::json!({ "role": self.role, "content": self.text });
        if let Some(c) = &self.tool_calls {
            m["tool_calls"] = serde_json::Value::from(c.clone());
        }
        if let Some(id) = &self.tool_call_id {
            m["tool_call_id"] = id.clone().into();
        }
        if let Some(n) = &self.name {
            m["name"] = n.clone().into();
        }
        m
    }
}

#[derive(Debug, Clone)]
pub enum ImageSource {
    Bytes(Vec<u8>),
    File(String),
}

/// Sampling and stopping settings of one request.
#[derive(Debug, Clone)]
pub struct GenParams {
    pub sampler: SamplerConfig,
    /// Most tokens to generate (None: until the context is full).
    pub max_tokens: Option<usize>,
    pub stops: Vec<String>,
    /// Log-probabilities: `Some(k)` reports each token's and its `k` best
    /// alternatives'.
    pub logprobs: Option<usize>,
    pub ignore_eos: bool,
    /// What the answer must follow (`response_format`, `json_schema`,
    /// `grammar`).
    pub constraint: Option<ConstraintSpec>,
    pub logit_bias: Vec<(u32, f32)>,
}

/// Most alternatives per token OpenAI allows (and we compute).
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// Parses a body; a field of the wrong type is named in the message.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("the request body is not valid JSON: {inner}"))
        } else if path == "." {
            // Valid JSON of the wrong shape, e.g. a missing field.
            ApiError::bad_request(format!("the request body is not valid: {inner}"))
        } else {
            ApiError::bad_request(format!("the request body is not valid: `{path}`: {inner}"))
                .with_param(&path)
        }
    })
}

fn check_range(name: &str, v: Option<f32>, lo: f32, hi: f32) -> Result<(), ApiError> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::bad_request(format!(
            "`{name}` must be between {lo} and {hi}, got {x}"
        ))
        .with_param(name)),
        _ => Ok(()),
    }
}

impl Common {
    /// The sampler, limits and stop strings this request asks for (the
    /// defaults are `mllm run`'s, which are llama.cpp's).
    pub fn params(&self, logprobs: Option<usize>) -> Result<GenParams, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::bad_request(format!(
                    "`n` = {n} is not supported: this server returns one choice per request (n = 1); send {n} requests instead"
                ))
                .with_param("n"));
            }
        }
        check_range("temperature", self.temperature, 0.0, 100.0)?;
        check_range("top_p", self.top_p, 0.0, 1.0)?;
        check_range("min_p", self.min_p, 0.0, 1.0)?;
        check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        check_range("repetition_penalty", self.repetition_penalty, 0.0, 100.0)?;
        let d = SamplerConfig::DEFAULT;
        let top_k = match self.top_k {
            Some(k) if k < 0 => 0,
            Some(k) => k as usize,
            None => d.top_k,
        };
        let seed = self.seed.unwrap_or_else(clock_seed);
        let sampler = SamplerConfig {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k,
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repetition_penalty.unwrap_or(d.repeat_penalty),
            repeat_last_n: d.repeat_last_n,
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            seed,
        };
        let max = self.max_completion_tokens.or(self.max_tokens);
        if max == Some(0) {
            return Err(
                ApiError::bad_request("`max_tokens` must be at least 1").with_param("max_tokens")
            );
        }
        let stops = self
            .stop
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        if stops.len() > 16 {
            return Err(ApiError::bad_request(format!(
                "`stop` has {} strings; at most 16 are allowed",
                stops.len()
            ))
            .with_param("stop"));
        }
        Ok(GenParams {
            sampler,
            max_tokens: max.map(|m| m.min(usize::MAX as u64) as usize),
            stops,
            logprobs,
            ignore_eos: self.ignore_eos,
            constraint: self.constraint()?,
            logit_bias: self.logit_bias()?,
        })
    }

    /// The constraint `response_format`, `json_schema` or `grammar` asks
    /// for (one of them at most); the legacy function calling is refused by
    /// name.
    fn constraint(&self) -> Result<Option<ConstraintSpec>, ApiError> {
        for (name, v) in [
            ("functions", &self.functions),
            ("function_call", &self.function_call),
        ] {
            let asked = match v {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::Array(a)) => !a.is_empty(),
                Some(serde_json::Value::String(s)) => s != "none",
                Some(_) => true,
            };
            if asked {
                return Err(ApiError::bad_request(format!(
                    "`{name}` is OpenAI's deprecated function calling: send `tools` and `tool_choice` instead"
                ))
                .with_param(name));
            }
        }
        let mut specs = vec![];
        if let Some(rf) = &self.response_format {
            if let Some(spec) = response_format(rf)? {
                specs.push(("response_format", spec));
            }
        }
        if let Some(schema) = &self.json_schema {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(ApiError::bad_request(
                    "`json_schema` must be a JSON Schema (an object)",
                )
                .with_param("json_schema"));
            }
            specs.push(("json_schema", ConstraintSpec::JsonSchema(schema.clone())));
        }
        if let Some(g) = &self.grammar {
            specs.push(("grammar", ConstraintSpec::Gbnf(g.clone())));
        }
        if specs.len() > 1 {
            let names: Vec<&str> = specs.iter().map(|(n, _)| *n).collect();
            return Err(ApiError::bad_request(format!(
                "`{}` each constrain the answer; send one",
                names.join("`, `")
            ))
            .with_param(names[1]));
        }
        Ok(specs.pop().map(|(_, s)| s))
    }

    /// `logit_bias`: token ids as keys, biases from -100 to 100.
    fn logit_bias(&self) -> Result<Vec<(u32, f32)>, ApiError> {
        let Some(map) = &self.logit_bias else {
            return Ok(vec![]);
        };
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            let param = format!("logit_bias.{k}");
            let id: u32 = k.trim().parse().map_err(|_| {
                ApiError::bad_request(format!("`logit_bias` keys are token ids; `{k}` is not one"))
                    .with_param(&param)
            })?;
            let b = v
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "`logit_bias.{k}` must be a number from -100 to 100, got {v}"
                    ))
                    .with_param(&param)
                })?;
            out.push((id, b as f32));
        }
        Ok(out)
    }

    /// Whether `<think>` blocks go to `reasoning_content`: the request's
    /// `reasoning_format`, else the server's default.
    pub fn split_reasoning(&self, default: bool) -> Result<bool, ApiError> {
        match self.reasoning_format.as_deref() {
            None => Ok(default),
            Some("deepseek" | "auto") => Ok(true),
            Some("none") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "`reasoning_format` `{other}` is not one of deepseek, none"
            ))
            .with_param("reasoning_format")),
        }
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

/// OpenAI's `response_format`: `text` (no constraint), `json_object`
/// (any object; llama-server also takes a `schema` there) or
/// `json_schema` with `json_schema.schema`.
fn response_format(rf: &serde_json::Value) -> Result<Option<ConstraintSpec>, ApiError> {
    let bad = |m: String| ApiError::bad_request(m).with_param("response_format");
    let kind = rf.get("type").and_then(|t| t.as_str()).ok_or_else(|| {
        bad("`response_format.type` must be `text`, `json_object` or `json_schema`".into())
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(match rf.get("schema") {
            Some(schema) if schema.is_object() => ConstraintSpec::JsonSchema(schema.clone()),
            _ => ConstraintSpec::JsonObject,
        })),
        "json_schema" => {
            let schema = rf
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .or_else(|| rf.get("schema"))
                .ok_or_else(|| {
                    bad("`response_format.json_schema.schema` is missing: the JSON Schema the answer must follow".into())
                })?;
            if !schema.is_object() && !schema.is_boolean() {
                return Err(bad(
                    "`response_format.json_schema.schema` must be a JSON Schema (an object)".into(),
                ));
            }
            Ok(Some(ConstraintSpec::JsonSchema(schema.clone())))
        }
        other => Err(bad(format!(
            "`response_format.type` `{other}` is not one of text, json_object, json_schema"
        ))),
    }
}

pub fn parse_chat(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let mut r: ChatRequest = parse(body)?;
    r.common = parse(body)?;
    super::fields::check(body, true)?;
    if r.messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty").with_param("messages"));
    }
    Ok(r)
}

impl ChatRequest {
    pub fn params(&self) -> Result<GenParams, ApiError> {
        let top = self.top_logprobs.unwrap_or(0);
        if top > MAX_TOP_LOGPROBS {
            return Err(ApiError::bad_request(format!(
                "`top_logprobs` must be at most {MAX_TOP_LOGPROBS}, got {top}"
            ))
            .with_param("top_logprobs"));
        }
        if self.top_logprobs.is_some() && !self.logprobs {
            return Err(
                ApiError::bad_request("`top_logprobs` needs `logprobs: true`")
                    .with_param("top_logprobs"),
            );
        }
        self.common.params(self.logprobs.then_some(top as usize))
    }

    /// The conversation: text parts joined, images taken from data URIs
    /// (`data:image/png;base64,...`) or local files (`file://` or a path;
    /// whether one may be read is `security::LocalMedia`'s to say).
    pub fn messages(&self) -> Result<Vec<Message>, ApiError> {
        let mut out = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let mut text = String::new();
            let mut images = vec![];
            match &m.content {
                None => {}
                Some(Content::Text(t)) => text.push_str(t),
                Some(Content::Parts(parts)) => {
                    for p in parts {
                        match p {
                            Part::Text { text: t } => text.push_str(t),
                            Part::ImageUrl { image_url } => {
                                let url = match image_url {
                                    ImageUrl::Url(u) | ImageUrl::Object { url: u } => u,
                                };
                                images.push(image_source(url).map_err(|e| {
                                    e.with_param(&format!("messages[{i}].content"))
                                })?);
                            }
                        }
                    }
                }
            }
            if !matches!(
                m.role.as_str(),
                "system" | "user" | "assistant" | "tool" | "developer"
            ) {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].role `{}` is not one of system, user, assistant, tool, developer",
                    m.role
                ))
                .with_param(&format!("messages[{i}].role")));
            }
            if let Some(calls) = &m.tool_calls {
                for (j, c) in calls.iter().enumerate() {
                    if c.pointer("/function/name")
                        .and_then(|n| n.as_str())
                        .is_none()
                    {
                        return Err(ApiError::bad_request(format!(
                            "messages[{i}].tool_calls[{j}] has no `function.name`"
                        ))
                        .with_param(&format!("messages[{i}].tool_calls")));
                    }
                }
            }
            out.push(Message {
                role: m.role.clone(),
                text,
                images,
                tool_calls: m.tool_calls.clone(),
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
            });
        }
        Ok(out)
    }

    /// `chat_template_kwargs.enable_thinking`, when given.
    pub fn enable_thinking(&self) -> Result<Option<bool>, ApiError> {
        let effort = match self.common.reasoning_effort.as_deref() {
            None | Some("minimal" | "low" | "medium" | "high") => None,
            Some("none") => Some(false),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "`reasoning_effort` `{other}` is not one of none, minimal, low, medium, high"
                ))
                .with_param("reasoning_effort"))
            }
        };
        match self
            .chat_template_kwargs
            .as_ref()
            .and_then(|k| k.get("enable_thinking"))
        {
            None => Ok(effort),
            Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ApiError::bad_request(format!(
                "`chat_template_kwargs.enable_thinking` must be true or false, got {v}"
            ))
            .with_param("chat_template_kwargs")),
        }
    }
}

fn image_source(url: &str) -> Result<ImageSource, ApiError> {
    use base64::Engine as _;
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((meta, data)) = rest.split_once(',') else {
            return Err(ApiError::bad_request(
                "an image data URI has no `,` before its data",
            ));
        };
        if !meta.ends_with(";base64") {
            return Err(ApiError::bad_request(
                "an image data URI must be base64 (`data:image/png;base64,...`)",
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                ApiError::bad_request(format!("an image data URI is not valid base64: {e}"))
            })?;
        return Ok(ImageSource::Bytes(bytes));
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err(ApiError::bad_request(
            "image URLs over the network are not fetched: send the image as a data URI (data:image/png;base64,...)",
        ));
    }
    Ok(ImageSource::File(url.to_string()))
}

pub fn parse_completion(body: &[u8]) -> Result<CompletionRequest, ApiError> {
    let mut r: CompletionRequest = parse(body)?;
    r.common = parse(body)?;
    super::fields::check(body, false)?;
    Ok(r)
}

impl CompletionRequest {
    pub fn params(&self) -> Result<GenParams, ApiError> {
        if self.echo {
            return Err(ApiError::bad_request("`echo` is not supported").with_param("echo"));
        }
        let top = self.logprobs;
        if let Some(k) = top {
            if k > MAX_TOP_LOGPROBS {
                return Err(ApiError::bad_request(format!(
                    "`logprobs` must be at most {MAX_TOP_LOGPROBS}, got {k}"
                ))
                .with_param("logprobs"));
            }
        }
        self.common.params(top.map(|k| k as usize))
    }

    /// The one prompt (a list must hold exactly one).
    pub fn prompt(&self) -> Result<Prompt, ApiError> {
        match &self.prompt {
            PromptIn::Text(t) => Ok(Prompt::Text(t.clone())),
            PromptIn::Texts(v) if v.len() == 1 => Ok(Prompt::Text(v[0].clone())),
            PromptIn::Texts(v) => Err(ApiError::bad_request(format!(
                "`prompt` holds {} prompts; send one per request",
                v.len()
            ))
            .with_param("prompt")),
            PromptIn::Ids(ids) => Ok(Prompt::Ids(ids.clone())),
        }
    }
}

/// What a generation starts from.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// A conversation rendered through the model's chat template.
    Chat {
        messages: Vec<Message>,
        enable_thinking: Option<bool>,
    },
    /// Plain text, tokenized with the model's BOS as `mllm run --raw` does.
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Deserialize, Debug)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    /// llama-server's name; `text` is accepted too.
    #[serde(alias = "text")]
    pub content: String,
    #[serde(default)]
    pub add_special: bool,
    #[serde(default)]
    pub with_pieces: bool,
}

#[derive(Deserialize, Debug)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

#[derive(Deserialize, Debug)]
pub struct TemplateRequest {
    pub model: Option<String>,
    pub messages: Vec<MessageIn>,
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    parse(body)
}

impl TemplateRequest {
    /// The same checks and image handling as a chat request's messages.
    pub fn as_chat(self) -> ChatRequest {
        ChatRequest {
            common: Common {
                model: self.model,
                ..Common::default()
            },
            messages: self.messages,
            logprobs: false,
            top_logprobs: None,
            chat_template_kwargs: self.chat_template_kwargs,
        }
    }
}
