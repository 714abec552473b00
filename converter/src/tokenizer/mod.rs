//! Text <-> token ids. `Tokenizer` wraps a Hugging Face `tokenizers`
//! tokenizer built either from a `tokenizer.json` (plus the
//! `tokenizer_config.json` / `generation_config.json` beside it, for the
//! special tokens) or from the vocabulary a GGUF file carries
//! (`gguf_vocab`). `StreamDecoder` (`stream`) turns generated ids into text
//! chunks without ever splitting a character.
//!
//! The goal is id-for-id parity with Python transformers: encode/decode here
//! must give what `AutoTokenizer.encode/decode` gives (tests/fixtures/tokenizer
//! holds the references).

mod gguf_vocab;
mod parse;
mod stream;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use crate::error::{ConvertError, Result};

pub use gguf_vocab::GgufVocab;
pub use stream::StreamDecoder;

/// Bytes of text `Tokenizer::encode` takes by default (16 MiB, about four
/// million tokens).
pub const DEFAULT_MAX_TEXT_BYTES: u64 = 16 << 20;

/// The text limit in force: `MLLM_MAX_TEXT_BYTES`, else the default.
pub fn max_text_bytes() -> Result<u64> {
    mllm_backends::env_limit::read_or("MLLM_MAX_TEXT_BYTES", DEFAULT_MAX_TEXT_BYTES)
        .map_err(ConvertError::Unsupported)
}

/// A tokenizer plus what a generation loop needs to know about its special
/// tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Where it came from, for error messages.
    origin: String,
    /// One past the largest id the tokenizer can produce or decode.
    vocab_size: usize,
    bos: Option<u32>,
    eos: Option<u32>,
    /// Every id that ends generation: `eos` first, then the ids of
    /// generation_config.json's `eos_token_id` (Qwen3 stops on both
    /// `<|im_end|>` and `<|endoftext|>`).
    eos_ids: Vec<u32>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    unk_token: Option<String>,
    pad_token: Option<String>,
}

