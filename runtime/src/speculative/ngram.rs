//! Prompt lookup: text that quotes its input (rewriting a paragraph,
//! editing code, extracting fields) repeats long runs of tokens already in
//! the conversation. The proposal is what followed the latest earlier
//! occurrence of the last `n` tokens, for the longest `n` that occurs
//! (llama.cpp's `llama-lookup` and Saxena's prompt lookup decoding guess
//! the same way). No second model; a lookup costs `O(history * n)`
//! comparisons, nothing beside a step over the weights.

use super::{Proposer, SpecConfig, SpecType};
use crate::Result;

#[derive(Clone, Copy, Debug)]
pub struct NgramLookup {
    /// Longest and shortest suffix tried (4 and 2: one token alone
    /// matches too often to be worth a verification row).
    pub max_n: usize,
    pub min_n: usize,
}

impl Default for NgramLookup {
    fn default() -> Self {
        NgramLookup { max_n: 4, min_n: 2 }
    }
}

impl NgramLookup {
    /// The continuation of the latest earlier occurrence of `history`'s
    /// last `n` tokens, longest `n` first; at most `max` tokens.
    pub fn lookup(&self, history: &[u32], max: usize) -> Vec<u32> {
        let len = history.len();
        for n in (self.min_n.max(1)..=self.max_n).rev() {
            if len <= n {
                continue;
            }
            let key = &history[len - n..];
            // Occurrences starting at s < len - n, latest first; the
            // continuation is what followed, copied on past the end of the
            // history as LZ77 copies (a loop of period len - from goes on
            // repeating: `5 6 5 6 | 5 6` proposes `5 6 5 6 ...`).
            let found = (0..len - n).rev().find(|&s| &history[s..s + n] == key);
            if let Some(s) = found {
                let from = s + n;
                let mut out = Vec::with_capacity(max);
                for j in 0..max {
                    let at = from + j;
                    let t = if at < len { history[at] } else { out[at - len] };
                    out.push(t);
                }
                return out;
            }
        }
        vec![]
    }
}

impl Proposer for NgramLookup {
    fn propose(&mut self, history: &[u32], max: usize, _cfg: &SpecConfig) -> Result<Vec<u32>> {
        Ok(self.lookup(history, max))
    }

    fn kind(&self) -> SpecType {
        SpecType::Ngram
    }
}
