//! `mllm.load_embedder(path)` and `mllm.load_reranker(path)`: embedding
//! and reranking models over mllm-embed's `Embedder` and `Reranker` (what
//! `mllm embed` and `serve --embedding` / `--rerank` run). The GIL is
//! released while the model computes.

use std::sync::Arc;

use mllm_embed as mllm;
use mllm_embed::{EmbedParams, LoadConfig};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::py_err;

/// A loaded embedding model (BERT-family encoders, Qwen3-Embedding).
#[pyclass(frozen, module = "mllm")]
pub struct Embedder {
    inner: Arc<mllm::Embedder>,
    path: String,
}

#[pymethods]
impl Embedder {
    /// One vector per text (`list[list[float]]`). `pooling` (`mean`, `cls`,
    /// `last`) and `normalize` replace what the model's files say;
    /// `prompt_name` puts a named prompt (`query`) before each text;
    /// `dimensions` keeps the leading values; `truncate` cuts texts longer
    /// than the model takes instead of raising.
    #[pyo3(signature = (texts, *, pooling=None, normalize=None, prompt_name=None, dimensions=None, truncate=false))]
    #[allow(clippy::too_many_arguments)]
    fn embed(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        pooling: Option<String>,
        normalize: Option<bool>,
        prompt_name: Option<String>,
        dimensions: Option<usize>,
        truncate: bool,
    ) -> PyResult<Vec<Vec<f32>>> {
        let p = EmbedParams {
            pooling,
            normalize,
            truncate,
            prompt_name,
            dimensions,
        };
        let inner = self.inner.clone();
        py.detach(move || inner.embed(&texts, &p)).map_err(py_err)
    }

    /// Values per embedding.
    #[getter]
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    /// The most tokens one text may have.
    #[getter]
    fn max_tokens(&self) -> usize {
        self.inner.max_tokens()
    }

    fn __repr__(&self) -> String {
        format!("mllm.Embedder({:?})", self.path)
    }
}

/// A loaded reranker (BERT cross-encoders, Qwen3-Reranker).
#[pyclass(frozen, module = "mllm")]
pub struct Reranker {
    inner: Arc<mllm::Reranker>,
    path: String,
}

#[pymethods]
impl Reranker {
    /// The relevance of each document to `query`, in [0, 1], in the
    /// documents' order. `instruction` replaces a decoder reranker's task
    /// description; `truncate` cuts pairs longer than the model takes.
    #[pyo3(signature = (query, documents, *, instruction=None, truncate=false))]
    fn rank(
        &self,
        py: Python<'_>,
        query: String,
        documents: Vec<String>,
        instruction: Option<String>,
        truncate: bool,
    ) -> PyResult<Vec<f32>> {
        let inner = self.inner.clone();
        py.detach(move || inner.rank(&query, &documents, truncate, instruction.as_deref()))
            .map_err(py_err)
    }

    fn __repr__(&self) -> String {
        format!("mllm.Reranker({:?})", self.path)
    }
}

/// Loads `path` with `load` off the GIL; the value and the path.
fn open<T: Send>(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: Option<usize>,
    load: fn(&str, &LoadConfig) -> mllm::Result<T>,
) -> PyResult<(Arc<T>, String)> {
    let path = path
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| PyValueError::new_err("the model path is not UTF-8"))?;
    let cfg = LoadConfig {
        threads,
        context: None,
    };
    let p = path.clone();
    let v = py.detach(move || load(&p, &cfg)).map_err(py_err)?;
    Ok((Arc::new(v), path))
}

/// Loads an embedding model: a Hugging Face / sentence-transformers
/// directory, a GGUF or a `.mllm` file.
#[pyfunction]
#[pyo3(signature = (path, threads=None))]
pub fn load_embedder(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: Option<usize>,
) -> PyResult<Embedder> {
    let (inner, path) = open(py, path, threads, mllm::Embedder::load)?;
    Ok(Embedder { inner, path })
}

/// Loads a reranker: a cross-encoder, or a decoder reranker such as
/// Qwen3-Reranker.
#[pyfunction]
#[pyo3(signature = (path, threads=None))]
pub fn load_reranker(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: Option<usize>,
) -> PyResult<Reranker> {
    let (inner, path) = open(py, path, threads, mllm::Reranker::load)?;
    Ok(Reranker { inner, path })
}
