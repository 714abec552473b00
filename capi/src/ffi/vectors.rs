//! Embedding and reranking models in C: mllm-embed's `Embedder` and
//! `Reranker` (what `mllm embed` and `serve --embedding` / `--rerank`
//! run). Results are written into buffers the caller owns.

use std::ffi::c_char;

use mllm_embed::{EmbedParams, Embedder, Reranker, Status};

use super::{guard, invalid, load_config, str_arg, strs_arg, MllmModelOptions};

/// A loaded embedding model (BERT-family encoders, Qwen3-Embedding).
pub struct MllmEmbedder {
    embedder: Embedder,
}

/// A loaded reranker (BERT cross-encoders, Qwen3-Reranker).
pub struct MllmReranker {
    reranker: Reranker,
}

/// Loads an embedding model: a Hugging Face / sentence-transformers
/// directory, a GGUF or a `.mllm` file. `options` may be NULL (its
/// `context` is not used: the model's limit applies). On success `*out` is the model (free it with
/// `mllm_embedder_free`); on failure it is NULL.
#[no_mangle]
pub unsafe extern "C" fn mllm_embedder_load(
    path: *const c_char,
    options: *const MllmModelOptions,
    out: *mut *mut MllmEmbedder,
) -> Status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let embedder = Embedder::load(str_arg(path, "path")?, &load_config(options))?;
        *out = Box::into_raw(Box::new(MllmEmbedder { embedder }));
        Ok(())
    })
}

/// Frees an embedding model; NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn mllm_embedder_free(embedder: *mut MllmEmbedder) {
    if !embedder.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(Box::from_raw(embedder))
        }));
    }
}

/// Values per embedding; 0 for NULL.
#[no_mangle]
pub unsafe extern "C" fn mllm_embedder_dimension(embedder: *const MllmEmbedder) -> usize {
    embedder.as_ref().map_or(0, |e| e.embedder.dimension())
}

/// Embeds `n_texts` UTF-8 texts with the model's pooling and prompts.
/// `normalize`: -1 as the model's files say, 0 no, 1 to unit length.
/// `out` receives `n_texts * mllm_embedder_dimension()` floats, row after
/// row; `out_len` is its capacity in floats (a smaller one is an error,
/// nothing written). A text longer than the model takes is an error
/// unless `truncate`.
#[no_mangle]
pub unsafe extern "C" fn mllm_embed(
    embedder: *const MllmEmbedder,
    texts: *const *const c_char,
    n_texts: usize,
    normalize: i32,
    truncate: bool,
    out: *mut f32,
    out_len: usize,
) -> Status {
    guard(|| {
        let e = &embedder
            .as_ref()
            .ok_or_else(|| invalid("embedder is NULL"))?
            .embedder;
        let texts = strs_arg(texts, n_texts, "texts")?;
        let need = n_texts.saturating_mul(e.dimension());
        if out.is_null() || out_len < need {
            return Err(invalid(&format!(
                "out holds {out_len} floats; {n_texts} texts of {} values need {need}",
                e.dimension()
            )));
        }
        let p = EmbedParams {
            normalize: match normalize {
                -1 => None,
                0 => Some(false),
                1 => Some(true),
                n => return Err(invalid(&format!("normalize is {n}; give -1, 0 or 1"))),
            },
            truncate,
            ..EmbedParams::default()
        };
        let rows = e.embed(&texts, &p)?;
        let dst = std::slice::from_raw_parts_mut(out, need);
        for (chunk, row) in dst.chunks_mut(e.dimension().max(1)).zip(&rows) {
            chunk.copy_from_slice(&row[..chunk.len()]);
        }
        Ok(())
    })
}

/// Loads a reranker. `options` may be NULL. On success `*out` is the model
/// (free it with `mllm_reranker_free`); on failure it is NULL.
#[no_mangle]
pub unsafe extern "C" fn mllm_reranker_load(
    path: *const c_char,
    options: *const MllmModelOptions,
    out: *mut *mut MllmReranker,
) -> Status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let reranker = Reranker::load(str_arg(path, "path")?, &load_config(options))?;
        *out = Box::into_raw(Box::new(MllmReranker { reranker }));
        Ok(())
    })
}

/// Frees a reranker; NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn mllm_reranker_free(reranker: *mut MllmReranker) {
    if !reranker.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(Box::from_raw(reranker))
        }));
    }
}

/// The relevance (0 to 1) of each of `n_documents` documents to `query`,
/// written to `scores` (`n_documents` floats, the documents' order).
/// `instruction` (may be NULL) replaces a decoder reranker's task
/// description; `truncate` cuts pairs longer than the model takes.
#[no_mangle]
pub unsafe extern "C" fn mllm_rank(
    reranker: *const MllmReranker,
    query: *const c_char,
    documents: *const *const c_char,
    n_documents: usize,
    instruction: *const c_char,
    truncate: bool,
    scores: *mut f32,
) -> Status {
    guard(|| {
        let r = &reranker
            .as_ref()
            .ok_or_else(|| invalid("reranker is NULL"))?
            .reranker;
        let query = str_arg(query, "query")?;
        let docs = strs_arg(documents, n_documents, "documents")?;
        if scores.is_null() {
            return Err(invalid("scores is NULL"));
        }
        let instruction = if instruction.is_null() {
            None
        } else {
            Some(str_arg(instruction, "instruction")?)
        };
        let got = r.rank(query, &docs, truncate, instruction)?;
        std::slice::from_raw_parts_mut(scores, got.len()).copy_from_slice(&got);
        Ok(())
    })
}
