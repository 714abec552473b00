//! A model served for embeddings (`serve --embedding`) or reranking
//! (`serve --rerank`): a thread that owns the `Embedder` or `Reranker` (its
//! model is not `Send`) and answers one request at a time; a request's
//! inputs already run as one batched forward, so a queue of whole requests
//! keeps the cores as busy as slots would.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use mllm_runtime::embeddings::rerank::{Reranker, Scores};
use mllm_runtime::embeddings::{EmbedOptions, Embedder, Embeddings};
use tokio::sync::oneshot;

use crate::api::error::{engine_message, ApiError};
use crate::metrics::ModelMetrics;

pub enum EmbedJob {
    Embed {
        texts: Vec<String>,
        opts: EmbedOptions,
        reply: oneshot::Sender<Result<Embeddings, ApiError>>,
    },
    Rerank {
        query: String,
        documents: Vec<String>,
        truncate: bool,
        instruction: Option<String>,
        reply: oneshot::Sender<Result<Scores, ApiError>>,
    },
}

enum Engine {
    Embed(Embedder),
    Rerank(Reranker),
}

/// What the API tells about an embedding model.
#[derive(Clone, Debug)]
pub struct EmbedInfo {
    /// Served for `/v1/rerank` (a reranker) rather than embeddings.
    pub rerank: bool,
    pub dimension: usize,
    pub max_tokens: usize,
    pub pooling: &'static str,
    pub created: u64,
}

pub struct EmbedHandle {
    pub name: String,
    pub info: EmbedInfo,
    /// Requests answered and failed, tokens read and the time spent on
    /// them (`/metrics`; a request counts as its prompt).
    pub metrics: Arc<ModelMetrics>,
    /// Requests sent and not yet finished.
    inflight: Arc<AtomicUsize>,
    jobs: mpsc::Sender<EmbedJob>,
}

impl EmbedHandle {
    /// Loads the model on a new thread (as a reranker with `rerank`);
    /// returns once it is ready.
    pub fn spawn(
        name: String,
        path: String,
        script: Option<String>,
        rerank: bool,
    ) -> Result<EmbedHandle, String> {
        let (tx, rx) = mpsc::channel::<EmbedJob>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let p = path.clone();
        let metrics = Arc::new(ModelMetrics::new(1));
        let inflight = Arc::new(AtomicUsize::new(0));
        let counters = (metrics.clone(), inflight.clone());
        std::thread::Builder::new()
            .name(format!("embed {name}"))
            .spawn(move || {
                let loaded = Embedder::open(&p, script.as_deref()).and_then(|e| {
                    let info = EmbedInfo {
                        rerank,
                        dimension: e.dimension(),
                        max_tokens: e.max_tokens(),
                        pooling: e.settings().pooling.name(),
                        created: std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs()),
                    };
                    let engine = if rerank {
                        Engine::Rerank(Reranker::new(e)?)
                    } else {
                        Engine::Embed(e)
                    };
                    Ok((engine, info))
                });
                match loaded {
                    Ok((engine, info)) => {
                        let _ = ready_tx.send(Ok(info));
                        serve(engine, rx, counters);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(engine_message(&e)));
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread for {name}: {e}"))?;
        let info = ready_rx
            .recv()
            .map_err(|_| format!("loading {path} stopped unexpectedly"))??;
        Ok(EmbedHandle {
            name,
            info,
            metrics,
            inflight,
            jobs: tx,
        })
    }

    pub fn send(&self, job: EmbedJob) -> Result<(), ApiError> {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        self.jobs.send(job).map_err(|_| {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            ApiError::internal(format!("model `{}` has stopped", self.name))
        })
    }

    /// Requests waiting for the model.
    pub fn queue_depth(&self) -> usize {
        let busy = self.metrics.busy.load(Ordering::Relaxed);
        self.inflight.load(Ordering::SeqCst).saturating_sub(busy)
    }
}

/// Counts one request: busy while it runs, then finished (with its tokens
/// and time) or failed.
fn counted<T>(
    (metrics, inflight): &(Arc<ModelMetrics>, Arc<AtomicUsize>),
    tokens: impl Fn(&T) -> usize,
    f: impl FnOnce() -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    metrics.busy.fetch_add(1, Ordering::Relaxed);
    let start = Instant::now();
    let out = f();
    match &out {
        Ok(v) => {
            let n = tokens(v);
            metrics.add_prompt(n, n, start.elapsed().as_secs_f64());
            metrics.finished.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            metrics.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    metrics.busy.fetch_sub(1, Ordering::Relaxed);
    inflight.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Counts a request whose client left while it waited.
fn left((metrics, inflight): &(Arc<ModelMetrics>, Arc<AtomicUsize>)) {
    inflight.fetch_sub(1, Ordering::SeqCst);
    metrics.cancelled.fetch_add(1, Ordering::Relaxed);
}

fn serve(
    mut engine: Engine,
    rx: mpsc::Receiver<EmbedJob>,
    counters: (Arc<ModelMetrics>, Arc<AtomicUsize>),
) {
    while let Ok(job) = rx.recv() {
        match job {
            EmbedJob::Embed { texts, opts, reply } => {
                if reply.is_closed() {
                    left(&counters);
                    continue; // the client left while it waited
                }
                let out = counted(
                    &counters,
                    |e: &Embeddings| e.prompt_tokens,
                    || {
                        guarded(|| match &mut engine {
                            Engine::Embed(e) => e.embed(&texts, &opts),
                            Engine::Rerank(_) => Err(mllm_runtime::Error::invalid(
                                "this model ranks; it does not embed",
                            )),
                        })
                    },
                );
                let _ = reply.send(out);
            }
            EmbedJob::Rerank {
                query,
                documents,
                truncate,
                instruction,
                reply,
            } => {
                if reply.is_closed() {
                    left(&counters);
                    continue;
                }
                let out = counted(
                    &counters,
                    |s: &Scores| s.prompt_tokens,
                    || {
                        guarded(|| match &mut engine {
                            Engine::Rerank(r) => {
                                r.score(&query, &documents, truncate, instruction.as_deref())
                            }
                            Engine::Embed(_) => Err(mllm_runtime::Error::invalid(
                                "this model embeds; it does not rank",
                            )),
                        })
                    },
                );
                let _ = reply.send(out);
            }
        }
    }
}

/// Runs one request; its error is a 400 (the engine's errors here are
/// about the input: lengths, dimensions), a panic that request's 500, not
/// the model's end.
fn guarded<T>(f: impl FnOnce() -> mllm_runtime::Result<T>) -> Result<T, ApiError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(err)) => Err(ApiError::bad_request(engine_message(&err))),
        Err(_) => Err(ApiError::internal(
            "the request failed unexpectedly (a bug: please report it)",
        )),
    }
}
