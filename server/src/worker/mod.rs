//! One thread per model: it loads the model, owns its slots (one KV cache
//! each) and runs the schedule. Requests arrive on a channel; between any
//! two units of work (one prefill chunk of one slot, or one decode step of
//! one slot) the worker takes new requests, so requests join and leave at
//! token boundaries and a long prompt is computed in chunks between the
//! other slots' tokens instead of stalling them.
//!
//! The model (its backend, `Rc` caches) never leaves this thread; handlers
//! talk to it through `Job`s and receive `Event`s.

mod prepare;
mod slot;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use mllm_converter::image_preprocess::RgbImage;
use mllm_runtime::model_files::{self, LoadOptions};
use mllm_runtime::{Runner, Sequence};
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::api::error::{engine_message, ApiError};
use crate::api::request::{GenParams, Message};
use crate::metrics::ModelMetrics;
use slot::Active;

/// What a model is, as `/v1/models` reports it.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub context: usize,
    pub vision: bool,
    pub has_template: bool,
    pub created: u64,
}

/// A prompt whose images are decoded (by the handler, off this thread).
pub enum PreparedPrompt {
    Chat {
        messages: Vec<Message>,
        images: Vec<RgbImage>,
        enable_thinking: Option<bool>,
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
    Generate(GenJob),
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
    pub script: Option<String>,
    pub slots: usize,
    pub ctx_size: Option<usize>,
    pub queue: usize,
    pub load: LoadOptions,
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
        self.send(Job::Generate(job))
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

struct Worker {
    files: model_files::ModelFiles,
    runner: Runner,
    slots: Vec<Slot>,
    info: ModelInfo,
    metrics: Arc<ModelMetrics>,
    inflight: Arc<AtomicUsize>,
    /// Requests tokenized and waiting for a slot, oldest first.
    waiting: VecDeque<slot::Pending>,
    /// The slot whose prompt chunk comes next (prompts take turns).
    turn: usize,
    /// `MLLM_SERVE_FAULT`: a request whose prompt holds this text panics
    /// in its first decode step (fault injection, for tests of the panic
    /// path; unset in normal use).
    fault: Option<String>,
}

struct Slot {
    seq: Sequence,
    active: Option<Active>,
    /// When the slot last finished a request (least recently used wins ties).
    last_used: Instant,
}

impl Worker {
    fn load(
        cfg: &WorkerConfig,
        metrics: Arc<ModelMetrics>,
        inflight: Arc<AtomicUsize>,
    ) -> Result<Worker, String> {
        let files = model_files::open_with(&cfg.path, cfg.load).map_err(|e| engine_message(&e))?;
        files.tokenizer().map_err(|e| engine_message(&e))?;
        let model = model_files::load_model(&files, cfg.script.as_deref())
            .map_err(|e| engine_message(&e))?;
        let model_ctx = files.max_context();
        let context = match (cfg.ctx_size, model_ctx) {
            (Some(c), Some(m)) => c.min(m),
            (Some(c), None) => c,
            (None, Some(m)) => m.min(model_files::DEFAULT_CONTEXT.max(4096)),
            (None, None) => model_files::DEFAULT_CONTEXT,
        };
        let mut runner = Runner::new(model);
        runner.compile_default(context);
        mllm_runtime::engine::configure_runner(&mut runner, &cfg.load);
        let mut slots = vec![];
        for _ in 0..cfg.slots.max(1) {
            let mut seq = Sequence::new(Some(context));
            seq.set_kv_dtype(cfg.load.kv.0)
                .map_err(|e| engine_message(&e))?;
            slots.push(Slot {
                seq,
                active: None,
                last_used: Instant::now(),
            });
        }
        let info = ModelInfo {
            context,
            vision: files.config.get("vision_config").is_some(),
            has_template: files.chat_template.is_some(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        Ok(Worker {
            files,
            runner,
            slots,
            info,
            metrics,
            inflight,
            waiting: VecDeque::new(),
            turn: 0,
            fault: std::env::var("MLLM_SERVE_FAULT")
                .ok()
                .filter(|t| !t.is_empty()),
        })
    }

    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some()) || !self.waiting.is_empty();
            let job = if busy {
                match jobs.try_recv() {
                    Ok(j) => Some(j),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            } else {
                match jobs.recv() {
                    Ok(j) => Some(j),
                    Err(_) => return,
                }
            };
            if let Some(job) = job {
                self.take(job);
                // Take everything that arrived before doing more work.
                continue;
            }
            self.admit();
            self.work();
        }
    }

    /// Answers a quick job at once; tokenizes a generation and queues it.
    fn take(&mut self, job: Job) {
        match job {
            Job::Generate(g) => {
                match guarded(|| prepare::prompt(&self.files, &g.prompt, self.info.context))
                    .unwrap_or_else(|why| Err(crash_error(&why)))
                {
                    Ok(p) => {
                        let fault = self
                            .fault
                            .as_deref()
                            .is_some_and(|t| mentions(&g.prompt, t));
                        if g.events
                            .send(Event::Started {
                                prompt_tokens: p.ids.len(),
                            })
                            .is_ok()
                        {
                            self.waiting.push_back(slot::Pending::new(g, p, fault));
                        } else {
                            self.inflight.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    Err(e) => {
                        self.inflight.fetch_sub(1, Ordering::SeqCst);
                        self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                        let _ = g.events.send(Event::Error(e));
                    }
                }
            }
            Job::Tokenize {
                text,
                add_special,
                with_pieces,
                reply,
            } => {
                let r = guarded(|| prepare::tokenize(&self.files, &text, add_special, with_pieces));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
            Job::Detokenize { ids, reply } => {
                let r = guarded(|| prepare::detokenize(&self.files, &ids));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
            Job::Template {
                messages,
                enable_thinking,
                reply,
            } => {
                let r = guarded(|| prepare::template(&self.files, &messages, enable_thinking));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
        }
    }

    /// Moves waiting requests into free slots: the slot whose cache the
    /// prompt continues (a conversation's next turn), else the least
    /// recently used.
    fn admit(&mut self) {
        while !self.waiting.is_empty() {
            let Some(pending) = self.waiting.front() else {
                break;
            };
            if pending.cancelled() {
                self.waiting.pop_front();
                self.inflight.fetch_sub(1, Ordering::SeqCst);
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let best = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .max_by_key(|(_, s)| {
                    (
                        s.seq.continuation(&pending.prompt.ids),
                        std::cmp::Reverse(s.last_used),
                    )
                })
                .map(|(i, _)| i);
            let Some(i) = best else {
                break;
            };
            let Some(pending) = self.waiting.pop_front() else {
                break;
            };
            let tok = self.files.tokenizer.clone();
            let slot = &mut self.slots[i];
            match Active::start(pending, &mut slot.seq, tok) {
                Ok(a) => slot.active = Some(a),
                Err((events, e)) => {
                    self.inflight.fetch_sub(1, Ordering::SeqCst);
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    let _ = events.send(Event::Error(e));
                }
            }
        }
        self.metrics.busy.store(
            self.slots.iter().filter(|s| s.active.is_some()).count(),
            Ordering::Relaxed,
        );
    }

    /// One round: a token for every slot past its prompt (sampled, then
    /// computed together in one batched step), then one prompt chunk for
    /// one slot still reading its prompt (taking turns), so a long prompt
    /// delays the running streams by one chunk per token at most.
    fn work(&mut self) {
        for slot in &mut self.slots {
            if slot.active.as_ref().is_some_and(Active::cancelled) {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                slot.free(&self.inflight);
            }
        }
        self.decode_round();
        self.prefill_round();
        self.metrics.busy.store(
            self.slots.iter().filter(|s| s.active.is_some()).count(),
            Ordering::Relaxed,
        );
    }

    fn decode_round(&mut self) {
        let mut feed = vec![];
        let mut crashes = vec![];
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            if active.prefilling() {
                continue;
            }
            let next = guarded(|| {
                if active.fault {
                    panic!("a fault injected by MLLM_SERVE_FAULT");
                }
                active.sample(&slot.seq, &self.files, &self.metrics)
            });
            match next {
                Ok(slot::Next::Feed(token)) => feed.push((i, token)),
                Ok(slot::Next::Wait) => {}
                Ok(slot::Next::Finished) => slot.free(&self.inflight),
                Err(why) => crashes.push((i, why)),
            }
        }
        for (i, why) in crashes {
            self.crashed(i, &why);
        }
        if feed.is_empty() {
            return;
        }
        let tokens: Vec<u32> = feed.iter().map(|&(_, t)| t).collect();
        let runner = &mut self.runner;
        let mut seqs: Vec<&mut Sequence> = self
            .slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| feed.iter().any(|(j, _)| j == i))
            .map(|(_, s)| &mut s.seq)
            .collect();
        let result = guarded(|| {
            if let [seq] = seqs.as_mut_slice() {
                // One stream: its own step (a captured graph).
                seq.step(runner, tokens[0]).map(|l| vec![l])
            } else {
                Sequence::step_batch(runner, &mut seqs, &tokens)
            }
        });
        match result {
            Ok(Ok(all)) => {
                for ((i, _), logits) in feed.iter().zip(all) {
                    if let Some(a) = self.slots[*i].active.as_mut() {
                        a.set_logits(logits);
                    }
                }
            }
            Ok(Err(e)) => {
                for &(i, _) in &feed {
                    self.failed(i, ApiError::internal(engine_message(&e)));
                }
            }
            Err(why) => {
                for &(i, _) in &feed {
                    self.crashed(i, &why);
                }
            }
        }
    }

    fn prefill_round(&mut self) {
        let n = self.slots.len();
        let Some(i) = (0..n).map(|k| (self.turn + k) % n).find(|&i| {
            self.slots[i]
                .active
                .as_ref()
                .is_some_and(Active::prefilling)
        }) else {
            return;
        };
        self.turn = (i + 1) % n;
        let slot = &mut self.slots[i];
        let Some(active) = slot.active.as_mut() else {
            return;
        };
        match guarded(|| active.prefill(&mut self.runner, &mut slot.seq, &self.metrics)) {
            Ok(slot::Progress::Running) => {}
            Ok(slot::Progress::Finished) => slot.free(&self.inflight),
            Err(why) => self.crashed(i, &why),
        }
    }

    /// A request that failed: tell its client, free its slot.
    fn failed(&mut self, i: usize, e: ApiError) {
        let slot = &mut self.slots[i];
        if let Some(a) = slot.active.as_mut() {
            a.fail(e);
        }
        self.metrics.failed.fetch_add(1, Ordering::Relaxed);
        // The cache may be half-written: start the slot afresh.
        slot.seq.reset();
        slot.free(&self.inflight);
    }

    /// A panic inside the engine on slot `i`'s request: only that request fails.
    fn crashed(&mut self, i: usize, why: &str) {
        self.failed(i, crash_error(why));
    }
}

impl Slot {
    /// Ends the slot's request (its answer is sent or it failed).
    fn free(&mut self, inflight: &AtomicUsize) {
        if self.active.take().is_some() {
            inflight.fetch_sub(1, Ordering::SeqCst);
        }
        self.last_used = Instant::now();
    }
}

fn crash_error(why: &str) -> ApiError {
    ApiError::internal(format!(
        "the engine failed on this request (a bug; please report it): {why}"
    ))
}

/// Whether a prompt's text holds `needle` (for `MLLM_SERVE_FAULT`).
fn mentions(p: &PreparedPrompt, needle: &str) -> bool {
    match p {
        PreparedPrompt::Chat { messages, .. } => messages.iter().any(|m| m.text.contains(needle)),
        PreparedPrompt::Text(t) => t.contains(needle),
        PreparedPrompt::Ids(_) => false,
    }
}

/// Runs `f`, turning a panic into its message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown".into())
    })
}

/// Set once the server stops taking requests (SIGINT/SIGTERM).
pub static DRAINING: AtomicBool = AtomicBool::new(false);
