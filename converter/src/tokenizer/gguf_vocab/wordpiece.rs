//! llama.cpp's `bert` vocabulary (WordPiece, what BERT-family encoders
//! use) back into the tokenizer.json transformers' `BertTokenizerFast`
//! builds. llama.cpp's converter rewrites the vocabulary into "phantom
//! space" form: a word-initial piece gains a leading `▁`, a continuation
//! piece (`##ing`) loses its `##`, control tokens (`[CLS]`) stay. Undoing
//! that gives the original vocabulary, ids unchanged. Text is normalised as
//! BERT's uncased models do (clean, CJK spaced, lowercased, accents
//! stripped), which is also what llama.cpp's WPM tokenizer does.

use serde_json::{json, Map, Value};

use super::{GgufVocab, CONTROL};
use crate::error::{ConvertError, Result};

impl GgufVocab {
    /// The tokenizer.json of a `bert` vocabulary.
    pub(super) fn wordpiece_tokenizer_json(&self) -> Result<Value> {
        let mut vocab = Map::new();
        for (i, t) in self.tokens.iter().enumerate() {
            let original = if self.token_type(i) == CONTROL {
                t.clone()
            } else if let Some(word) = t.strip_prefix('\u{2581}') {
                word.to_string()
            } else {
                format!("##{t}")
            };
            vocab.insert(original, json!(i));
        }
        let id = |name: &str| -> Result<u64> {
            vocab.get(name).and_then(Value::as_u64).ok_or_else(|| {
                ConvertError::Corrupt(format!(
                    "GGUF tokenizer: a \"bert\" vocabulary without the {name} token"
                ))
            })
        };
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        let unk = self.name(self.unk).unwrap_or_else(|| "[UNK]".into());
        let added: Vec<Value> = self
            .tokens
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.token_type(i) == CONTROL)
            .map(|(i, t)| {
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        Ok(json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                           "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                "special_tokens": {
                    "[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                    "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]},
                },
            },
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
            "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab},
        }))
    }
}
