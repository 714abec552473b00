//! Reranking: a query and documents in, one relevance score per document
//! out, for `serve --rerank` (`POST /v1/rerank`).
//!
//! Three kinds of reranker, each scored as sentence-transformers'
//! `CrossEncoder.predict` scores it (the sigmoid of one logit; the logit
//! itself comes along):
//! - a cross-encoder script (`BertForSequenceClassification` in
//!   models/bert.mdl) declares `score(input_ids, token_type_ids, positions,
//!   lengths)`; each (query, document) pair is one input, its tokens typed
//!   by the tokenizer's pair template, and all pairs run in one
//!   padding-free forward;
//! - a causal LM (Qwen3-Reranker): the pair is rendered into one prompt
//!   (`pair_prompt`) and the logit is the last token's "yes" logit minus
//!   its "no" logit;
//! - a decoder classifier (`Qwen3ForSequenceClassification`, such as
//!   Qwen3-Reranker converted to one label) declares `classify(input_ids,
//!   positions, cache)`: the same prompt, its one logit.

use super::pair_prompt::{cut_keeping_tail, PairPrompt};
use super::{decoder_args, encoder_args, Embedder, Kind, BATCH_TOKENS};
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

/// A loaded reranker.
pub struct Reranker {
    e: Embedder,
    head: Head,
}

/// Where a pair's logit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// The encoder script's `score`.
    Encoder,
    /// The decoder script's `classify` on the pair's prompt.
    Classify,
    /// The causal LM's last-token logits: `yes` minus `no`.
    YesNo { yes: u32, no: u32 },
}

impl Reranker {
    /// Opens a reranking model: a cross-encoder script with `score`, a
    /// decoder classifier with `classify`, or a causal LM whose vocabulary
    /// has "yes" and "no".
    pub fn open(path: &str, script: Option<&str>) -> Result<Reranker> {
        Reranker::new(Embedder::open(path, script)?)
    }

    pub fn new(e: Embedder) -> Result<Reranker> {
        let m = &e.model.program.modules[e.model.entry];
        let name = e.files.path.display().to_string();
        let head = match e.kind {
            Kind::Encoder if m.fn_index("score").is_some() => Head::Encoder,
            Kind::Encoder => {
                return Err(Error::invalid(format!("{name} is not a reranker: its script's `{}` has no `score` (cross-encoders such as BertForSequenceClassification in models/bert.mdl have one)",
                    m.name
                )))
            }
            Kind::Decoder if m.fn_index("classify").is_some() => Head::Classify,
            Kind::Decoder if m.fn_index("forward").is_some() => {
                let id = |t: &str| e.tokenizer.token_to_id(t);
                match (id("yes"), id("no")) {
                    (Some(yes), Some(no)) => Head::YesNo { yes, no },
                    _ => {
                        return Err(Error::invalid(format!("{name} cannot rerank as a causal LM: its vocabulary lacks the token \"yes\" or \"no\", whose logits give the relevance (as in Qwen3-Reranker)"
                        )))
                    }
                }
            }
            Kind::Decoder => {
                return Err(Error::invalid(format!("{name} is not a reranker: its script's `{}` has neither `classify` (sequence classifiers) nor `forward` (causal LMs scored by their \"yes\" and \"no\" logits)",
                    m.name
                )))
            }
        };
        let r = Reranker { e, head };
        if head != Head::Encoder {
            r.pair_prompt()?; // says now why the model cannot take pairs
        }
        Ok(r)
    }

