//! tokenizer.json documents into `tokenizers::Tokenizer`, refusing bad
//! input with an error where the `tokenizers` crate (0.23) would panic.
//! Found by fuzzing (tests/fuzz, target `tokenizer_json`): a JSON syntax
//! error inside the `decoder` and a `Precompiled` normalizer whose fields do
//! not parse both reach an `expect` in its deserializers. So the text is
//! checked for JSON syntax first (syntax errors become ours), `Precompiled`
//! nodes are checked on their own, and any other panic of the crate while
//! building the tokenizer is caught and reported as a damaged file.

use std::panic::UnwindSafe;

use serde::de::IgnoredAny;
use serde_json::Value;
use tokenizers::normalizers::precompiled::Precompiled;

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
    guarded(&context, || {
        json.parse::<tokenizers::Tokenizer>()
            .map_err(|e| e.to_string())
    })
}

/// Builds a tokenizer from a parsed tokenizer.json document; errors start
/// with `context` ("x.json: cannot load tokenizer").
pub(super) fn parse_value(value: Value, context: &str) -> Result<tokenizers::Tokenizer> {
    check_precompiled(&value, context)?;
    guarded(context, move || {
        serde_json::from_value::<tokenizers::Tokenizer>(value).map_err(|e| e.to_string())
    })
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
