//! Incremental decoding of generated ids into text chunks.
//!
//! A token is not a unit of text: byte-level BPE (Qwen, GPT-2, SmolLM) and
//! SentencePiece byte fallback (`<0xE4>`) split one character over several
//! tokens, and decoders act on context (SentencePiece drops the space of
//! the first token only). So chunks are found by decoding a small window of
//! ids (context already out, then new ids) and emitting what the new ids
//! added to the window's text, never the tail that is still an incomplete
//! character.
//!
//! An incomplete UTF-8 sequence decodes to U+FFFD at the end of the text:
//! the byte-level decoder writes one replacement char for it, byte fallback
//! one per byte (at most 3, since a character has at most 4 bytes). Those
//! trailing replacement chars are held back until a later token completes
//! the character or rules it out. Replacement chars further back are real
//! (the bytes were invalid whatever comes next) and are emitted.
//!
//! Byte fallback decodes a run of byte tokens all-or-nothing: until the
//! run's last character is complete, the whole run shows as U+FFFD. The
//! window keeps a run whole, and while a run is open and its text disagrees
//! with what was emitted, nothing is emitted. For valid text the chunks add
//! up to the full decode exactly; only a run holding invalid bytes differs
//! (the stream keeps the characters it already emitted, the full decode
//! turns the whole run into U+FFFD).

use std::sync::Arc;

use super::Tokenizer;
use crate::error::Result;

/// Turns a stream of ids into text. Feed ids with [`StreamDecoder::step`];
/// call [`StreamDecoder::flush`] at the end of generation for whatever was
/// held back. Every chunk is whole characters, and for a stream of real
/// text the chunks add up to `decode` of all the ids.
pub struct StreamDecoder<'t> {
    tokenizer: TokRef<'t>,
    skip_special_tokens: bool,
    /// The window: context ids whose text is already out, then the ids
    /// whose text is (partly) held back.
    ids: Vec<u32>,
    /// Text of the window as of the last step.
    text: String,
    /// The part of the window's text already emitted (starting with the
    /// context's text).
    out: String,
}

/// A character needs at most 4 bytes, so at most 3 can be waiting for the
/// rest; byte fallback writes one U+FFFD for each.
const MAX_HELD_REPLACEMENTS: usize = 3;

/// A window never keeps more ids than this as context, even within a run
/// of byte tokens (see `slide`); past it, decoding stays linear at the cost
/// of exactness for absurdly long runs of invalid bytes.
const MAX_CONTEXT: usize = 64;

/// A window that holds more ids than this while its text is still held
/// back is flushed (held characters become U+FFFD, as `flush` writes them):
/// each step decodes the whole window, so a text that never settles (a
/// byte run that never completes, decoders revising what is out) would
/// make decoding quadratic (a fuzzed tokenizer: 16 s under ASan).
const MAX_WINDOW: usize = 256;

/// The tokenizer a decoder reads: borrowed (a command's loop), or shared
/// (a server's request, which outlives any borrow of the model's files).
enum TokRef<'t> {
    Borrowed(&'t Tokenizer),
    Shared(Arc<Tokenizer>),
}

impl std::ops::Deref for TokRef<'_> {
    type Target = Tokenizer;
    fn deref(&self) -> &Tokenizer {
        match self {
            TokRef::Borrowed(t) => t,
            TokRef::Shared(t) => t,
        }
    }
}

impl StreamDecoder<'static> {
    /// A decoder that holds its tokenizer by `Arc`, so it can live as long
    /// as a request does.
    pub fn shared(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> StreamDecoder<'static> {
        StreamDecoder::with(TokRef::Shared(tokenizer), skip_special_tokens)
    }
}

impl<'t> StreamDecoder<'t> {
    pub fn new(tokenizer: &'t Tokenizer, skip_special_tokens: bool) -> StreamDecoder<'t> {
        StreamDecoder::with(TokRef::Borrowed(tokenizer), skip_special_tokens)
    }

    fn with(tokenizer: TokRef<'t>, skip_special_tokens: bool) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            text: String::new(),
            out: String::new(),
        }
    }

