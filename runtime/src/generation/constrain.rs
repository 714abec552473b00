//! Constrained decoding: answers that follow a JSON schema, a grammar or a
//! regex, whatever the weights. llguidance (the engine llama.cpp and vLLM
//! use) keeps a parser over the bytes generated so far and, from a byte
//! trie of the vocabulary, says which tokens may come next; `Constraint` is
//! the logits processor that masks the others. One `Grammars` per model
//! holds the trie (built once: about a second for a 150k vocabulary);
//! each answer gets its own `Constraint`.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use mllm_converter::tokenizer::Tokenizer;

pub use super::mask_ahead::Constraint;

/// What an answer must follow.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON object (OpenAI's `{"type": "json_object"}`, `--json`).
    JsonObject,
    /// A JSON Schema (draft 2020-12 and earlier, as llguidance takes it).
    JsonSchema(serde_json::Value),
    /// A Lark grammar (llguidance's dialect: `start: ...`, `/regex/`
    /// terminals, `%json { schema }`).
    Lark(String),
    /// A llama.cpp GBNF grammar (`root ::= ...`), translated to Lark.
    Gbnf(String),
    Regex(String),
}

/// A constraint that cannot be compiled: the message names the construct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstraintError(pub String);

impl std::fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConstraintError {}

/// The vocabulary as llguidance sees it: each token's bytes in a trie, and
/// our tokenizer for the text it needs tokenized.
struct Vocabulary {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Only ever handed text the grammar fixes; invalid UTF-8 cannot be
        // tokenized as text, so it is approximated.
        self.tok
            .encode(&String::from_utf8_lossy(s), false)
            .unwrap_or_default()
    }
}

/// A model's vocabulary, ready to compile constraints against.
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// Builds the token trie of `tok`; `eos` are the ids that may end an
    /// answer once the constraint is satisfied.
    pub fn new(tok: Arc<Tokenizer>, eos: &[u32]) -> Result<Grammars, ConstraintError> {
        let json = tok
            .inner()
            .to_string(false)
            .map_err(|e| ConstraintError(format!("cannot read the tokenizer's vocabulary: {e}")))?;
        let json: serde_json::Value = serde_json::from_str(&json)
            .map_err(|e| ConstraintError(format!("cannot read the tokenizer's vocabulary: {e}")))?;
        let mut words = llguidance::token_bytes_from_tokenizer_json(&json).map_err(|e| {
            ConstraintError(format!(
                "constrained decoding does not know this tokenizer: {e}"
            ))
        })?;
        let n = words.len().max(tok.vocab_size());
        words.resize(n, vec![]);
        let first_eos = eos.first().copied().unwrap_or(n as u32);
        let info = TokRxInfo::new(n as u32, first_eos.min(n as u32 - 1));
        let mut trie = TokTrie::from(&info, &words);
        let eos: Vec<u32> = eos.iter().copied().filter(|&e| (e as usize) < n).collect();
        if !eos.is_empty() {
            trie = trie.with_eos_tokens(&eos);
        }
        let env: TokEnv = Arc::new(Vocabulary { trie, tok });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| ConstraintError(format!("cannot prepare constrained decoding: {e}")))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// Compiles `spec` into the processor for one answer.
    pub fn constraint(&self, spec: &ConstraintSpec) -> Result<Constraint, ConstraintError> {
        let grammar = match spec {
            ConstraintSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(bounded(serde_json::json!({"type": "object"})))
            }
            ConstraintSpec::JsonSchema(v) => TopLevelGrammar::from_json_schema(bounded(v.clone())),
            ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(gbnf_to_lark(g)?),
            ConstraintSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ConstraintError(format!("{}: {e}", spec.kind())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError(format!("{}: {e}", spec.kind())));
        }
        Constraint::start(matcher)
    }
}

/// A JSON schema with bounds on what a small model could otherwise run
/// away with until its token limit cuts the answer (which then does not
/// parse), as llama.cpp's schema grammars bound them; a schema's own
/// bounds and `x-guidance` options win.
fn bounded(mut schema: serde_json::Value) -> serde_json::Value {
    bound_integers(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }));
    }
    schema
}

/// Between two JSON tokens, one space, or one or two newlines and at most
/// 20 spaces or tabs of indent (llama.cpp's `space` rule). Looser
/// whitespace let SmolLM2 fill 64 tokens with newlines before its second
/// key.
const JSON_WHITESPACE: &str = "\\x20|\\x0A{1,2}[\\x20\\x09]{0,20}";

