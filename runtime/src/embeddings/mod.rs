//! Embeddings: texts in, one vector per text out (or one per token), for
//! `mllm embed`, `serve --embedding` and the bindings.
//!
//! A model's script says how to get hidden states:
//! - an encoder (`models/bert.mdl`) declares `encode(input_ids,
//!   token_type_ids, positions, lengths)`: many inputs run in one forward
//!   without padding (their tokens concatenated; attention per input);
//! - a decoder (`nn.CausalLM`: Qwen3-Embedding) declares
//!   `hidden_states(input_ids, positions, cache)`: each input runs alone
//!   against a fresh cache (causal attention cannot mix inputs).
//!
//! Pooling and normalisation follow the model's sentence-transformers files
//! (`st_config`), unless the caller overrides them.

pub mod pair_prompt;
pub mod pooling;
pub mod rerank;
pub mod st_config;

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::{SharedBackend, Tensor};
use mllm_interpreter::{Eager, KvCache, Model, Value};

use crate::model_files::{self, ModelFiles};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
pub use pooling::{normalize, Pooling};
pub use st_config::StConfig;

/// Tokens per encoder forward: inputs are packed into forwards of at most
/// this many tokens (one input longer than it runs alone), which keeps the
/// activations of a large request in tens of megabytes.
pub const BATCH_TOKENS: usize = 4096;

/// What a caller may change per request.
#[derive(Clone, Debug, Default)]
pub struct EmbedOptions {
    /// Replaces the model's pooling.
    pub pooling: Option<Pooling>,
    /// Replaces the model's normalisation.
    pub normalize: Option<bool>,
    /// Cuts inputs longer than the model takes instead of refusing them.
    pub truncate: bool,
    /// A named prompt of the model (`query`), put before every input.
    pub prompt_name: Option<String>,
    /// Keeps the first `dimensions` values (Matryoshka models), normalised
    /// again when normalising.
    pub dimensions: Option<usize>,
}

/// The embeddings of a request.
#[derive(Clone, Debug)]
pub struct Embeddings {
    /// Per input: one row, or one per token with `Pooling::None`.
    pub items: Vec<Vec<Vec<f32>>>,
    /// Tokens read, special tokens included.
    pub prompt_tokens: usize,
    /// Whether each input has a row per token (`Pooling::None`).
    pub per_token: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Encoder,
    Decoder,
}

/// A loaded embedding model.
pub struct Embedder {
    files: ModelFiles,
    model: Model,
    exec: Eager<SharedBackend>,
    tokenizer: std::sync::Arc<Tokenizer>,
    /// The same tokenizer, truncating to `max_tokens` (special tokens kept,
    /// as sentence-transformers' truncation does).
    truncating: Tokenizer,
    settings: StConfig,
    kind: Kind,
    max_tokens: usize,
    dimension: usize,
}

impl Embedder {
    /// Opens a model directory or file and its script (`script`, else the
    /// built-in one for its architecture).
    pub fn open(path: &str, script: Option<&str>) -> Result<Embedder> {
        let files = model_files::open(path)?;
        let model = model_files::load_model(&files, script)?;
        Embedder::from_files(files, model)
    }

    /// An embedder over an opened model.
    pub fn from_files(files: ModelFiles, model: Model) -> Result<Embedder> {
        let m = &model.program.modules[model.entry];
        let kind = if m.fn_index("encode").is_some() {
            Kind::Encoder
        } else if m.fn_index("hidden_states").is_some() {
            Kind::Decoder
        } else {
            return Err(Error::invalid(format!("{} is not an embedding model: its script's `{}` has neither `encode` (encoders such as models/bert.mdl) nor `hidden_states` (decoders built on nn.CausalLM)",
                files.path.display(),
                m.name
            )));
        };
        files.tokenizer()?; // says so when there is none
        let tokenizer = files
            .tokenizer
            .clone()
            .ok_or_else(|| Error::tokenizer("no tokenizer"))?;
        // A directory's own files, else the copy a .mllm file keeps.
        let st_files = if files.path.is_dir() {
            mllm_converter::sentence_transformers::files(&files.path)?
        } else {
            files
                .config
                .get(mllm_converter::sentence_transformers::CONFIG_KEY)
                .cloned()
        };
        let origin = files.path.display().to_string();
        let settings = StConfig::from_files(st_files.as_ref(), kind == Kind::Decoder, &origin)?;
        let config_int = |k: &str| {
            files
                .config
                .get(k)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
        };
        let positions = config_int("max_position_embeddings");
        let max_tokens = match (settings.max_seq_length, positions) {
            (Some(s), Some(p)) => s.min(p),
            (Some(s), None) => s,
            (None, Some(p)) => p,
            (None, None) => {
                return Err(Error::invalid(format!("{} says neither max_position_embeddings (config.json) nor max_seq_length (sentence_bert_config.json): the longest input is unknown",
                    files.path.display()
                )))
            }
        };
        let dimension = config_int("hidden_size")
            .ok_or_else(|| Error::invalid(format!("{} has no hidden_size", files.config_origin)))?;
        let truncating = tokenizer.truncating(max_tokens)?;
        let exec = Eager::new(files.backend.clone());
        Ok(Embedder {
            files,
            model,
            exec,
            tokenizer,
            truncating,
            settings,
            kind,
            max_tokens,
            dimension,
        })
    }

