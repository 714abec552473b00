//! mllm-embed is the engine as a library for programs that embed it: a
//! loaded `Model` (weights, tokenizer, chat template, one `Runner`) and
//! `Session`s on it (a conversation: its KV cache and its messages) that
//! generate through `mllm_runtime::generate` exactly as `mllm run` and
//! `mllm chat` do, streaming text to a callback, with cancellation from
//! any thread. The C ABI (`capi/`) and the Python module (`python/`) are
//! thin layers over it; it adds no engine behaviour and prints nothing.
//! Embedding and reranking models load as `Embedder` and `Reranker`
//! (`vectors`).
//!
//! Threads: the runtime's models hold `Rc`s, so they are neither `Send`
//! nor `Sync`. Here every use of a model's runner, and every change to a
//! session's `Sequence` (whose cache is an `Rc` the runner also clones
//! during a step), happens while holding the model's `engine` lock, so no
//! two threads ever touch those `Rc`s at once; that is what makes the
//! `unsafe impl Send/Sync` below sound. Calls on one model are therefore
//! serialized; `Session::cancel` takes no lock and works from any thread.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mllm_runtime::tokenizer::{StreamDecoder, Tokenizer};

use mllm_runtime::engine::{generate, Engine, GenRequest};
use mllm_runtime::generation::{Generation, StopReason as RtStop};
use mllm_runtime::images::{self, ImageTokens, Images};
use mllm_runtime::model_files::{self, LoadOptions, ModelFiles};
use mllm_runtime::prompt::{self, Message};
use mllm_runtime::Sequence;

mod error;
mod params;
mod vectors;

pub use error::{clean_message, Error, Result, Status};
pub use mllm_runtime::generation::ConstraintSpec;
pub use params::{Input, LoadConfig, Outcome, Params, StopReason, Turn};
pub use vectors::{EmbedParams, Embedder, Reranker};

use mllm_runtime::set_threads;

struct Shared {
    files: ModelFiles,
    tok: Arc<Tokenizer>,
    /// The model's runner with a spare sequence; a session swaps its own
    /// sequence in for the length of a generation.
    engine: Mutex<Engine>,
    opts: LoadOptions,
    context: Option<usize>,
}

// SAFETY: see the module comment. `engine` (the runner's `Rc`s) is only
// touched under its lock; `files` is read-only after loading (config,
// template, eos, preprocessor config: plain data); `tok` is an `Arc` of a
// `Sync` tokenizer.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn engine(&self) -> Result<MutexGuard<'_, Engine>> {
        self.engine.lock().map_err(|_| poisoned())
    }
}

/// A model path that is not empty and exists.
/// The model's path on disk: `path` itself when it exists, or for
/// `hf://ORG/NAME[:QUANT]` its files in the Hugging Face cache, downloaded
/// when missing (as `mllm pull` does; HF_ENDPOINT, HF_TOKEN, HF_HOME and
/// HF_HUB_OFFLINE apply).
fn resolve_path(path: &str) -> Result<String> {
    if path.is_empty() {
        return Err(Error::new(Status::InvalidArgument, "empty model path"));
    }
    if mllm_hub::HubRef::is_hub(path) {
        let fetched = mllm_hub::HubRef::parse(path)
            .and_then(|r| mllm_hub::pull(&r, &mllm_hub::Settings::from_env()));
        return match fetched {
            Ok(p) => Ok(p.model.to_string_lossy().into_owned()),
            Err(e @ mllm_hub::HubError::BadReference { .. }) => {
                Err(Error::new(Status::InvalidArgument, e.to_string()))
            }
            Err(e) => Err(Error::new(Status::NotFound, e.to_string())),
        };
    }
    if !Path::new(path).exists() {
        return Err(Error::new(
            Status::NotFound,
            format!("{path}: no such file or directory"),
        ));
    }
    Ok(path.to_string())
}

fn poisoned() -> Error {
    Error::new(
        Status::Internal,
        "an earlier internal error left this model unusable; free it and load it again",
    )
}

/// A loaded model. Cloning is cheap (the clones share it); it stays loaded
/// until the last clone and the last session are dropped.
#[derive(Clone)]
pub struct Model {
    shared: Arc<Shared>,
}

