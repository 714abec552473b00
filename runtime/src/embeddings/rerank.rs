//! Reranking: a query and documents in, one relevance score per document
//! out, for `serve --rerank` (`POST /v1/rerank`).
//!
//! A cross-encoder script (`BertForSequenceClassification` in
//! models/bert.mdl) declares `score(input_ids, token_type_ids, positions,
//! lengths)`; each (query, document) pair is one input, its tokens typed
//! by the tokenizer's pair template, and all pairs run in one padding-free
//! forward. The score is the sigmoid of the one logit, as
//! sentence-transformers' `CrossEncoder.predict` gives it for a one-label
//! model; the logit itself comes along.

use super::{encoder_args, Embedder, Kind, BATCH_TOKENS};
use crate::{Error, Result};
use mllm_interpreter::Value;

/// One document's relevance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    /// Sigmoid of `logit`, in [0, 1].
    pub relevance: f32,
    pub logit: f32,
}

/// Scores of a request, in the documents' order.
#[derive(Clone, Debug)]
pub struct Scores {
    pub scores: Vec<Score>,
    /// Tokens read (every pair, special tokens included).
    pub prompt_tokens: usize,
}

/// A loaded cross-encoder.
pub struct Reranker {
    e: Embedder,
}

impl Reranker {
    /// Opens a model whose script declares `score`.
    pub fn open(path: &str, script: Option<&str>) -> Result<Reranker> {
        Reranker::new(Embedder::open(path, script)?)
    }

    pub fn new(e: Embedder) -> Result<Reranker> {
        let m = &e.model.program.modules[e.model.entry];
        if e.kind != Kind::Encoder || m.fn_index("score").is_none() {
            return Err(Error(format!(
                "error: {} is not a reranker: its script's `{}` has no `score` (cross-encoders such as BertForSequenceClassification in models/bert.mdl have one)",
                e.files.path.display(),
                m.name
            )));
        }
        Ok(Reranker { e })
    }

    /// The most tokens one (query, document) pair may have.
    pub fn max_tokens(&self) -> usize {
        self.e.max_tokens
    }

    pub fn path(&self) -> &std::path::Path {
        self.e.path()
    }

    /// Scores each of `documents` against `query`. A pair longer than the
    /// model takes is an error naming both numbers, unless `truncate`
    /// (then the longer side is cut first, as transformers' `longest_first`).
    pub fn score(&mut self, query: &str, documents: &[String], truncate: bool) -> Result<Scores> {
        if documents.is_empty() {
            return Err(Error("error: no documents to rank".into()));
        }
        let mut ids = Vec::with_capacity(documents.len());
        let mut types = Vec::with_capacity(documents.len());
        for (i, d) in documents.iter().enumerate() {
            let (mut a, mut t) = self.e.tokenizer.encode_pair(query, d)?;
            if a.len() > self.e.max_tokens {
                if !truncate {
                    return Err(Error(format!(
                        "error: document {i} with the query has {} tokens, more than the {} this model takes; shorten it, or ask for truncation (\"truncate\": true)",
                        a.len(),
                        self.e.max_tokens
                    )));
                }
                (a, t) = self.e.truncating.encode_pair(query, d)?;
            }
            ids.push(a);
            types.push(t);
        }
        let mut scores = Vec::with_capacity(ids.len());
        for group in super::batches(&ids, BATCH_TOKENS) {
            let t: Vec<&[u32]> = types[group.clone()].iter().map(Vec::as_slice).collect();
            let args = encoder_args(&ids[group.clone()], &t)?;
            let v = self
                .e
                .model
                .call("score", &mut self.e.exec, args)
                .map_err(|err| Error(err.render(&self.e.model.program.sources, crate::color())))?;
            let rows = group.len();
            let logits = match v {
                Value::Tensor(t) if t.rank() == 2 && t.shape()[0] == rows => {
                    if t.shape()[1] != 1 {
                        return Err(Error(format!(
                            "error: the model has {} labels; a reranker has one (its logit is the relevance)",
                            t.shape()[1]
                        )));
                    }
                    self.e.model.backend.download(&t)?.to_f32_vec()?
                }
                other => {
                    return Err(Error(format!(
                        "error: the script's `score` returned {} for {rows} pairs, expected logits [{rows}, 1]",
                        super::describe(&other)
                    )))
                }
            };
            for l in logits {
                if !l.is_finite() {
                    return Err(Error(format!(
                        "error: the model computed a non-finite score ({l})"
                    )));
                }
                scores.push(Score {
                    relevance: 1.0 / (1.0 + (-l).exp()),
                    logit: l,
                });
            }
        }
        Ok(Scores {
            scores,
            prompt_tokens: ids.iter().map(Vec::len).sum(),
        })
    }
}