    /// Values per embedding (the model's hidden size).
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// The most tokens one input may have, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// What the model's files say (pooling, normalisation, prompts).
    pub fn settings(&self) -> &StConfig {
        &self.settings
    }

    /// Where the model came from.
    pub fn path(&self) -> &std::path::Path {
        &self.files.path
    }

    /// The ids of one input, the prompt before it and the special tokens
    /// around it; longer than `max_tokens` is an error naming both numbers
    /// unless `truncate`. `index` names the input in that error.
    pub fn tokenize(
        &self,
        text: &str,
        prompt: &str,
        truncate: bool,
        index: usize,
    ) -> Result<Vec<u32>> {
        let full = format!("{prompt}{text}");
        let ids = self.tokenizer.encode(&full, true)?;
        if ids.len() <= self.max_tokens {
            return Ok(ids);
        }
        if !truncate {
            return Err(Error::invalid(format!("input {index} has {} tokens, more than the {} this model takes; shorten it, or ask for truncation (--truncate, \"truncate\": true)",
                ids.len(),
                self.max_tokens
            )));
        }
        Ok(self.truncating.encode(&full, true)?)
    }

    /// Embeds `texts` (at least one).
    pub fn embed(&mut self, texts: &[String], opts: &EmbedOptions) -> Result<Embeddings> {
        if texts.is_empty() {
            return Err(Error::invalid("no input to embed"));
        }
        if let Some(d) = opts.dimensions {
            if d == 0 || d > self.dimension {
                return Err(Error::invalid(format!(
                    "dimensions {d} is not between 1 and the model's {}",
                    self.dimension
                )));
            }
        }
        let prompt = self
            .settings
            .prompt(opts.prompt_name.as_deref())?
            .to_string();
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.tokenize(t, &prompt, opts.truncate, i))
            .collect::<Result<_>>()?;
        if let Some(i) = ids.iter().position(|v| v.is_empty()) {
            return Err(Error::invalid(format!("input {i} has no tokens")));
        }
        let pooling = opts.pooling.unwrap_or(self.settings.pooling);
        let norm = opts.normalize.unwrap_or(self.settings.normalize);
        let mut items = Vec::with_capacity(ids.len());
        for group in batches(
            &ids,
            if self.kind == Kind::Encoder {
                BATCH_TOKENS
            } else {
                0
            },
        ) {
            let hidden = self.hidden(&ids[group.clone()])?;
            let mut row = 0;
            for input in &ids[group] {
                let rows: Vec<&[f32]> = (row..row + input.len())
                    .map(|r| &hidden[r * self.dimension..(r + 1) * self.dimension])
                    .collect();
                row += input.len();
                let mut pooled = pooling.apply(&rows);
                for v in pooled.iter_mut() {
                    if let Some(d) = opts.dimensions {
                        v.truncate(d);
                    }
                    if norm {
                        normalize(v);
                    }
                }
                items.push(pooled);
            }
        }
        Ok(Embeddings {
            items,
            prompt_tokens: ids.iter().map(Vec::len).sum(),
            per_token: pooling == Pooling::None,
        })
    }

    /// The last hidden states of `inputs`, one after another, as f32
    /// `[tokens * dimension]`.
    fn hidden(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<f32>> {
        let render = |e: mllm_interpreter::RtError, p: &Model| {
            Error::diagnostics(crate::ErrorKind::Generate, |c| {
                e.render(&p.program.sources, c)
            })
        };
        let mut out = Vec::new();
        match self.kind {
            Kind::Encoder => {
                let n = inputs.iter().map(Vec::len).sum();
                let types: Vec<&[u32]> = inputs.iter().map(|v| &v[..0]).collect();
                let args = encoder_args(inputs, &types)?;
                let v = self
                    .model
                    .call("encode", &mut self.exec, args)
                    .map_err(|e| render(e, &self.model))?;
                out = self.read_rows(v, n)?;
            }
            Kind::Decoder => {
                for input in inputs {
                    let n = input.len();
                    let args = decoder_args(input)?;
                    let v = self
                        .model
                        .call("hidden_states", &mut self.exec, args)
                        .map_err(|e| render(e, &self.model))?;
                    out.extend(self.read_rows(v, n)?);
                }
            }
        }
        Ok(out)
    }

    /// The f32 values of a script's `[rows, dimension]` result.
    fn read_rows(&mut self, v: Value, rows: usize) -> Result<Vec<f32>> {
        match v {
            Value::Tensor(t) if t.shape() == [rows, self.dimension] => {
                let host = self.model.backend.download(&t)?;
                let values = host.to_f32_vec()?;
                if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                    return Err(Error::invalid(format!(
                        "the model computed a non-finite value ({}) in row {} of its hidden states",
                        values[i],
                        i / self.dimension
                    )));
                }
                Ok(values)
            }
            other => Err(Error::invalid(format!(
                "the script returned {} for {rows} tokens, expected hidden states [{rows}, {}]",
                describe(&other),
                self.dimension
            ))),
        }
    }
}