impl Model {
    /// Opens a Hugging Face directory, a GGUF or a `.mllm` file and binds
    /// its weights to the built-in script for its architecture.
    pub fn load(path: &str, cfg: &LoadConfig) -> Result<Model> {
        let path = &resolve_path(path)?;
        if cfg.context == Some(0) {
            return Err(Error::new(Status::InvalidArgument, "a context of 0 tokens"));
        }
        set_threads(cfg.threads);
        let opts = LoadOptions::default();
        let load = |e| Error::runtime(Status::Load, e);
        let files = model_files::open_with(path, opts).map_err(load)?;
        let tok = files.tokenizer.clone().ok_or_else(|| {
            Error::new(
                Status::Load,
                format!("{path} has no tokenizer (tokenizer.json, or a vocabulary in the GGUF)"),
            )
        })?;
        let model = model_files::load_model(&files, None).map_err(load)?;
        let context = cfg.context.or(files.max_context());
        let mut engine = Engine::new(model, context);
        engine.configure(&opts).map_err(load)?;
        Ok(Model {
            shared: Arc::new(Shared {
                files,
                tok,
                engine: Mutex::new(engine),
                opts,
                context,
            }),
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.shared.tok
    }

    /// Whether prompts go through a chat template (else they are sent as
    /// plain text).
    pub fn has_chat_template(&self) -> bool {
        self.shared.files.chat_template.is_some()
    }

    /// The context length in tokens, when known.
    pub fn context(&self) -> Option<usize> {
        self.shared.context
    }

    /// Token ids of `text`; `add_special` adds what the tokenizer adds
    /// around a sequence (a BOS for Llama-style vocabularies).
    pub fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.shared
            .tok
            .encode(text, add_special)
            .map_err(|e| Error::new(Status::Tokenizer, clean_message(&e.to_string())))
    }

    /// The text of `ids`; `skip_special` leaves out special tokens.
    pub fn detokenize(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.shared
            .tok
            .decode(ids, skip_special)
            .map_err(|e| Error::new(Status::Tokenizer, clean_message(&e.to_string())))
    }

    /// A new conversation on this model with an empty KV cache; a system
    /// message, when given, opens its history.
    pub fn session(&self, system: Option<&str>) -> Result<Session> {
        let mut seq = Sequence::new(self.shared.context);
        seq.set_kv_dtype(self.shared.opts.kv.0)
            .map_err(|e| Error::runtime(Status::Internal, e))?;
        Ok(Session {
            model: self.clone(),
            state: Mutex::new(State {
                seq,
                history: system.map(|s| Turn::new("system", s)).into_iter().collect(),
            }),
            cancel: AtomicBool::new(false),
        })
    }
}

/// Preprocessed images with the model's image tokens.
type Pictures = (Images, ImageTokens);

struct State {
    seq: Sequence,
    history: Vec<Turn>,
}

/// A conversation: its KV cache and, for `say`, its messages. A prompt
/// that continues what the cache holds (the conversation's next turn)
/// computes only its new tokens; any other prompt starts afresh, so an
/// answer never depends on unrelated earlier prompts.
pub struct Session {
    model: Model,
    state: Mutex<State>,
    cancel: AtomicBool,
}

// SAFETY: see the module comment. The sequence in `state` (an `Rc`ed
// cache) is only used, replaced or dropped while holding the model's
// engine lock; the rest is plain data behind the state lock or atomic.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Drop for Session {
    fn drop(&mut self) {
        // The sequence's cache is an `Rc` the runner may have cloned: drop
        // it under the engine lock (see the module comment).
        let _engine = self
            .model
            .shared
            .engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        state.seq = Sequence::new(None);
    }
}

