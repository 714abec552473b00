//! The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata,
//! rebuilt as a Hugging Face tokenizer.
//!
//! This mirrors what transformers builds for `AutoTokenizer.from_pretrained(
//! dir, gguf_file=...)` (transformers/integrations/gguf), so both give the
//! same ids, with one deliberate difference: for the `pre` types llama.cpp
//! splits digits one by one before the GPT-2 regex (SmolLM's "smollm",
//! StarCoder's, ...), we do the same, as those models' own tokenizer.json
//! does; transformers falls back to the GPT-2 regex alone, which tokenizes a
//! space before a non-ASCII numeral (" ²") differently from the model.
//!
//! - `gpt2`: byte-level BPE with the file's merges. Tokens outside the
//!   byte-level alphabet are respelled in it. The pre-tokenizer regex comes
//!   from `pre`.
//! - `llama`: SentencePiece-style BPE with byte fallback and `▁` for spaces;
//!   without merges in the file they are derived from the scores.
//!
//! Control tokens (type 3) and bos/eos/unk/pad become special added tokens,
//! user-defined ones (type 4, e.g. `<think>`) plain added tokens, so text
//! containing them is matched whole.

mod wordpiece;

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::{template_processing, Tokenizer};
use crate::error::{ConvertError, Result};
use crate::gguf::{GgufFile, MetaValue};