    /// A decoder reranker's prompt for pairs.
    fn pair_prompt(&self) -> Result<PairPrompt<'_>> {
        PairPrompt::for_model(
            self.e.files.chat_template.as_ref(),
            &self.e.tokenizer,
            &self.e.files.path.display().to_string(),
        )
    }

    /// The most tokens one (query, document) pair may have.
    pub fn max_tokens(&self) -> usize {
        self.e.max_tokens
    }

    pub fn path(&self) -> &std::path::Path {
        self.e.path()
    }

    /// Scores each of `documents` against `query`. A pair longer than the
    /// model takes is an error naming both numbers, unless `truncate` (then
    /// a cross-encoder's longer side is cut first, as transformers'
    /// `longest_first`; a decoder's prompt is cut keeping the template's
    /// tail, as sentence-transformers does). `instruction` replaces a
    /// decoder reranker's task description; cross-encoders take none.
    pub fn score(
        &mut self,
        query: &str,
        documents: &[String],
        truncate: bool,
        instruction: Option<&str>,
    ) -> Result<Scores> {
        if documents.is_empty() {
            return Err(Error::invalid("no documents to rank"));
        }
        let (logits, prompt_tokens) = match self.head {
            Head::Encoder => {
                if instruction.is_some() {
                    return Err(Error::invalid("this reranker is a cross-encoder, which takes no instruction; leave \"instruction\" out"));
                }
                self.encoder_logits(query, documents, truncate)?
            }
            _ => self.decoder_logits(query, documents, truncate, instruction)?,
        };
        let mut scores = Vec::with_capacity(logits.len());
        for l in logits {
            if !l.is_finite() {
                return Err(Error::invalid(format!(
                    "the model computed a non-finite score ({l})"
                )));
            }
            scores.push(Score {
                relevance: 1.0 / (1.0 + (-l).exp()),
                logit: l,
            });
        }
        Ok(Scores {
            scores,
            prompt_tokens,
        })
    }

    fn too_long(&self, i: usize, n: usize) -> Error {
        Error::invalid(format!("document {i} with the query has {n} tokens, more than the {} this model takes; shorten it, or ask for truncation (\"truncate\": true)",
            self.e.max_tokens
        ))
    }

    /// A cross-encoder's logits: all pairs in padding-free forwards.
    fn encoder_logits(
        &mut self,
        query: &str,
        documents: &[String],
        truncate: bool,
    ) -> Result<(Vec<f32>, usize)> {
        let mut ids = Vec::with_capacity(documents.len());
        let mut types = Vec::with_capacity(documents.len());
        for (i, d) in documents.iter().enumerate() {
            let (mut a, mut t) = self.e.tokenizer.encode_pair(query, d)?;
            if a.len() > self.e.max_tokens {
                if !truncate {
                    return Err(self.too_long(i, a.len()));
                }
                (a, t) = self.e.truncating.encode_pair(query, d)?;
            }
            ids.push(a);
            types.push(t);
        }
        let mut out = Vec::with_capacity(ids.len());
        for group in super::batches(&ids, BATCH_TOKENS) {
            let t: Vec<&[u32]> = types[group.clone()].iter().map(Vec::as_slice).collect();
            let args = encoder_args(&ids[group.clone()], &t)?;
            let v = self.call("score", args)?;
            out.extend(self.logit_rows(v, group.len(), 1)?);
        }
        Ok((out, ids.iter().map(Vec::len).sum()))
    }

    /// A decoder reranker's logits: each pair's prompt run alone.
    fn decoder_logits(
        &mut self,
        query: &str,
        documents: &[String],
        truncate: bool,
        instruction: Option<&str>,
    ) -> Result<(Vec<f32>, usize)> {
        let mut prompts = Vec::with_capacity(documents.len());
        {
            let prompt = self.pair_prompt()?;
            let tok = &self.e.tokenizer;
            let mut tail = None;
            for (i, d) in documents.iter().enumerate() {
                let ids = tok.encode(&prompt.render(query, d, instruction)?, false)?;
                if ids.len() <= self.e.max_tokens {
                    prompts.push(ids);
                    continue;
                }
                if !truncate {
                    return Err(self.too_long(i, ids.len()));
                }
                if tail.is_none() {
                    tail = Some(prompt.tail(tok, instruction)?);
                }
                let tail = tail.as_deref().unwrap_or_default();
                prompts.push(cut_keeping_tail(ids, self.e.max_tokens, tail));
            }
        }
        let mut out = Vec::with_capacity(prompts.len());
        for ids in &prompts {
            let mut args = decoder_args(ids)?;
            let l = match self.head {
                Head::YesNo { yes, no } => {
                    args.push(("last_only", Value::Bool(true)));
                    let v = self.call("forward", args)?;
                    let vocab = match &v {
                        Value::Tensor(t) if t.rank() == 2 => t.shape()[1],
                        _ => 0,
                    };
                    let row = self.logit_rows(v, 1, vocab.max(1))?;
                    match (row.get(yes as usize), row.get(no as usize)) {
                        (Some(y), Some(n)) => y - n,
                        _ => {
                            return Err(Error::invalid(format!("the model's logits have {vocab} entries; the tokens \"yes\" ({yes}) and \"no\" ({no}) lie beyond them"
                            )))
                        }
                    }
                }
                _ => {
                    let v = self.call("classify", args)?;
                    self.logit_rows(v, 1, 1)?[0]
                }
            };
            out.push(l);
        }
        Ok((out, prompts.iter().map(Vec::len).sum()))
    }

    fn call(&mut self, f: &str, args: Vec<(&'static str, Value)>) -> Result<Value> {
        self.e.model.call(f, &mut self.e.exec, args).map_err(|err| {
            let sources = &self.e.model.program.sources;
            Error::diagnostics(crate::ErrorKind::Generate, |c| err.render(sources, c))
        })
    }

    /// The values of a script's `[rows, width]` logits.
    fn logit_rows(&mut self, v: Value, rows: usize, width: usize) -> Result<Vec<f32>> {
        match v {
            Value::Tensor(t) if t.rank() == 2 && t.shape()[0] == rows => {
                if t.shape()[1] != width {
                    return Err(Error::invalid(format!(
                        "the model has {} labels; a reranker has one (its logit is the relevance)",
                        t.shape()[1]
                    )));
                }
                Ok(self.e.model.backend.download(&t)?.to_f32_vec()?)
            }
            other => Err(Error::invalid(format!(
                "the script returned {} for {rows} pairs, expected logits [{rows}, {width}]",
                super::describe(&other)
            ))),
        }
    }
}