/// The arguments of an encoder script's `encode`/`score`: the inputs' ids
/// one after another, their token types (`types[i]` empty: all 0),
/// positions restarting at 0 per input, and the lengths.
fn encoder_args(inputs: &[Vec<u32>], types: &[&[u32]]) -> Result<Vec<(&'static str, Value)>> {
    let ids: Vec<i32> = inputs.iter().flatten().map(|&i| i as i32).collect();
    let n = ids.len();
    let token_types: Vec<i32> = inputs
        .iter()
        .zip(types)
        .flat_map(|(v, t)| (0..v.len()).map(move |j| t.get(j).map_or(0, |&x| x as i32)))
        .collect();
    let positions: Vec<i32> = inputs.iter().flat_map(|v| 0..v.len() as i32).collect();
    let lengths = inputs.iter().map(|v| Value::Int(v.len() as i64)).collect();
    Ok(vec![
        ("input_ids", Value::Tensor(Tensor::from_i32(ids, vec![n])?)),
        (
            "token_type_ids",
            Value::Tensor(Tensor::from_i32(token_types, vec![n])?),
        ),
        (
            "positions",
            Value::Tensor(Tensor::from_i32(positions, vec![n])?),
        ),
        ("lengths", Value::List(Rc::new(lengths))),
    ])
}

/// The arguments of a decoder script's `hidden_states`/`forward`/
/// `classify` for one input run alone: its ids, positions from 0 and a
/// fresh cache.
fn decoder_args(input: &[u32]) -> Result<Vec<(&'static str, Value)>> {
    let n = input.len();
    let ids: Vec<i32> = input.iter().map(|&i| i as i32).collect();
    let cache = Rc::new(RefCell::new(KvCache::new()));
    Ok(vec![
        ("input_ids", Value::Tensor(Tensor::from_i32(ids, vec![n])?)),
        (
            "positions",
            Value::Tensor(Tensor::from_i32((0..n as i32).collect(), vec![n])?),
        ),
        ("cache", Value::Cache(cache)),
    ])
}

fn describe(v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("a tensor of shape {:?}", t.shape()),
        other => format!("{other:?}").chars().take(80).collect(),
    }
}

/// Index ranges of `inputs` packed into groups of at most `budget` tokens
/// (an input longer than the budget alone); budget 0: one input a group.
fn batches(inputs: &[Vec<u32>], budget: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    let mut start = 0;
    let mut tokens = 0;
    for (i, v) in inputs.iter().enumerate() {
        if i > start && (budget == 0 || tokens + v.len() > budget) {
            out.push(start..i);
            start = i;
            tokens = 0;
        }
        tokens += v.len();
    }
    if start < inputs.len() {
        out.push(start..inputs.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::batches;

    #[test]
    fn batches_pack_by_token_budget() {
        let v = |n: usize| vec![0u32; n];
        let inputs = vec![v(3), v(4), v(5), v(10), v(1)];
        assert_eq!(batches(&inputs, 8), vec![0..2, 2..3, 3..4, 4..5]);
        assert_eq!(batches(&inputs, 100), vec![0..5]);
        assert_eq!(batches(&inputs, 0), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
        assert!(batches(&[], 8).is_empty());
    }
}
