//! Logits processors: the chain each token's logits pass through after the
//! model and before the sampler. A processor forbids a token by setting its
//! logit to `-inf` (the sampler never draws one); it may also shift logits.
//! Constrained decoding (a JSON schema or grammar) is one more processor
//! that masks every token its automaton cannot take next, told of each
//! token chosen through `accept`.

use std::fmt;

/// Why a processor could not go on (the request fails with this text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorError(pub String);

impl fmt::Display for ProcessorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One link of the chain. `Send` so a server slot can hold its chain.
pub trait LogitsProcessor: Send {
    /// Adjusts `logits` (one per vocabulary id) in place; `history` is
    /// every token so far, prompt and generated.
    fn process(&mut self, logits: &mut [f32], history: &[u32]) -> Result<(), ProcessorError>;

    /// The token chosen after this step (a grammar advances its state).
    fn accept(&mut self, _token: u32) -> Result<(), ProcessorError> {
        Ok(())
    }

    /// Whether the output so far is a whole answer (a grammar that has
    /// reached an accepting state with nothing more allowed). Generation
    /// then ends as at an end-of-sequence token.
    fn is_complete(&self) -> bool {
        false
    }
}

/// Forbids ids at or past the tokenizer's vocabulary: checkpoints pad their
/// embedding to a multiple of 64 or 128, and those rows decode to nothing.
pub struct VocabLimit(pub usize);

impl LogitsProcessor for VocabLimit {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), ProcessorError> {
        if let Some(pad) = logits.get_mut(self.0..) {
            pad.fill(f32::NEG_INFINITY);
        }
        Ok(())
    }
}

/// Forbids a fixed set of tokens (the end-of-sequence ids for
/// `ignore_eos`).
pub struct BanTokens(pub Vec<u32>);

impl LogitsProcessor for BanTokens {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), ProcessorError> {
        for &t in &self.0 {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }
}

/// OpenAI's `logit_bias`: a value added to chosen tokens' logits (-100
/// bans a token in practice, +100 all but forces it).
pub struct LogitBias(pub Vec<(u32, f32)>);

impl LogitsProcessor for LogitBias {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), ProcessorError> {
        for &(t, b) in &self.0 {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_processors_mask_and_shift() {
        let mut l = vec![1.0, 2.0, 3.0, 4.0, 5.0];
        VocabLimit(3).process(&mut l, &[]).expect("ok");
        assert_eq!(&l[..3], &[1.0, 2.0, 3.0]);
        assert!(l[3..].iter().all(|v| *v == f32::NEG_INFINITY));
        // A limit past the logits (a tokenizer larger than the head) is
        // no mask at all.
        let mut l = vec![1.0, 2.0];
        VocabLimit(9).process(&mut l, &[]).expect("ok");
        assert_eq!(l, vec![1.0, 2.0]);
        BanTokens(vec![0, 7]).process(&mut l, &[]).expect("ok");
        assert_eq!(l, vec![f32::NEG_INFINITY, 2.0]);
        LogitBias(vec![(1, -0.5), (5, 1.0)])
            .process(&mut l, &[])
            .expect("ok");
        assert_eq!(l, vec![f32::NEG_INFINITY, 1.5]);
    }
}