impl Session {
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Stops the answer being generated on this session at its next token
    /// (from any thread). A cancel while nothing runs is forgotten when
    /// the next answer starts.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    fn state(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| poisoned())
    }

    /// Forgets the conversation (its messages but the system message, and
    /// the cache).
    pub fn reset(&self) -> Result<()> {
        let mut state = self.state()?;
        let _engine = self.model.shared.engine()?;
        state.history.retain(|t| t.role == "system");
        state.seq.reset();
        Ok(())
    }

    /// The conversation `say` has built so far.
    pub fn history(&self) -> Result<Vec<Turn>> {
        Ok(self.state()?.history.clone())
    }

    /// The next user message of this session's conversation, with the
    /// images shown in it; the answer joins the history (also when it was
    /// cancelled; not when generation failed).
    pub fn say(
        &self,
        message: &str,
        images: &[String],
        params: &Params,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Outcome> {
        let mut state = self.state()?;
        self.cancel.store(false, Ordering::SeqCst);
        let mut turns = state.history.clone();
        turns.push(Turn {
            role: "user".into(),
            content: message.to_string(),
            images: images.to_vec(),
        });
        let out = self.run(&mut state, Input::Conversation(&turns), params, on_text)?;
        turns.push(Turn::new("assistant", &out.text));
        state.history = turns;
        Ok(out)
    }

    /// Answers `input` with this session's cache (its history is neither
    /// used nor changed). `on_text` receives the answer in pieces as it
    /// is generated; returning false stops it.
    pub fn generate(
        &self,
        input: Input,
        params: &Params,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Outcome> {
        let mut state = self.state()?;
        self.cancel.store(false, Ordering::SeqCst);
        self.run(&mut state, input, params, on_text)
    }

    /// Prompt ids (and images) for `input`.
    fn prompt_ids(
        &self,
        input: Input,
        thinking: Option<bool>,
    ) -> Result<(Vec<u32>, Option<Pictures>)> {
        let files = &self.model.shared.files;
        let tok = &self.model.shared.tok;
        let gen = |e| Error::runtime(Status::Generate, e);
        let encode = |text: &str, special: bool| {
            tok.encode(text, special)
                .map_err(|e| Error::new(Status::Tokenizer, clean_message(&e.to_string())))
        };
        match input {
            Input::Prompt {
                system,
                prompt,
                images,
                raw,
            } => {
                if !images.is_empty() {
                    let (imgs, spec) = images::from_files(files, images).map_err(gen)?;
                    let text =
                        images::prompt_text(files, system, prompt, &imgs, &spec, raw, thinking)
                            .map_err(gen)?;
                    return Ok((encode(&text, false)?, Some((imgs, spec))));
                }
                if raw || files.chat_template.is_none() {
                    return Ok((encode(prompt, true)?, None));
                }
                let mut msgs = vec![];
                if let Some(s) = system {
                    msgs.push(Message::new("system", s));
                }
                msgs.push(Message::new("user", prompt));
                let text = prompt::render(files, &msgs, true, thinking).map_err(gen)?;
                Ok((encode(&text, false)?, None))
            }
            Input::Conversation(turns) => {
                if turns.is_empty() {
                    return Err(Error::new(Status::InvalidArgument, "no messages"));
                }
                if files.chat_template.is_none() {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "{} has no chat template; send plain text instead (raw)",
                            files.path.display()
                        ),
                    ));
                }
                let paths: Vec<String> = turns.iter().flat_map(|t| t.images.clone()).collect();
                if paths.is_empty() {
                    let msgs: Vec<Message> = turns
                        .iter()
                        .map(|t| Message::new(t.role.as_str(), t.content.as_str()))
                        .collect();
                    let text = prompt::render(files, &msgs, true, thinking).map_err(gen)?;
                    return Ok((encode(&text, false)?, None));
                }
                let (imgs, spec) = images::from_files(files, &paths).map_err(gen)?;
                let turns: Vec<images::Turn> = turns
                    .iter()
                    .map(|t| images::Turn::new(&t.role, &t.content, t.images.len()))
                    .collect();
                let text = images::conversation_text(files, &turns, &imgs, &spec, thinking)
                    .map_err(gen)?;
                Ok((encode(&text, false)?, Some((imgs, spec))))
            }
        }
    }

    fn run(
        &self,
        state: &mut State,
        input: Input,
        params: &Params,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Outcome> {
        let (ids, imgs) = self.prompt_ids(input, params.enable_thinking)?;
        let shared = &self.model.shared;
        let mut gen = Generation::new(
            params.generation_config(&shared.files),
            Box::new(StreamDecoder::shared(shared.tok.clone(), true)),
        );
        if let Some(spec) = &params.constraint {
            let c = shared
                .files
                .constraint(spec)
                .map_err(|e| Error::new(Status::InvalidArgument, e.to_string()))?;
            gen.add_processor(Box::new(c));
        }
        // Set when `on_text` asks to stop: nothing more reaches it.
        let stopped = std::cell::Cell::new(false);
        let mut emit = |s: &str| {
            if stopped.get() || s.is_empty() {
                return;
            }
            if !on_text(s) {
                stopped.set(true);
                self.cancel.store(true, Ordering::SeqCst);
            }
        };
        let mut engine = shared.engine()?;
        std::mem::swap(&mut engine.seq, &mut state.seq);
        // Reuse the cache only for a prompt that continues it (the next
        // turn), as the server does: computing part of an unrelated prompt
        // from a shared prefix splits its chunks differently, and the
        // answer would depend on what the session ran before. (A prompt
        // with images is computed afresh by `generate`.)
        let rewound = match imgs {
            None => engine.seq.rewind_for_continuation(&ids).map(|_| ()),
            Some(_) => Ok(()),
        };
        let result = rewound.and_then(|()| {
            generate(
                &mut engine,
                &mut gen,
                GenRequest {
                    prompt: &ids,
                    images: imgs.as_ref().map(|(i, s)| (i, s)),
                },
                &mut emit,
                &self.cancel,
            )
        });
        std::mem::swap(&mut engine.seq, &mut state.seq);
        drop(engine);
        let stats = result.map_err(|e| Error::runtime(Status::Generate, e))?;
        Ok(Outcome {
            text: stats.text,
            prompt_tokens: stats.prompt_tokens,
            prompt_computed: stats.prompt_computed,
            generated_tokens: stats.generated.len(),
            stop_reason: match stats.reason {
                RtStop::Eos => StopReason::Eos,
                RtStop::StopString => StopReason::StopString,
                RtStop::MaxTokens => StopReason::MaxTokens,
                RtStop::Interrupted => StopReason::Cancelled,
            },
            prompt_seconds: stats.prompt_secs,
            generate_seconds: stats.gen_secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_colors_and_the_error_prefix() {
        let colored = "error: \u{1b}[31mbad\u{1b}[0m thing at \u{1b}[1;4mline 3\u{1b}[0m";
        assert_eq!(clean_message(colored), "bad thing at line 3");
        assert_eq!(clean_message("plain"), "plain");
        assert_eq!(clean_message("error:  kept"), " kept");
    }

    #[test]
    fn runtime_kinds_refine_the_status() {
        use mllm_runtime::Error as E;
        let st = |status, e| Error::runtime(status, e).status;
        // What the call was doing, unless the kind says more.
        assert_eq!(st(Status::Load, E::invalid("x")), Status::Load);
        assert_eq!(st(Status::Load, E::not_found("x")), Status::NotFound);
        assert_eq!(
            st(Status::Generate, E::not_found("x.png")),
            Status::Generate
        );
        assert_eq!(st(Status::Generate, E::tokenizer("x")), Status::Tokenizer);
        // A failed step while embedding is not the caller's argument.
        assert_eq!(
            st(Status::InvalidArgument, E::generate("x")),
            Status::Generate
        );
        assert_eq!(
            st(Status::InvalidArgument, E::invalid("x")),
            Status::InvalidArgument
        );
        assert_eq!(
            Error::runtime(Status::Load, E::load("plain")).message,
            "plain"
        );
    }

    #[test]
    fn defaults_are_mllm_runs() {
        let p = Params::default();
        let s = mllm_runtime::SamplerConfig::DEFAULT;
        assert_eq!(p.max_tokens, 512);
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p),
            (s.temperature, s.top_k, s.top_p, s.min_p)
        );
        assert_eq!(p.seed, None);
    }

    #[test]
    fn a_missing_path_is_not_found() {
        let e = Model::load("/no/such/model.gguf", &LoadConfig::default())
            .err()
            .expect("an error");
        assert_eq!(e.status, Status::NotFound);
        let e = Model::load("", &LoadConfig::default())
            .err()
            .expect("an error");
        assert_eq!(e.status, Status::InvalidArgument);
    }
}
