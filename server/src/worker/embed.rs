//! A model served for embeddings (`serve --embedding`): a thread that owns
//! the `Embedder` (its model is not `Send`) and answers one request at a
//! time; a request's inputs already run as one batched forward, so a queue
//! of whole requests keeps the cores as busy as slots would.

use std::sync::mpsc;

use mllm_runtime::embeddings::{EmbedOptions, Embedder, Embeddings};
use tokio::sync::oneshot;

use crate::api::error::{engine_message, ApiError};

pub struct EmbedJob {
    pub texts: Vec<String>,
    pub opts: EmbedOptions,
    pub reply: oneshot::Sender<Result<Embeddings, ApiError>>,
}

/// What the API tells about an embedding model.
#[derive(Clone, Debug)]
pub struct EmbedInfo {
    pub dimension: usize,
    pub max_tokens: usize,
    pub pooling: &'static str,
    pub created: u64,
}

pub struct EmbedHandle {
    pub name: String,
    pub info: EmbedInfo,
    jobs: mpsc::Sender<EmbedJob>,
}

impl EmbedHandle {
    /// Loads the model on a new thread; returns once it is ready.
    pub fn spawn(
        name: String,
        path: String,
        script: Option<String>,
    ) -> Result<EmbedHandle, String> {
        let (tx, rx) = mpsc::channel::<EmbedJob>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let p = path.clone();
        std::thread::Builder::new()
            .name(format!("embed {name}"))
            .spawn(move || match Embedder::open(&p, script.as_deref()) {
                Ok(e) => {
                    let info = EmbedInfo {
                        dimension: e.dimension(),
                        max_tokens: e.max_tokens(),
                        pooling: e.settings().pooling.name(),
                        created: std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs()),
                    };
                    let _ = ready_tx.send(Ok(info));
                    serve(e, rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(engine_message(&e)));
                }
            })
            .map_err(|e| format!("cannot start a thread for {name}: {e}"))?;
        let info = ready_rx
            .recv()
            .map_err(|_| format!("loading {path} stopped unexpectedly"))??;
        Ok(EmbedHandle {
            name,
            info,
            jobs: tx,
        })
    }

    pub fn send(&self, job: EmbedJob) -> Result<(), ApiError> {
        self.jobs
            .send(job)
            .map_err(|_| ApiError::internal(format!("model `{}` has stopped", self.name)))
    }
}

fn serve(mut e: Embedder, rx: mpsc::Receiver<EmbedJob>) {
    while let Ok(job) = rx.recv() {
        if job.reply.is_closed() {
            continue; // the client left while it waited
        }
        // A panic is that request's 500, not the model's end.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.embed(&job.texts, &job.opts)
        }));
        let answer = match out {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(err)) => Err(ApiError::bad_request(engine_message(&err))),
            Err(_) => Err(ApiError::internal(
                "embedding failed unexpectedly (a bug: please report it)",
            )),
        };
        let _ = job.reply.send(answer);
    }
}
