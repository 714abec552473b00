//! `POST /v1/chat/completions` and `POST /v1/completions`: check the
//! request, queue it on its model, then answer with one JSON body or a
//! stream of server-sent events (OpenAI's chunk format, `[DONE]` last).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use mllm_runtime::generation::reasoning::{ReasoningSplit, Split};
use mllm_runtime::tool_calls::{
    grammar, ToolCall, ToolChoice, ToolFormat, ToolRequest, ToolStream,
};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::error::ApiError;
use super::request::{self, GenParams, ImageSource, Message, Prompt};
use super::tools;
use super::Shared;
use crate::access_log::Tokens;
use crate::security::LocalMedia;
use crate::worker::{Event, GenJob, ModelHandle, PreparedPrompt, TokenLogprob, Usage, DRAINING};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

/// What every response of one request repeats.
#[derive(Clone)]
struct Meta {
    /// Where the request log finds the answer's token counts.
    tokens: Tokens,
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    logprobs: bool,
    /// `<think>` blocks go to `reasoning_content` (chat only).
    reasoning: bool,
    /// The tools offered and the model's format: the answer is read for
    /// calls.
    tools: Option<(ToolFormat, ToolRequest)>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub async fn chat(
    State(s): State<Shared>,
    Extension(t): Extension<Tokens>,
    body: Bytes,
) -> Response {
    chat_inner(s, t, body)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn completion(
    State(s): State<Shared>,
    Extension(t): Extension<Tokens>,
    body: Bytes,
) -> Response {
    completion_inner(s, t, body)
        .await
        .unwrap_or_else(|e| e.into_response())
}

async fn chat_inner(s: Shared, tokens: Tokens, body: Bytes) -> Result<Response, ApiError> {
    refuse_when_draining()?;
    let req = request::parse_chat(&body)?;
    let mut params = req.params()?;
    let messages = req.messages()?;
    let mut enable_thinking = req.enable_thinking()?;
    let model = s.model(req.common.model.as_deref())?;
    let tools = tools::tool_request(&req.common)?;
    let format = model.info.tool_format;
    if let Some(t) = tools.as_ref().filter(|t| t.forced()) {
        if params.constraint.is_some() {
            return Err(ApiError::bad_request(
                "`tool_choice` forces a tool call, whose arguments follow the tool's schema; it cannot be combined with `response_format`, `json_schema` or `grammar`",
            )
            .with_param("tool_choice"));
        }
        params.constraint = Some(
            grammar::forced(format, t)
                .map_err(|m| ApiError::bad_request(m).with_param("tool_choice"))?,
        );
        // The call comes at once: a thinking template's reasoning would
        // have to fit the grammar too.
        enable_thinking.get_or_insert(false);
    }
    let images = decode_images(&messages, s.media.clone()).await?;
    if !images.is_empty() && !model.info.vision {
        return Err(ApiError::bad_request(format!(
            "model `{}` does not take images; send text only",
            model.name
        )));
    }
    if !images.is_empty() && tools.is_some() {
        return Err(ApiError::bad_request(
            "`tools` with images is not supported yet: send the images or the tools",
        )
        .with_param("tools"));
    }
    let prompt = PreparedPrompt::Chat {
        messages,
        images,
        enable_thinking,
        truncate: req.common.truncate,
        tools: tools.clone(),
    };
    let mut meta = meta(
        Kind::Chat,
        model,
        req.common.include_usage(),
        &params,
        tokens,
    );
    meta.reasoning = req.common.split_reasoning(s.split_reasoning)?;
    meta.tools = tools
        .filter(|t| t.choice != ToolChoice::None)
        .map(|t| (format, t));
    answer(model, prompt, params, meta, req.common.stream).await
}

async fn completion_inner(s: Shared, tokens: Tokens, body: Bytes) -> Result<Response, ApiError> {
    refuse_when_draining()?;
    let req = request::parse_completion(&body)?;
    let params = req.params()?;
    let prompt = match req.prompt()? {
        Prompt::Text(t) => PreparedPrompt::Text(t),
        Prompt::Ids(ids) => PreparedPrompt::Ids(ids),
        Prompt::Chat { .. } => return Err(ApiError::internal("a completion is not a chat")),
    };
    let model = s.model(req.common.model.as_deref())?;
    let meta = meta(
        Kind::Completion,
        model,
        req.common.include_usage(),
        &params,
        tokens,
    );
    answer(model, prompt, params, meta, req.common.stream).await
}

fn refuse_when_draining() -> Result<(), ApiError> {
    if DRAINING.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    Ok(())
}

fn meta(
    kind: Kind,
    model: &ModelHandle,
    include_usage: bool,
    params: &GenParams,
    tokens: Tokens,
) -> Meta {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let prefix = if kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    Meta {
        tokens,
        kind,
        id: format!("{prefix}-{n}"),
        model: model.name.clone(),
        created: now(),
        include_usage,
        logprobs: params.logprobs.is_some(),
        reasoning: false,
        tools: None,
    }
}

/// Decodes the images of a conversation off the async threads; local
/// paths only where `--allowed-local-media-path` allows them.
async fn decode_images(
    messages: &[Message],
    media: Arc<LocalMedia>,
) -> Result<Vec<mllm_runtime::image_preprocess::RgbImage>, ApiError> {
    let sources: Vec<ImageSource> = messages.iter().flat_map(|m| m.images.clone()).collect();
    if sources.is_empty() {
        return Ok(vec![]);
    }
    tokio::task::spawn_blocking(move || {
        use mllm_runtime::image_preprocess::{decode_bytes, decode_file};
        let unusable = |e| ApiError::bad_request(format!("a message's image cannot be used: {e}"));
        sources
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                ImageSource::Bytes(b) => {
                    decode_bytes(b, &format!("image {}", i + 1)).map_err(unusable)
                }
                ImageSource::File(p) => {
                    let path = media.resolve(p).map_err(|e| e.with_param("messages"))?;
                    decode_file(&path).map_err(unusable)
                }
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::internal(format!("image decoding failed: {e}")))?
}

async fn answer(
    model: &ModelHandle,
    prompt: PreparedPrompt,
    params: GenParams,
    meta: Meta,
    stream: bool,
) -> Result<Response, ApiError> {
    let (tx, mut rx) = unbounded_channel();
    model.generate(GenJob {
        prompt,
        params,
        events: tx,
    })?;
    // The first event says whether the prompt was accepted, so errors in
    // it are HTTP errors, not a failed stream.
    let reader = match rx.recv().await {
        Some(Event::Started { thinking, .. }) => Reader {
            split: (meta.reasoning && meta.kind == Kind::Chat)
                .then(|| ReasoningSplit::new(thinking)),
            calls: meta.tools.clone().map(|(f, t)| ToolStream::new(f, t)),
        },
        Some(Event::Error(e)) => return Err(e),
        _ => return Err(ApiError::internal("the model stopped before answering")),
    };
    if stream {
        Ok(stream_response(rx, meta, reader).into_response())
    } else {
        collect(rx, meta, reader).await
    }
}

/// Reads a chat answer as it comes: `<think>` blocks split off first,
/// then tool calls out of the rest.
struct Reader {
    split: Option<ReasoningSplit>,
    calls: Option<ToolStream>,
}

impl Reader {
    /// The next piece of answer; what may be shown now.
    fn push(&mut self, text: &str) -> Split {
        let mut s = match self.split.as_mut() {
            Some(sp) => sp.push(text),
            None => Split {
                reasoning: String::new(),
                content: text.to_string(),
            },
        };
        if let Some(ts) = self.calls.as_mut() {
            s.content = ts.push(&s.content);
        }
        s
    }

    /// The answer ended: what was held, and the calls it made.
    fn finish(&mut self) -> (Split, Vec<ToolCall>) {
        let mut s = self
            .split
            .as_mut()
            .map(|sp| sp.finish())
            .unwrap_or_default();
        let mut calls = vec![];
        if let Some(ts) = self.calls.as_mut() {
            let mut content = ts.push(&s.content);
            let parsed = ts.finish();
            content.push_str(&parsed.content);
            s.content = content;
            calls = parsed.calls;
        }
        (s, calls)
    }

    /// Whether pieces go through unchanged (a completion, or a chat with
    /// neither a split nor tools).
    fn plain(&self) -> bool {
        self.split.is_none() && self.calls.is_none()
    }
}

struct Collected {
    text: String,
    reasoning: String,
    logprobs: Vec<TokenLogprob>,
}

impl Collected {
    fn add(&mut self, s: Split) {
        self.reasoning.push_str(&s.reasoning);
        self.text.push_str(&s.content);
    }
}

async fn collect(
    mut rx: UnboundedReceiver<Event>,
    meta: Meta,
    mut reader: Reader,
) -> Result<Response, ApiError> {
    let mut c = Collected {
        text: String::new(),
        reasoning: String::new(),
        logprobs: vec![],
    };
    loop {
        match rx.recv().await {
            Some(Event::Token { text, logprob }) => {
                c.add(reader.push(&text));
                c.logprobs.extend(logprob);
            }
            Some(Event::Done {
                mut finish_reason,
                usage,
            }) => {
                let (rest, calls) = reader.finish();
                c.add(rest);
                meta.tokens
                    .set(usage.prompt_tokens, usage.completion_tokens);
                let mut message = json!({ "role": "assistant", "content": c.text });
                if !c.reasoning.is_empty() {
                    message["reasoning_content"] = json!(c.reasoning.trim_end());
                }
                if !calls.is_empty() {
                    if c.text.is_empty() {
                        message["content"] = Value::Null;
                    }
                    message["tool_calls"] = tools::calls_json(&calls);
                    finish_reason = "tool_calls";
                }
                let choice = match meta.kind {
                    Kind::Chat => json!({
                        "index": 0,
                        "message": message,
                        "logprobs": meta.logprobs.then(|| chat_logprobs(&c.logprobs)),
                        "finish_reason": finish_reason,
                    }),
                    Kind::Completion => json!({
                        "index": 0,
                        "text": c.text,
                        "logprobs": meta.logprobs.then(|| legacy_logprobs(&c.logprobs, 0)),
                        "finish_reason": finish_reason,
                    }),
                };
                let object = match meta.kind {
                    Kind::Chat => "chat.completion",
                    Kind::Completion => "text_completion",
                };
                return Ok(Json(json!({
                    "id": meta.id,
                    "object": object,
                    "created": meta.created,
                    "model": meta.model,
                    "choices": [choice],
                    "usage": usage_json(&usage),
                    "timings": timings_json(&usage),
                }))
                .into_response());
            }
            Some(Event::Error(e)) => return Err(e),
            Some(Event::Started { .. }) => {}
            None => return Err(ApiError::internal("the model stopped mid-answer")),
        }
    }
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": u.cached_tokens },
    })
}

/// llama-server's extra figures, handy for measuring.
fn timings_json(u: &Usage) -> Value {
    let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 / (ms / 1e3) } else { 0.0 };
    let computed = u.prompt_tokens - u.cached_tokens;
    json!({
        "prompt_n": computed,
        "prompt_ms": u.prompt_ms,
        "prompt_per_second": rate(computed, u.prompt_ms),
        "predicted_n": u.completion_tokens,
        "predicted_ms": u.decode_ms,
        "predicted_per_second": rate(u.completion_tokens, u.decode_ms),
    })
}

fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let entry = |t: &str, lp: f32| json!({ "token": t, "logprob": lp, "bytes": t.as_bytes() });
    let content: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut e = entry(&l.token, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|(t, lp)| entry(t, *lp)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// The completions API's older shape; `offset` is where the chunk's text
/// starts in the whole answer.
fn legacy_logprobs(lps: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut offsets = vec![];
    for l in lps {
        offsets.push(at);
        at += l.token.len();
    }
    json!({
        "tokens": lps.iter().map(|l| l.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| {
            l.top.iter().map(|(t, lp)| (t.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

/// The stream's state: events from the worker in, SSE events out.
struct Streamer {
    rx: UnboundedReceiver<Event>,
    meta: Meta,
    out: std::collections::VecDeque<SseEvent>,
    done: bool,
    /// Bytes of answer text sent so far (the legacy logprobs' offsets).
    sent: usize,
    /// Splits `<think>` blocks off into `delta.reasoning_content` and tool
    /// calls into `delta.tool_calls`.
    reader: Reader,
}

fn stream_response(
    rx: UnboundedReceiver<Event>,
    meta: Meta,
    reader: Reader,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut st = Streamer {
        rx,
        meta,
        out: Default::default(),
        done: false,
        sent: 0,
        reader,
    };
    if st.meta.kind == Kind::Chat {
        let first = st.chunk(json!({ "role": "assistant", "content": "" }), None, None);
        st.out.push_back(first);
    }
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.out.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            let ev = st.rx.recv().await;
            st.on(ev);
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

impl Streamer {
    fn data(v: &Value) -> SseEvent {
        SseEvent::default().data(v.to_string())
    }

    /// One chunk: a chat delta or completion text, and the finish reason.
    fn chunk(&self, delta: Value, logprobs: Option<Value>, finish: Option<&str>) -> SseEvent {
        let choice = match self.meta.kind {
            Kind::Chat => json!({
                "index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish,
            }),
            Kind::Completion => json!({
                "index": 0,
                "text": delta.get("content").cloned().unwrap_or(json!("")),
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        };
        Self::data(&self.envelope(json!([choice])))
    }

    /// A split piece of answer as chat deltas: its reasoning, then its
    /// content (which carries the logprobs; an empty one when only they
    /// are left to send).
    fn send_split(&mut self, s: Split, logprobs: Option<Value>) {
        if !s.reasoning.is_empty() {
            let ev = self.chunk(json!({ "reasoning_content": s.reasoning }), None, None);
            self.out.push_back(ev);
        }
        if !s.content.is_empty() || logprobs.is_some() {
            self.sent += s.content.len();
            let ev = self.chunk(json!({ "content": s.content }), logprobs, None);
            self.out.push_back(ev);
        }
    }

    fn envelope(&self, choices: Value) -> Value {
        let object = match self.meta.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        json!({
            "id": self.meta.id,
            "object": object,
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": choices,
        })
    }

    fn on(&mut self, ev: Option<Event>) {
        match ev {
            Some(Event::Token { text, logprob }) => {
                if text.is_empty() && logprob.is_none() {
                    return;
                }
                let lps: Vec<TokenLogprob> = logprob.into_iter().collect();
                let logprobs = self.meta.logprobs.then(|| match self.meta.kind {
                    Kind::Chat => chat_logprobs(&lps),
                    Kind::Completion => legacy_logprobs(&lps, self.sent),
                });
                if self.reader.plain() {
                    self.sent += text.len();
                    let ev = self.chunk(json!({ "content": text }), logprobs, None);
                    self.out.push_back(ev);
                    return;
                }
                let s = self.reader.push(&text);
                self.send_split(s, logprobs);
            }
            Some(Event::Done {
                mut finish_reason,
                usage,
            }) => {
                let (rest, calls) = self.reader.finish();
                self.send_split(rest, None);
                for delta in tools::call_deltas(&calls) {
                    let ev = self.chunk(delta, None, None);
                    self.out.push_back(ev);
                }
                if !calls.is_empty() {
                    finish_reason = "tool_calls";
                }
                self.meta
                    .tokens
                    .set(usage.prompt_tokens, usage.completion_tokens);
                let last = self.chunk(json!({}), None, Some(finish_reason));
                self.out.push_back(last);
                if self.meta.include_usage {
                    let mut u = self.envelope(json!([]));
                    u["usage"] = usage_json(&usage);
                    u["timings"] = timings_json(&usage);
                    self.out.push_back(Self::data(&u));
                }
                self.out.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
            Some(Event::Error(e)) => {
                self.out.push_back(Self::data(&e.body()));
                self.done = true;
            }
            Some(Event::Started { .. }) => {}
            None => {
                let e = ApiError::internal("the model stopped mid-answer");
                self.out.push_back(Self::data(&e.body()));
                self.done = true;
            }
        }
    }
}
