//! tokenizer.json documents into `tokenizers::Tokenizer`, refusing bad
//! input with an error where the `tokenizers` crate (0.23) would panic.
//! Found by fuzzing (tests/fuzz, target `tokenizer_json`): a JSON syntax
//! error inside the `decoder` and a `Precompiled` normalizer whose fields do
//! not parse both reach an `expect` in its deserializers. So the text is
//! checked for JSON syntax first (syntax errors become ours), `Precompiled`
//! nodes are checked on their own, and any other panic of the crate while
//! building the tokenizer is caught and reported as a damaged file.
//!
//! Some damage only panics later, when text is encoded: the crate builds a
//! `TemplateProcessing` post-processor from JSON without the checks its
//! builder makes, so a template naming a special token its `special_tokens`
//! lacks (or using `$B` in `single`, or following another template in a
//! `Sequence`) loads, then panics in `encode`. The built post-processor is
//! therefore checked here too (`check_post_processor`).

use std::panic::UnwindSafe;

use serde::de::IgnoredAny;
use serde_json::Value;
use tokenizers::normalizers::precompiled::Precompiled;
use tokenizers::processors::template::{Piece, Sequence, TemplateProcessing};
use tokenizers::PostProcessorWrapper;

use crate::error::{ConvertError, Result};

/// Parses tokenizer.json text; `origin` names it in errors.
pub(super) fn parse_str(json: &str, origin: &str) -> Result<tokenizers::Tokenizer> {
    let context = format!("{origin}: cannot load tokenizer");
    // A syntax pass without building anything (a few percent of the load);
    // parsing straight from the text stays the crate's fast path.
    serde_json::from_str::<IgnoredAny>(json)
        .map_err(|e| ConvertError::Corrupt(format!("{context}: not valid JSON: {e}")))?;
    if json.contains("\"Precompiled\"") {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| ConvertError::Corrupt(format!("{context}: not valid JSON: {e}")))?;
        check_precompiled(&value, &context)?;
    }
    let tok = guarded(&context, || {
        json.parse::<tokenizers::Tokenizer>()
            .map_err(|e| e.to_string())
    })?;
    check_post_processor(&tok, &context)?;
    Ok(tok)
}

/// Builds a tokenizer from a parsed tokenizer.json document; errors start
/// with `context` ("x.json: cannot load tokenizer").
pub(super) fn parse_value(value: Value, context: &str) -> Result<tokenizers::Tokenizer> {
    check_precompiled(&value, context)?;
    let tok = guarded(context, move || {
        serde_json::from_value::<tokenizers::Tokenizer>(value).map_err(|e| e.to_string())
    })?;
    check_post_processor(&tok, context)?;
    Ok(tok)
}

/// Runs `build`, turning its error or a panic inside the tokenizers crate
/// into an error that starts with `context`.
fn guarded(
    context: &str,
    build: impl FnOnce() -> std::result::Result<tokenizers::Tokenizer, String> + UnwindSafe,
) -> Result<tokenizers::Tokenizer> {
    match std::panic::catch_unwind(build) {
        Ok(Ok(tok)) => Ok(tok),
        Ok(Err(e)) => Err(ConvertError::Corrupt(format!("{context}: {e}"))),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(ConvertError::Corrupt(format!(
                "{context}: the tokenizers library failed on it ({why}); \
                 the file is damaged or not a Hugging Face tokenizer.json"
            )))
        }
    }
}

/// Every object tagged `"type": "Precompiled"`, at any depth, must
/// deserialize as one.
fn check_precompiled(v: &Value, context: &str) -> Result<()> {
    // An explicit stack: nesting depth is the document's, not ours to recurse.
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("Precompiled") {
                    serde_json::from_value::<Precompiled>(v.clone()).map_err(|e| {
                        ConvertError::Corrupt(format!(
                            "{context}: a Precompiled normalizer is invalid: {e}"
                        ))
                    })?;
                }
                stack.extend(o.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a post-processor that would panic when `Tokenizer::encode` runs
/// it (one text, with or without special tokens). Found by fuzzing
/// (`tokenizer_json`): the crate deserializes `TemplateProcessing` without
/// its builder's checks, and `apply_template` then indexes its special
/// tokens by name (`no entry found for key`), takes `$B` from a one-element
/// list, and stops at a `todo!()` when a template gets other than one or two
/// encodings (a `Sequence` holding a template after a template).
fn check_post_processor(tok: &tokenizers::Tokenizer, context: &str) -> Result<()> {
    let Some(pp) = tok.get_post_processor() else {
        return Ok(());
    };
    for add_special_tokens in [false, true] {
        encodings_after(pp, 1, add_special_tokens).map_err(|why| {
            ConvertError::Corrupt(format!("{context}: the post_processor is invalid: {why}"))
        })?;
    }
    Ok(())
}

/// How many encodings `pp` hands on when given `n` (as its
/// `process_encodings` would), or why it would panic on them.
fn encodings_after(
    pp: &PostProcessorWrapper,
    n: usize,
    add_special_tokens: bool,
) -> std::result::Result<usize, String> {
    match pp {
        PostProcessorWrapper::Template(t) => template_encodings(t, n, add_special_tokens),
        PostProcessorWrapper::Sequence(seq) => seq
            .as_ref()
            .iter()
            .try_fold(n, |n, pp| encodings_after(pp, n, add_special_tokens)),
        // Bert, Roberta and ByteLevel turn each encoding into one.
        PostProcessorWrapper::Bert(_)
        | PostProcessorWrapper::Roberta(_)
        | PostProcessorWrapper::ByteLevel(_) => Ok(n),
    }
}

/// `encodings_after` for a `TemplateProcessing`: it emits one encoding per
/// piece of its template (special tokens only with `add_special_tokens`).
fn template_encodings(
    t: &TemplateProcessing,
    n: usize,
    add_special_tokens: bool,
) -> std::result::Result<usize, String> {
    let special = &t.get_special_tokens().0;
    // The builder's check: every special token a template names is defined.
    let single = pieces(&t.single)?;
    let pair = pieces(t.get_pair())?;
    for piece in single.iter().chain(&pair) {
        if let Piece::SpecialToken { id, .. } = piece {
            if !special.contains_key(id) {
                return Err(format!(
                    "a template uses the special token {id:?}, which its special_tokens lacks"
                ));
            }
        }
    }
    let template = match n {
        1 => &single,
        2 => &pair,
        _ => {
            return Err(format!(
                "a TemplateProcessing would get {n} encodings (it takes one or two): \
                 it follows another template in a Sequence"
            ))
        }
    };
    let mut out = 0;
    for piece in template {
        match piece {
            Piece::Sequence {
                id: Sequence::B, ..
            } if n < 2 => {
                return Err("its single template uses $B, the second text of a pair".into())
            }
            Piece::Sequence { .. } => out += 1,
            Piece::SpecialToken { .. } => out += usize::from(add_special_tokens),
        }
    }
    Ok(out)
}

/// The pieces of a template (the crate keeps them private; its serialized
/// form is the list).
fn pieces(
    template: &tokenizers::processors::template::Template,
) -> std::result::Result<Vec<Piece>, String> {
    serde_json::to_value(template)
        .and_then(serde_json::from_value)
        .map_err(|e| e.to_string())
}
