//! Embeddings and reranking for programs that embed the engine: the
//! runtime's `Embedder` and `Reranker` (what `mllm embed` and `serve
//! --embedding` / `--rerank` run) behind a lock, with this crate's errors.
//!
//! Threads: as for `Model` (see the crate's comment), the runtime's model
//! holds `Rc`s; every use happens while holding `inner`'s lock, so no two
//! threads touch them at once, which makes the `Send`/`Sync` below sound.

use std::sync::Mutex;

use mllm_runtime::embeddings::rerank::Reranker as RtReranker;
use mllm_runtime::embeddings::{EmbedOptions, Embedder as RtEmbedder, Pooling};
use mllm_runtime::set_threads;

use crate::{poisoned, resolve_path, Error, LoadConfig, Result, Status};

/// How a call embeds; `None` keeps what the model's files say.
#[derive(Clone, Debug, Default)]
pub struct EmbedParams {
    /// `mean`, `cls`, `last` (`none`, one vector per token, is the
    /// server's and the CLI's).
    pub pooling: Option<String>,
    pub normalize: Option<bool>,
    /// Cut inputs longer than the model takes instead of refusing them.
    pub truncate: bool,
    /// A named prompt of the model (`query`).
    pub prompt_name: Option<String>,
    /// Keep this many leading values (Matryoshka models).
    pub dimensions: Option<usize>,
}

/// A loaded embedding model (BERT-family encoders, Qwen3-Embedding).
pub struct Embedder {
    inner: Mutex<RtEmbedder>,
    dimension: usize,
    max_tokens: usize,
}

// SAFETY: see the module comment.
unsafe impl Send for Embedder {}
unsafe impl Sync for Embedder {}

/// A loaded reranker (BERT cross-encoders, Qwen3-Reranker).
pub struct Reranker {
    inner: Mutex<RtReranker>,
}

// SAFETY: see the module comment.
unsafe impl Send for Reranker {}
unsafe impl Sync for Reranker {}

fn open(path: &str, cfg: &LoadConfig) -> Result<RtEmbedder> {
    let path = &resolve_path(path)?;
    set_threads(cfg.threads);
    RtEmbedder::open(path, None).map_err(|e| Error::runtime(Status::Load, e))
}

impl Embedder {
    /// Opens an embedding model: a Hugging Face / sentence-transformers
    /// directory, a GGUF or a `.mllm` file.
    pub fn load(path: &str, cfg: &LoadConfig) -> Result<Embedder> {
        let e = open(path, cfg)?;
        Ok(Embedder {
            dimension: e.dimension(),
            max_tokens: e.max_tokens(),
            inner: Mutex::new(e),
        })
    }

    /// Values per embedding.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// The most tokens one input may have.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// One vector per text, all texts in as few forwards as the model
    /// allows.
    pub fn embed(&self, texts: &[String], p: &EmbedParams) -> Result<Vec<Vec<f32>>> {
        let pooling = match p.pooling.as_deref() {
            None => None,
            Some("none") => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    "pooling \"none\" gives a vector per token; here each text gets one vector (mean, cls or last)",
                ))
            }
            Some(name) => Some(
                name.parse::<Pooling>()
                    .map_err(|e| Error::new(Status::InvalidArgument, e))?,
            ),
        };
        let opts = EmbedOptions {
            pooling,
            normalize: p.normalize,
            truncate: p.truncate,
            prompt_name: p.prompt_name.clone(),
            dimensions: p.dimensions,
        };
        let mut e = self.inner.lock().map_err(|_| poisoned())?;
        let out = e
            .embed(texts, &opts)
            .map_err(|e| Error::runtime(Status::InvalidArgument, e))?;
        Ok(out
            .items
            .into_iter()
            .map(|mut rows| rows.pop().unwrap_or_default())
            .collect())
    }
}

impl Reranker {
    /// Opens a reranking model.
    pub fn load(path: &str, cfg: &LoadConfig) -> Result<Reranker> {
        let e = open(path, cfg)?;
        let r = RtReranker::new(e).map_err(|e| Error::runtime(Status::Load, e))?;
        Ok(Reranker {
            inner: Mutex::new(r),
        })
    }

    /// The relevance of each document to `query` (in [0, 1], in the
    /// documents' order).
    pub fn rank(
        &self,
        query: &str,
        documents: &[String],
        truncate: bool,
        instruction: Option<&str>,
    ) -> Result<Vec<f32>> {
        let mut r = self.inner.lock().map_err(|_| poisoned())?;
        let s = r
            .score(query, documents, truncate, instruction)
            .map_err(|e| Error::runtime(Status::InvalidArgument, e))?;
        Ok(s.scores.iter().map(|s| s.relevance).collect())
    }
}
