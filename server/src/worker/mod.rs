//! One thread per model: it loads the model, owns its slots (one KV cache
//! each) and runs the schedule. Requests arrive on a channel; between any
//! two units of work (one prefill chunk of one slot, or one decode step of
//! one slot) the worker takes new requests, so requests join and leave at
//! token boundaries and a long prompt is computed in chunks between the
//! other slots' tokens instead of stalling them.
//!
//! The model (its backend, `Rc` caches) never leaves this thread; handlers
//! talk to it through `Job`s and receive `Event`s.

pub mod embed;
pub use prefix_store::default_budget_mib;
mod prefix_store;
mod prepare;
mod schedule;
mod slot;
mod speculate;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use mllm_runtime::image_preprocess::RgbImage;
use mllm_runtime::model_files::LoadOptions;
use mllm_runtime::tool_calls::{ToolFormat, ToolRequest};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::api::error::ApiError;
use crate::api::request::{GenParams, Message};
use crate::metrics::ModelMetrics;
use schedule::Worker;

/// What a model is, as `/v1/models` reports it.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub context: usize,
    /// One slot's KV cache at full context, when the config says.
    pub kv_bytes: Option<usize>,
    pub vision: bool,
    pub has_template: bool,
    /// How the template writes tool calls.
    pub tool_format: ToolFormat,
    pub created: u64,
}

/// A prompt whose images are decoded (by the handler, off this thread).
pub enum PreparedPrompt {
    Chat {
        messages: Vec<Message>,
        images: Vec<RgbImage>,
        enable_thinking: Option<bool>,
        /// `"truncate": true`: drop the oldest turns that do not fit.
        truncate: bool,
        /// The tools offered, rendered by the template.
        tools: Option<ToolRequest>,
    },
    Text(String),
    Ids(Vec<u32>),
}

pub struct GenJob {
    pub prompt: PreparedPrompt,
    pub params: GenParams,
    pub events: tmpsc::UnboundedSender<Event>,
}

pub enum Job {
    Generate(Box<GenJob>),
    Tokenize {
        text: String,
        add_special: bool,
        with_pieces: bool,
        reply: oneshot::Sender<Result<serde_json::Value, ApiError>>,
    },
    Detokenize {
        ids: Vec<u32>,
        reply: oneshot::Sender<Result<String, ApiError>>,
    },
    Template {
        messages: Vec<Message>,
        enable_thinking: Option<bool>,
        reply: oneshot::Sender<Result<String, ApiError>>,
    },
}

/// A token's log-probability and its best alternatives.
#[derive(Clone, Debug)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

#[derive(Clone, Debug, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens the slot's cache already held.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_ms: f64,
    pub decode_ms: f64,
}

pub enum Event {
    /// The prompt is tokenized and checked; generation will follow.
    Started {
        prompt_tokens: usize,
        /// The rendered prompt ends with `<think>`: the answer starts
        /// inside the model's reasoning.
        thinking: bool,
    },
    /// A generated token: its text (possibly empty while a character or a
    /// possible stop string is incomplete) and log-probabilities if asked.
    Token {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done {
        finish_reason: &'static str,
        usage: Usage,
    },
    Error(ApiError),
}

/// The handlers' side of a model worker.
pub struct ModelHandle {
    pub name: String,
    pub info: ModelInfo,
    pub metrics: Arc<ModelMetrics>,
    jobs: mpsc::Sender<Job>,
    /// Generation requests accepted and not yet answered (waiting or in a slot).
    inflight: Arc<AtomicUsize>,
    /// Most requests that may wait for a slot.
    queue_limit: usize,
}

/// How a model is served.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub path: String,
    /// The mmproj GGUF beside a GGUF `path` (`--mmproj`).
    pub mmproj: Option<String>,
    pub script: Option<String>,
    pub slots: usize,
    pub ctx_size: Option<usize>,
    pub queue: usize,
    pub load: LoadOptions,
    /// `--spec-type` and its settings.
    pub spec: Option<mllm_runtime::speculative::SpecSettings>,
    /// `--cache-ram`: bytes the prefix cache may hold (0: none).
    pub cache_ram: usize,
}

impl ModelHandle {
    /// Loads the model on a new thread; returns once it is ready (or why
    /// it could not be loaded).
    pub fn spawn(name: String, cfg: WorkerConfig) -> Result<ModelHandle, String> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let metrics = Arc::new(ModelMetrics::new(cfg.slots));
        let inflight = Arc::new(AtomicUsize::new(0));
        let (m, q, c) = (metrics.clone(), inflight.clone(), cfg.clone());
        std::thread::Builder::new()
            .name(format!("model {name}"))
            .spawn(move || match Worker::load(&c, m, q) {
                Ok(w) => {
                    let _ = ready_tx.send(Ok(w.info.clone()));
                    w.run(rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| format!("cannot start a thread for {name}: {e}"))?;
        let info = ready_rx
            .recv()
            .map_err(|_| format!("loading {} stopped unexpectedly", cfg.path))??;
        Ok(ModelHandle {
            name,
            info,
            metrics,
            jobs: tx,
            inflight,
            queue_limit: cfg.queue,
        })
    }

    /// Queues a generation; with every slot busy and `--queue` requests
    /// waiting already, a 503.
    pub fn generate(&self, job: GenJob) -> Result<(), ApiError> {
        let slots = self.metrics.slots;
        let inflight = self.inflight.fetch_add(1, Ordering::SeqCst);
        if inflight >= self.queue_limit + slots {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::unavailable(format!(
                "model `{}` is busy: its {slots} slots are taken and {} requests are waiting (--queue {}); retry later",
                self.name,
                inflight.saturating_sub(slots),
                self.queue_limit
            )));
        }
        self.send(Job::Generate(Box::new(job)))
    }

    pub fn send(&self, job: Job) -> Result<(), ApiError> {
        self.jobs
            .send(job)
            .map_err(|_| ApiError::internal(format!("model `{}` has stopped", self.name)))
    }

    /// Requests waiting for a slot.
    pub fn queue_depth(&self) -> usize {
        let busy = self.metrics.busy.load(Ordering::Relaxed);
        self.inflight.load(Ordering::SeqCst).saturating_sub(busy)
    }
}

/// Set once the server stops taking requests (SIGINT/SIGTERM).
pub static DRAINING: AtomicBool = AtomicBool::new(false);