    /// Adds one id; returns the text it completes (possibly empty). An
    /// out-of-range id is an error and leaves the decoder as it was.
    pub fn step(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = match self.tokenizer.decode(&self.ids, self.skip_special_tokens) {
            Ok(t) => t,
            Err(e) => {
                self.ids.pop();
                return Err(e);
            }
        };
        let end = stable_end(&text);
        let mut chunk = String::new();
        if text.starts_with(&self.out) {
            if end > self.out.len() {
                chunk.push_str(&text[self.out.len()..end]);
                self.out = text[..end].to_string();
            }
        } else if !self.is_byte_token(id) {
            // The decoder revised text already out. Byte fallback does that:
            // it decodes a run of byte tokens all-or-nothing, so while a
            // character is incomplete every byte of the run shows as U+FFFD,
            // and a run with an invalid byte stays that way. While the run
            // is open, wait (the character may complete and the text agree
            // again); once it is closed the revision is final, and since
            // emitted text cannot be taken back, go on after what both
            // texts share.
            let start = revised_start(&text, &self.out);
            if end > start {
                chunk.push_str(&text[start..end]);
                self.out = text[..end].to_string();
            }
        }
        self.text = text;
        if self.out == self.text {
            self.slide();
        } else if self.ids.len() > MAX_WINDOW {
            chunk.push_str(&self.flush());
        }
        Ok(chunk)
    }

    /// Emits what is held back (incomplete characters become U+FFFD, as a
    /// full decode writes them) and starts afresh.
    pub fn flush(&mut self) -> String {
        let start = if self.text.starts_with(&self.out) {
            self.out.len()
        } else {
            revised_start(&self.text, &self.out)
        };
        let rest = self.text[start..].to_string();
        self.ids.clear();
        self.text.clear();
        self.out.clear();
        rest
    }

    /// Whether text is held back, waiting for more ids.
    pub fn pending(&self) -> bool {
        self.out != self.text
    }

    /// Everything is out: shrink the window to the context the next step
    /// needs, which starts at an anchor: the last id that decodes to text
    /// of its own (not a byte-fallback token, not a skipped special token).
    /// Decoders treat the first token they see differently (SentencePiece
    /// drops its leading space), so that must be a token already out; and
    /// byte fallback decodes a whole run of byte tokens at once, so a run
    /// must not be cut in two.
    fn slide(&mut self) {
        let n = self.ids.len();
        let mut keep = 1;
        while keep < n && keep < MAX_CONTEXT && !self.is_anchor(self.ids[n - keep]) {
            keep += 1;
        }
        if keep >= n {
            return;
        }
        self.ids.drain(..n - keep);
        // Decoding ids the tokenizer just decoded cannot fail; if it did,
        // keeping the longer window would still be correct, only slower.
        if let Ok(text) = self.tokenizer.decode(&self.ids, self.skip_special_tokens) {
            self.out = text.clone();
            self.text = text;
        }
    }

    fn is_anchor(&self, id: u32) -> bool {
        let skipped = self.skip_special_tokens && self.tokenizer.is_special(id);
        !self.is_byte_token(id) && !skipped
    }

    /// A SentencePiece byte-fallback token, `<0xNN>`.
    fn is_byte_token(&self, id: u32) -> bool {
        self.tokenizer.id_to_token(id).is_some_and(|t| {
            let b = t.as_bytes();
            b.len() == 6
                && t.starts_with("<0x")
                && t.ends_with('>')
                && b[3].is_ascii_hexdigit()
                && b[4].is_ascii_hexdigit()
        })
    }
}

/// Length of `text` without the trailing replacement chars that may still
/// become a character.
fn stable_end(text: &str) -> usize {
    let mut end = text.len();
    for _ in 0..MAX_HELD_REPLACEMENTS {
        match text[..end].strip_suffix('\u{FFFD}') {
            Some(rest) => end = rest.len(),
            None => break,
        }
    }
    end
}

/// Where to go on in `text` when it no longer starts with the emitted
/// `out`: after the prefix both share, and after one U+FFFD for each byte
/// of `out` past that prefix (byte fallback writes one per byte of an
/// invalid run, and those bytes were already emitted as characters).
fn revised_start(text: &str, out: &str) -> usize {
    let mut start = text
        .char_indices()
        .zip(out.chars())
        .find(|((_, a), b)| a != b)
        .map_or(text.len().min(out.len()), |((i, _), _)| i);
    let mut already = out.len().saturating_sub(start);
    for c in text[start..].chars() {
        if already == 0 || c != '\u{FFFD}' {
            break;
        }
        start += c.len_utf8();
        already -= 1;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_end_holds_at_most_three_replacements() {
        assert_eq!(stable_end("ab"), 2);
        assert_eq!(stable_end("a\u{FFFD}"), 1);
        assert_eq!(stable_end("a\u{FFFD}\u{FFFD}\u{FFFD}"), 1);
        assert_eq!(stable_end("a\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}"), 4);
        assert_eq!(stable_end("\u{FFFD}x"), 4);
    }
}