/// Integers without a bound get JavaScript's safe range, +-(2^53 - 1), 16
/// digits at most (llama.cpp allows 16 too); a seeded SmolLM2 otherwise
/// wrote a 50-digit population.
const SAFE_INTEGER: i64 = (1 << 53) - 1;

fn bound_integers(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            let integer = match o.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if integer {
                if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
                    o.insert("maximum".into(), SAFE_INTEGER.into());
                }
                if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
                    o.insert("minimum".into(), (-SAFE_INTEGER).into());
                }
            }
            for (key, child) in o.iter_mut() {
                // Values, not schemas.
                if !matches!(
                    key.as_str(),
                    "const" | "enum" | "default" | "examples" | "x-guidance"
                ) {
                    bound_integers(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

impl ConstraintSpec {
    fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonObject | ConstraintSpec::JsonSchema(_) => {
                "the JSON schema cannot be used"
            }
            ConstraintSpec::Lark(_) => "the Lark grammar cannot be used",
            ConstraintSpec::Gbnf(_) => "the GBNF grammar cannot be used",
            ConstraintSpec::Regex(_) => "the regex cannot be used",
        }
    }
}

/// Translates a llama.cpp GBNF grammar to llguidance's Lark: `::=` rules
/// become `name: ...`, `root` becomes `start`, dashes in rule names become
/// underscores, character classes become regex terminals, `#` comments
/// are dropped. Strings, alternation, grouping and `* + ? {m,n}` read the
/// same in both.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String, ConstraintError> {
    let mut out = String::new();
    let chars: Vec<char> = gbnf.chars().collect();
    let mut i = 0;
    let err = |m: String| ConstraintError(format!("the GBNF grammar cannot be used: {m}"));
    let mut line = 1;
    let mut depth = 0i32;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    return Err(err(format!("line {line}: a string is not closed")));
                }
                out.extend(&chars[start..=i]);
                i += 1;
            }
            '[' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != ']' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    return Err(err(format!("line {line}: a character class is not closed")));
                }
                out.push('/');
                for &ch in &chars[start..=i] {
                    if ch == '/' {
                        out.push('\\');
                    }
                    out.push(ch);
                }
                out.push('/');
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&':') && chars.get(i + 2) == Some(&'=') => {
                out.push(':');
                i += 3;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let name = name.replace('-', "_").to_ascii_lowercase();
                out.push_str(if name == "root" { "start" } else { &name });
            }
            '\n' => {
                // A rule may go on over several lines; Lark's rules end at
                // a newline unless the next line starts with `|`.
                line += 1;
                out.push(if depth == 0 && starts_rule(&chars[i + 1..]) {
                    '\n'
                } else {
                    ' '
                });
                i += 1;
            }
            '(' | ')' => {
                depth += if c == '(' { 1 } else { -1 };
                out.push(c);
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Whether `rest` (after a newline) starts a GBNF rule, `name ::=`, or is
/// blank to its end.
fn starts_rule(rest: &[char]) -> bool {
    let line: String = rest.iter().take_while(|&&c| c != '\n').collect();
    let t = line.trim_start();
    if t.is_empty() || t.starts_with('#') {
        return true;
    }
    let name_end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(t.len());
    name_end > 0 && t[name_end..].trim_start().starts_with("::=")
}

#[cfg(test)]
mod tests {
    use super::gbnf_to_lark;

    #[test]
    fn gbnf_reads_as_lark() {
        let g = "# a yes or no\nroot ::= answer \"!\"?\nanswer-word ::= [a-z/]+ | \"no\"\nanswer ::= answer-word";
        let l = gbnf_to_lark(g).expect("translated");
        assert_eq!(
            l,
            "\nstart : answer \"!\"?\nanswer_word : /[a-z\\/]/+ | \"no\"\nanswer : answer_word"
        );
        assert!(gbnf_to_lark("root ::= \"open").is_err());
        // A rule over several lines is one Lark line.
        let l = gbnf_to_lark("root ::= (\n  \"a\"\n  | \"b\")\n  \"c\"\nx ::= \"d\"").expect("ok");
        assert_eq!(l, "start : (   \"a\"   | \"b\")   \"c\"\nx : \"d\"");
    }
}
