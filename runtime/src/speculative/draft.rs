//! A draft model: a smaller model with the target's vocabulary proposes
//! its greedy continuation, token by token, while it is confident (top
//! probability at least `--draft-p-min`). It keeps its own cache, which
//! follows the target's answer by prefix reuse: each proposal starts by
//! feeding the history, which keeps what the draft's cache shares with it
//! and computes only the rest (the token the target chose, usually one).

use super::{Proposer, SpecConfig, SpecType};
use crate::runner::Runner;
use crate::sequence::Sequence;
use crate::{Error, Result};

pub struct DraftModel {
    pub runner: Runner,
    pub seq: Sequence,
}

impl DraftModel {
    /// The draft `runner` with an empty cache of `max_context` tokens.
    pub fn new(runner: Runner, max_context: Option<usize>) -> DraftModel {
        DraftModel {
            runner,
            seq: Sequence::new(max_context),
        }
    }
}

/// The most likely token of `logits` and its probability.
fn top(logits: &[f32]) -> Option<(u32, f32)> {
    let (best, &mx) = logits
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_nan())
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    if !mx.is_finite() {
        return None;
    }
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| ((v - mx) as f64).exp())
        .sum();
    Some((best as u32, (1.0 / sum) as f32))
}

impl Proposer for DraftModel {
    fn propose(&mut self, history: &[u32], max: usize, cfg: &SpecConfig) -> Result<Vec<u32>> {
        let mut out = vec![];
        if max == 0 || history.is_empty() {
            return Ok(out);
        }
        // Leave room for the proposals in the draft's own context.
        if let Some(m) = self.seq.max_context {
            if history.len() + max > m {
                return Ok(out);
            }
        }
        let mut logits = self
            .seq
            .feed(&mut self.runner, history)
            .map_err(|e| Error::generate(format!("the draft model: {}", e.message())))?;
        loop {
            let Some((t, p)) = top(&logits) else {
                break;
            };
            if p < cfg.draft_p_min {
                break;
            }
            out.push(t);
            if out.len() == max {
                break;
            }
            logits = self
                .seq
                .step(&mut self.runner, t)
                .map_err(|e| Error::generate(format!("the draft model: {}", e.message())))?;
        }
        Ok(out)
    }

    fn kind(&self) -> SpecType {
        SpecType::Draft
    }
}