/// The `tokenizer.ggml.*` metadata of a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: which pre-tokenizer regex ("smollm", "qwen2", "llama-bpe", ...).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub token_types: Vec<i32>,
    pub scores: Vec<f32>,
    /// "left right" pairs, best first; may be empty for "llama".
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id` and `padding_token_id`: transformers
    /// makes these special tokens too (decode skips them).
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
}

const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

// Split regexes by `tokenizer.ggml.pre`, as transformers' GGUF tokenizer
// mapping has them (each is what that model family's tokenizer.json uses).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn split_regex(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "qwen35" => QWEN35_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

/// The `pre` types llama.cpp tokenizes with `\p{N}` first, then the GPT-2
/// regex: one digit per pre-token.
fn splits_digits(pre: &str) -> bool {
    matches!(
        pre,
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva"
    )
}

fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn gpt2_pre_tokenizer(pre: Option<&str>) -> Value {
    let pre = pre.unwrap_or("default");
    if let Some(regex) = split_regex(pre) {
        let split = json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false});
        return json!({"type": "Sequence", "pretokenizers": [split, byte_level(false)]});
    }
    if splits_digits(pre) {
        let digits = json!({"type": "Digits", "individual_digits": true});
        return json!({"type": "Sequence", "pretokenizers": [digits, byte_level(true)]});
    }
    // GPT-2's own regex, inside ByteLevel: what transformers' GPT2Tokenizer uses.
    byte_level(true)
}

/// GPT-2's byte <-> printable-char table: printable Latin-1 bytes stand for
/// themselves, the rest map to U+0100 onwards in byte order.
fn bytes_to_chars() -> [char; 256] {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        table[b as usize] = if printable(b) {
            char::from_u32(b).expect("Latin-1")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below U+0200")
        };
    }
    table
}

impl GgufVocab {
    /// Reads `tokenizer.ggml.*` from a GGUF file. Needs at least the model
    /// type and the tokens; every present key must have the type llama.cpp
    /// writes.
    pub fn from_gguf(g: &GgufFile) -> Result<GgufVocab> {
        let origin = g.path().display().to_string();
        let bad = |key: &str, want: &str| {
            ConvertError::Corrupt(format!("{origin}: GGUF metadata {key} is not {want}"))
        };
        let array = |key: &str| -> Result<Option<&[MetaValue]>> {
            match g.meta(key) {
                None => Ok(None),
                Some(v) => v.as_array().map(Some).ok_or_else(|| bad(key, "an array")),
            }
        };
        let strings = |key: &str| -> Result<Vec<String>> {
            array(key)?
                .unwrap_or_default()
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(key, "an array of strings"))
                })
                .collect()
        };
        let id = |key: &str| -> Result<Option<u32>> {
            g.meta(key)
                .map(|v| {
                    v.as_u64()
                        .and_then(|v| u32::try_from(v).ok())
                        .ok_or_else(|| bad(key, "a token id"))
                })
                .transpose()
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            g.meta(key)
                .map(|v| v.as_bool().ok_or_else(|| bad(key, "a bool")))
                .transpose()
        };
        let model = match g.meta("tokenizer.ggml.model") {
            Some(v) => v
                .as_str()
                .ok_or_else(|| bad("tokenizer.ggml.model", "a string"))?
                .to_string(),
            None => {
                return Err(ConvertError::NotFound(format!(
                    "{origin}: no tokenizer in this GGUF (tokenizer.ggml.model is missing)"
                )))
            }
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        if tokens.is_empty() {
            return Err(ConvertError::NotFound(format!(
                "{origin}: no tokenizer in this GGUF (tokenizer.ggml.tokens is missing or empty)"
            )));
        }
        let token_types = array("tokenizer.ggml.token_type")?
            .unwrap_or_default()
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| bad("tokenizer.ggml.token_type", "an array of integers"))
            })
            .collect::<Result<_>>()?;
        let scores = array("tokenizer.ggml.scores")?
            .unwrap_or_default()
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|v| v as f32)
                    .ok_or_else(|| bad("tokenizer.ggml.scores", "an array of numbers"))
            })
            .collect::<Result<_>>()?;
        let pre = match g.meta("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| bad("tokenizer.ggml.pre", "a string"))?
                    .to_string(),
            ),
        };
        let v = GgufVocab {
            model,
            pre,
            tokens,
            token_types,
            scores,
            merges: strings("tokenizer.ggml.merges")?,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
        };
        v.check().map_err(|e| match e {
            ConvertError::Corrupt(m) => ConvertError::Corrupt(format!("{origin}: {m}")),
            e => e,
        })?;
        Ok(v)
    }

    fn check(&self) -> Result<()> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(ConvertError::Corrupt(
                "GGUF tokenizer: tokenizer.ggml.tokens is empty".into(),
            ));
        }
        if !self.token_types.is_empty() && self.token_types.len() != n {
            return Err(ConvertError::Corrupt(format!(
                "GGUF tokenizer: {} token types for {n} tokens",
                self.token_types.len()
            )));
        }
        if !self.scores.is_empty() && self.scores.len() != n {
            return Err(ConvertError::Corrupt(format!(
                "GGUF tokenizer: {} scores for {n} tokens",
                self.scores.len()
            )));
        }
        for (what, id) in [
            ("bos", self.bos),
            ("eos", self.eos),
            ("unk", self.unk),
            ("pad", self.pad),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(ConvertError::Corrupt(format!(
                    "GGUF tokenizer: {what} token id {id} is out of range ({n} tokens)"
                )));
            }
        }
        Ok(())
    }

    /// Whether every token but the control, user-defined and unused ones
    /// (llama.cpp's converter pads a vocabulary to the embedding's rows with
    /// unused `[PADn]`) is one character of the byte-level alphabet (a byte).
    fn bytes_only(&self) -> bool {
        let alphabet: std::collections::HashSet<char> = bytes_to_chars().into_iter().collect();
        self.tokens.iter().enumerate().all(|(i, t)| {
            matches!(self.token_type(i), CONTROL | USER_DEFINED | UNUSED) || {
                let mut chars = t.chars();
                matches!((chars.next(), chars.next()), (Some(c), None) if alphabet.contains(&c))
            }
        })
    }

    fn token_type(&self, i: usize) -> i32 {
        self.token_types.get(i).copied().unwrap_or(1)
    }

    fn name(&self, id: Option<u32>) -> Option<String> {
        id.map(|id| self.tokens[id as usize].clone())
    }

    /// The tokenizer.json document transformers would build.
    pub fn to_tokenizer_json(&self) -> Result<Value> {
        self.check()?;
        let byte_level = match self.model.as_str() {
            "gpt2" => true,
            "llama" => false,
            "bert" => return self.wordpiece_tokenizer_json(),
            other => {
                return Err(ConvertError::Unsupported(format!(
                    "GGUF tokenizer model {other:?}: mllm reads \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE) and \"bert\" (WordPiece)"
                )))
            }
        };

        // Token -> id; a repeated token keeps its last id, as a Python dict does.
        let spelled: Vec<String> = if byte_level {
            let table = bytes_to_chars();
            let alphabet: std::collections::HashSet<char> = table.iter().copied().collect();
            self.tokens
                .iter()
                .map(|t| {
                    if t.chars().all(|c| alphabet.contains(&c)) {
                        t.clone()
                    } else {
                        t.bytes().map(|b| table[b as usize]).collect()
                    }
                })
                .collect()
        } else {
            self.tokens.clone()
        };
        let mut vocab = Map::new();
        for (i, t) in spelled.iter().enumerate() {
            vocab.insert(t.clone(), json!(i));
        }

        let merges: Vec<Value> = if self.merges.is_empty() {
            // Without merges a byte-level BPE splits text into single bytes:
            // right for a vocabulary of bytes (and special tokens), a corrupt
            // file for any other (its longer tokens could never be made).
            if byte_level && !self.bytes_only() {
                return Err(ConvertError::Corrupt(
                    "GGUF tokenizer: a \"gpt2\" vocabulary needs tokenizer.ggml.merges".into(),
                ));
            }
            if byte_level {
                Vec::new()
            } else {
                derive_merges(&self.tokens, &self.scores)
                    .into_iter()
                    .map(|(l, r)| json!([l, r]))
                    .collect()
            }
        } else {
            self.merges
                .iter()
                .map(|m| {
                    let (l, r) = m.split_once(' ').ok_or_else(|| {
                        ConvertError::Corrupt(format!("GGUF tokenizer: merge {m:?} has no space"))
                    })?;
                    Ok(json!([l, r]))
                })
                .collect::<Result<_>>()?
        };

        let added = self.added_tokens(&vocab, byte_level);
        let bos = self
            .name(self.bos)
            .filter(|_| self.add_bos.unwrap_or(!byte_level));
        let eos = self
            .name(self.eos)
            .filter(|_| self.add_eos.unwrap_or(false));
        let post = template_processing(bos.as_deref().zip(self.bos), eos.as_deref().zip(self.eos));

        let (model, pre_tokenizer, decoder) = if byte_level {
            (
                json!({"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                       "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                       "ignore_merges": false, "vocab": vocab, "merges": merges}),
                gpt2_pre_tokenizer(self.pre.as_deref()),
                json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
            )
        } else {
            // transformers' LlamaTokenizer: Metaspace prepending "▁" to the
            // first word only (legacy=False), and a decoder that undoes it.
            (
                json!({"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                       "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
                       "ignore_merges": false, "vocab": vocab, "merges": merges}),
                json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}),
                json!({"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                    {"type": "ByteFallback"},
                    {"type": "Fuse"},
                    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}),
            )
        };
        Ok(json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": post,
            "decoder": decoder,
            "model": model,
        }))
    }

    /// Special tokens (control, and bos/eos/unk/pad) and user-defined ones.
    fn added_tokens(&self, vocab: &Map<String, Value>, byte_level: bool) -> Vec<Value> {
        let alphabet: std::collections::HashSet<char> = bytes_to_chars().into_iter().collect();
        let mut out: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // The id is the vocabulary's, as when transformers adds a token that
        // already exists; bos/eos/unk/pad fall back to the file's id.
        let mut add = |content: &str, special: bool, file_id: Option<u32>| {
            let id = vocab
                .get(content)
                .and_then(Value::as_u64)
                .or(file_id.map(u64::from));
            if let Some(id) = id {
                if seen.insert(content.to_string()) {
                    out.push(
                        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                                    "rstrip": false, "normalized": false, "special": special}),
                    );
                }
            }
        };
        for (i, t) in self.tokens.iter().enumerate() {
            // A control token spelled outside the byte alphabet is a llama.cpp
            // mislabel in a byte-level vocabulary; transformers skips it.
            if self.token_type(i) == CONTROL
                && (!byte_level || t.chars().all(|c| alphabet.contains(&c)))
            {
                add(t, true, None);
            }
        }
        for id in [self.bos, self.eos, self.unk, self.pad]
            .into_iter()
            .flatten()
        {
            add(&self.tokens[id as usize], true, Some(id));
        }
        for (i, t) in self.tokens.iter().enumerate() {
            if self.token_type(i) == USER_DEFINED {
                add(t, false, None);
            }
        }
        out
    }
}

/// Merges implied by a SentencePiece vocabulary, as transformers'
/// `generate_merges` derives them: every split of a token into two
/// vocabulary tokens is a merge ranked by the whole token's score (higher
/// first), ties broken by the longer left then the longer right part, and
/// then by file order.
fn derive_merges(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        index.insert(t.as_str(), i);
    }
    // Distinct tokens in first-seen order, each with its last score (a
    // Python dict built from (token, score) pairs).
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    let mut score_of: HashMap<&str, f32> = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        let s = scores.get(i).copied().unwrap_or(0.0);
        if score_of.insert(t.as_str(), s).is_none() {
            order.push(t.as_str());
        }
    }
    struct Merge<'a> {
        left: &'a str,
        right: &'a str,
        score: f32,
        left_chars: usize,
        right_chars: usize,
    }
    let mut merges: Vec<Merge> = Vec::new();
    for t in order {
        let score = score_of[t];
        let mut local: Vec<Merge> = t
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = t.split_at(at);
                (index.contains_key(l) && index.contains_key(r)).then(|| Merge {
                    left: l,
                    right: r,
                    score,
                    left_chars: l.chars().count(),
                    right_chars: r.chars().count(),
                })
            })
            .collect();
        local.sort_by_key(|m| (index[m.left], index[m.right]));
        merges.extend(local);
    }
    // Stable and descending, like Python's sort(reverse=True).
    merges.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
    });
    merges
        .into_iter()
        .map(|m| (m.left.to_string(), m.right.to_string()))
        .collect()
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Tokenizer> {
        let doc = v.to_tokenizer_json()?;
        let context = format!("GGUF tokenizer ({} vocabulary): cannot build it", v.model);
        let inner = super::parse::parse_value(doc, &context)?;
        let mut tok = Tokenizer::new(
            inner,
            format!("GGUF tokenizer ({})", v.model),
            v.name(v.bos),
            v.name(v.eos),
            v.name(v.unk),
            v.name(v.pad),
        )?;
        // The token names come from the file, so look-ups by name could hit
        // a duplicate; the file's ids are the truth.
        tok.bos = v.bos;
        tok.eos = v.eos;
        tok.eos_ids = v.eos.into_iter().collect();
        Ok(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let t = bytes_to_chars();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], '\u{120}'); // Ġ
        assert_eq!(t[b'\n' as usize], '\u{10A}'); // Ċ
        assert_eq!(t[0], '\u{100}');
        let distinct: std::collections::HashSet<char> = t.into_iter().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn merges_follow_scores_then_lengths() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "abc", "bc"]
            .map(String::from)
            .to_vec();
        let scores = [0.0, 0.0, 0.0, -1.0, -3.0, -2.0];
        let m = derive_merges(&tokens, &scores);
        let m: Vec<(&str, &str)> = m.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        assert_eq!(m, [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]);
    }
}

#[cfg(test)]
mod byte_vocab_tests {
    use super::*;

    /// A "gpt2" vocabulary of the 256 bytes and an end-of-text control token,
    /// as a byte-level tokenizer trained with no merges has.
    fn bytes_vocab(extra: Option<&str>) -> GgufVocab {
        let mut tokens: Vec<String> = bytes_to_chars().into_iter().map(String::from).collect();
        tokens.extend(extra.map(String::from));
        tokens.push("<|endoftext|>".into());
        let mut token_types = vec![1; tokens.len()];
        *token_types.last_mut().unwrap() = CONTROL;
        GgufVocab {
            model: "gpt2".into(),
            pre: Some("default".into()),
            eos: Some(tokens.len() as u32 - 1),
            tokens,
            token_types,
            ..GgufVocab::default()
        }
    }

    #[test]
    fn a_vocabulary_of_bytes_needs_no_merges() {
        let tok = Tokenizer::from_gguf_vocab(&bytes_vocab(None)).unwrap();
        let text = "def f(x):\n    return x  # é";
        let ids = tok.encode(text, false).unwrap();
        // Token i is byte i's character, so the ids are the bytes.
        let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(ids, bytes);
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
        assert_eq!(tok.encode("<|endoftext|>", false).unwrap(), [256]);
    }

    #[test]
    fn longer_tokens_without_merges_are_refused() {
        let Err(err) = Tokenizer::from_gguf_vocab(&bytes_vocab(Some("ab"))) else {
            panic!("a vocabulary with \"ab\" and no merges was taken");
        };
        assert!(
            err.to_string().contains("needs tokenizer.ggml.merges"),
            "{err}"
        );
    }
}