impl Tokenizer {
    /// Loads `tokenizer.json`. When `tokenizer_config.json` sits beside it,
    /// its `bos_token`/`eos_token`/`unk_token`/`pad_token` name the special
    /// tokens, and an explicit `add_bos_token`/`add_eos_token` replaces the
    /// post-processor as transformers does (it rebuilds a TemplateProcessing
    /// from those flags). `generation_config.json`'s `eos_token_id` (an id or
    /// a list) adds stop ids.
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        if !path.is_file() {
            return Err(ConvertError::NotFound(format!(
                "{}: no such tokenizer file (expected a Hugging Face tokenizer.json)",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| ConvertError::io(path, e))?;
        let inner = parse::parse_str(&text, &path.display().to_string())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let config = read_json_if_present(&dir.join("tokenizer_config.json"))?;
        let generation = read_json_if_present(&dir.join("generation_config.json"))?;

        let token_field = |key: &str| -> Option<String> {
            // A special token is written as a string or as an AddedToken
            // object {"content": ..., ...}; null means "none".
            let v = config.as_ref()?.get(key)?;
            match v {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
                _ => None,
            }
        };
        let mut tok = Tokenizer::new(
            inner,
            path.display().to_string(),
            token_field("bos_token"),
            token_field("eos_token"),
            token_field("unk_token"),
            token_field("pad_token"),
        )?;

        if let Some(config) = &config {
            let add_bos = config.get("add_bos_token").and_then(Value::as_bool);
            let add_eos = config.get("add_eos_token").and_then(Value::as_bool);
            if add_bos.is_some() || add_eos.is_some() || tok.inner.get_post_processor().is_none() {
                tok.set_template_post_processor(
                    add_bos.unwrap_or(false),
                    add_eos.unwrap_or(false),
                )?;
            }
        }
        if let Some(ids) = generation.as_ref().and_then(|g| g.get("eos_token_id")) {
            let ids: Vec<u64> = match ids {
                Value::Array(a) => a.iter().filter_map(Value::as_u64).collect(),
                v => v.as_u64().into_iter().collect(),
            };
            for id in ids {
                let id = u32::try_from(id)
                    .ok()
                    .filter(|&i| (i as usize) < tok.vocab_size);
                if let Some(id) = id {
                    tok.add_eos_id(id);
                }
            }
        }
        Ok(tok)
    }

    /// Parses a tokenizer.json document held in memory (no config files).
    pub fn from_json_str(json: &str, origin: &str) -> Result<Tokenizer> {
        let inner = parse::parse_str(json, origin)?;
        Tokenizer::new(inner, origin.to_string(), None, None, None, None)
    }

    fn new(
        inner: tokenizers::Tokenizer,
        origin: String,
        bos_token: Option<String>,
        eos_token: Option<String>,
        unk_token: Option<String>,
        pad_token: Option<String>,
    ) -> Result<Tokenizer> {
        let mut inner = inner;
        // A tokenizer.json may carry padding and truncation (all-MiniLM's
        // pads every input to 128 tokens); transformers ignores both unless
        // a call asks for them, and so do we (`truncating` asks).
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| ConvertError::Corrupt(format!("{origin}: {e}")))?;
        let vocab = inner.get_vocab(true);
        let vocab_size = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
        let lookup = |t: &Option<String>, what: &str| -> Result<Option<u32>> {
            match t {
                None => Ok(None),
                Some(t) => inner.token_to_id(t).map(Some).ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{origin}: the {what} token {t:?} is not in the vocabulary"
                    ))
                }),
            }
        };
        let bos = lookup(&bos_token, "bos")?;
        let eos = lookup(&eos_token, "eos")?;
        Ok(Tokenizer {
            inner,
            origin,
            vocab_size,
            bos,
            eos,
            eos_ids: eos.into_iter().collect(),
            bos_token,
            eos_token,
            unk_token,
            pad_token,
        })
    }

    /// A copy whose encodings are cut to `max_length` ids, the special
    /// tokens kept (transformers' `truncation=True, max_length=...`).
    pub fn truncating(&self, max_length: usize) -> Result<Tokenizer> {
        let mut inner = self.inner.clone();
        inner
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| ConvertError::Unsupported(format!("{}: {e}", self.origin)))?;
        Ok(Tokenizer {
            inner,
            origin: self.origin.clone(),
            vocab_size: self.vocab_size,
            bos: self.bos,
            eos: self.eos,
            eos_ids: self.eos_ids.clone(),
            bos_token: self.bos_token.clone(),
            eos_token: self.eos_token.clone(),
            unk_token: self.unk_token.clone(),
            pad_token: self.pad_token.clone(),
        })
    }

    /// What transformers' `update_post_processor` installs: `bos $A eos`
    /// with each end present only when its flag is set and its token known.
    fn set_template_post_processor(&mut self, add_bos: bool, add_eos: bool) -> Result<()> {
        let pp = template_processing(
            self.bos_token.as_deref().zip(self.bos).filter(|_| add_bos),
            self.eos_token.as_deref().zip(self.eos).filter(|_| add_eos),
        );
        let pp: tokenizers::PostProcessorWrapper = serde_json::from_value(pp).map_err(|e| {
            ConvertError::Corrupt(format!(
                "{}: cannot build the post-processor: {e}",
                self.origin
            ))
        })?;
        self.inner.with_post_processor(Some(pp));
        Ok(())
    }

    /// Token ids of `text`. `add_special_tokens` runs the post-processor
    /// (e.g. a BOS for Llama-style tokenizers); special tokens written in
    /// the text (`<|im_start|>`) are matched either way, as in transformers.
    /// Texts over `max_text_bytes()` are refused: encoding is linear (about
    /// 1 s per MB of the worst inputs measured), but no context holds more.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let max = max_text_bytes()?;
        if text.len() as u64 > max {
            return Err(ConvertError::Unsupported(format!(
                "{}: a text of {} bytes is over the limit of {max} bytes (millions of tokens, more \
                 than any model's context); MLLM_MAX_TEXT_BYTES raises the limit",
                self.origin,
                text.len()
            )));
        }
        let enc = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| ConvertError::Corrupt(format!("{}: cannot encode: {e}", self.origin)))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids and token types (0 for `a`, 1 for `b`) of a text pair, as a
    /// cross-encoder reads it (`[CLS] a [SEP] b [SEP]` for BERT): the
    /// post-processor's pair template, special tokens always added.
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let max = max_text_bytes()?;
        if (a.len() + b.len()) as u64 > max {
            return Err(ConvertError::Unsupported(format!(
                "{}: a text pair of {} bytes is over the limit of {max} bytes; MLLM_MAX_TEXT_BYTES raises the limit",
                self.origin,
                a.len() + b.len()
            )));
        }
        let enc = self
            .inner
            .encode_fast((a, b), true)
            .map_err(|e| ConvertError::Corrupt(format!("{}: cannot encode: {e}", self.origin)))?;
        Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec()))
    }

    /// Text of `ids`. Unlike the `tokenizers` crate, which silently drops
    /// ids it does not know, an out-of-range id is an error: it means the
    /// model and the tokenizer disagree.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(ConvertError::Corrupt(format!(
                "{}: token id {bad} is out of range (vocabulary size {})",
                self.origin, self.vocab_size
            )));
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| ConvertError::Corrupt(format!("{}: cannot decode: {e}", self.origin)))
    }

    /// A decoder for a stream of generated ids.
    pub fn stream_decoder(&self, skip_special_tokens: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special_tokens)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token's string as stored in the vocabulary (byte-level tokens
    /// come back in their `Ġ`-alphabet spelling, SentencePiece ones with `▁`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// One past the largest id: every id below it can be decoded.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The ids that end generation (eos first).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Adds a stop id (e.g. from a model's generation config).
    pub fn add_eos_id(&mut self, id: u32) {
        if !self.eos_ids.contains(&id) {
            self.eos_ids.push(id);
        }
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    pub fn unk_token(&self) -> Option<&str> {
        self.unk_token.as_deref()
    }

    pub fn pad_token(&self) -> Option<&str> {
        self.pad_token.as_deref()
    }

    /// Whether `id` is a special added token (skipped by
    /// `decode(.., skip_special_tokens: true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_vocabulary()
            .simple_id_to_token(id)
            .is_some_and(|t| self.inner.get_added_vocabulary().is_special_token(&t))
    }

    /// Ids of all special added tokens, ascending.
    pub fn special_ids(&self) -> BTreeSet<u32> {
        let added = self.inner.get_added_vocabulary();
        added
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, _)| id)
            .collect()
    }

    /// The underlying `tokenizers` tokenizer, for what this type does not wrap.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

fn read_json_if_present(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError::io(path, e))?;
    let v = serde_json::from_str(&text)
        .map_err(|e| ConvertError::Corrupt(format!("{}: not valid JSON: {e}", path.display())))?;
    Ok(Some(v))
}

/// A `TemplateProcessing` post-processor in tokenizer.json form, as
/// transformers writes it: `[bos:0] $A:0 [eos:0]`, pairs `... [bos:1] $B:1 [eos:1]`.
fn template_processing(bos: Option<(&str, u32)>, eos: Option<(&str, u32)>) -> Value {
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let seq = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let mut single = Vec::new();
    let mut pair = Vec::new();
    let mut tokens = serde_json::Map::new();
    for (seq_id, type_id) in [("A", 0), ("B", 1)] {
        let out = if seq_id == "A" {
            &mut single
        } else {
            &mut pair
        };
        if let Some((t, _)) = bos {
            out.push(special(t, type_id));
        }
        out.push(seq(seq_id, type_id));
        if let Some((t, _)) = eos {
            out.push(special(t, type_id));
        }
    }
    let pair = [single.clone(), pair].concat();
    for (t, id) in bos.into_iter().chain(eos) {
        tokens.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": tokens})
}
