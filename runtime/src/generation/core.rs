//! The per-token state machine of one answer. Its caller computes logits
//! (a whole step of its own, or a row of a batched step) and hands them to
//! `next`; the machine checks them, runs the processor chain, records
//! log-probabilities, samples, and decides: show this text and compute this
//! token, or stop (EOS, a stop string, the token limit, a processor's
//! complete answer). `verify` does the same for several tokens a drafter
//! proposed, from the logits one step computed for all of them, and keeps
//! exactly the tokens `next` would have chosen one by one.
//!
//! The end-of-sequence token never enters the caller's cache: a following
//! turn's template renders it again, and reusing the cached prefix costs
//! that one token.

use mllm_converter::tokenizer::StreamDecoder;

use super::processors::{BanTokens, LogitsProcessor, ProcessorError, VocabLimit};
use super::sampler::{Sampler, SamplerConfig};
use super::stop::StopFilter;

/// Why an answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-sequence token, or a processor said the answer is whole.
    Eos,
    StopString,
    /// The token limit, or the context's end.
    MaxTokens,
    Interrupted,
}

impl StopReason {
    /// OpenAI's `finish_reason`.
    pub fn finish_reason(self) -> &'static str {
        match self {
            StopReason::Eos | StopReason::StopString | StopReason::Interrupted => "stop",
            StopReason::MaxTokens => "length",
        }
    }
}

/// What stopped an answer with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenerationError {
    /// The model produced NaN or an infinity (the text says where).
    NonFinite(String),
    /// The processors forbade every token.
    NothingAllowed,
    Processor(ProcessorError),
    Detokenize(String),
}

impl std::fmt::Display for GenerationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenerationError::NonFinite(m) => f.write_str(m),
            GenerationError::NothingAllowed => f.write_str(
                "no token is allowed next: the constraints on this answer forbid every token",
            ),
            GenerationError::Processor(e) => write!(f, "{e}"),
            GenerationError::Detokenize(m) => write!(f, "cannot decode a generated token: {m}"),
        }
    }
}

impl std::error::Error for GenerationError {}

/// Turns tokens into text as they come, never splitting a character.
pub trait Detokenize {
    fn step(&mut self, token: u32) -> Result<String, String>;
    /// What is held back (an incomplete character) at the end.
    fn flush(&mut self) -> String;
}

impl Detokenize for StreamDecoder<'_> {
    fn step(&mut self, token: u32) -> Result<String, String> {
        StreamDecoder::step(self, token).map_err(|e| e.to_string())
    }
    fn flush(&mut self) -> String {
        StreamDecoder::flush(self)
    }
}

/// What an answer is asked for, besides its sampler.
#[derive(Clone, Debug, Default)]
pub struct GenerationConfig {
    pub sampler: SamplerConfig,
    /// Most tokens to generate (the caller lowers it to the room its
    /// context has left).
    pub max_new_tokens: usize,
    /// End-of-sequence ids (the model's).
    pub eos: Vec<u32>,
    pub stops: Vec<String>,
    /// Keep generating through end-of-sequence tokens (they are masked).
    pub ignore_eos: bool,
    /// Record each token's log-probability and the `k` most likely.
    pub logprobs: Option<usize>,
    /// The tokenizer's vocabulary size: ids from it on (a padded output
    /// head's rows) are never drawn.
    pub vocab: Option<usize>,
}

/// A chosen token's log-probability and the `k` most likely tokens', from
/// the distribution after the processors' masks and before penalties and
/// temperature.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One turn of the machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The token chosen, when one was (none on EOS or at a limit).
    pub token: Option<u32>,
    pub logprob: Option<TokenLogprob>,
    /// Text safe to show now.
    pub text: String,
    /// Set when the answer has ended; otherwise the caller computes
    /// `token` and calls `next` with the logits after it.
    pub done: Option<StopReason>,
}

/// One answer being generated.
pub struct Generation<'a> {
    sampler: Sampler,
    max_new: usize,
    eos: Vec<u32>,
    logprobs: Option<usize>,
    processors: Vec<Box<dyn LogitsProcessor>>,
    filter: StopFilter,
    detok: Box<dyn Detokenize + 'a>,
    generated: Vec<u32>,
    done: Option<StopReason>,
}

impl<'a> Generation<'a> {
    pub fn new(cfg: GenerationConfig, detok: Box<dyn Detokenize + 'a>) -> Generation<'a> {
        let mut processors: Vec<Box<dyn LogitsProcessor>> = vec![];
        if let Some(v) = cfg.vocab {
            processors.push(Box::new(VocabLimit(v)));
        }
        if cfg.ignore_eos {
            processors.push(Box::new(BanTokens(cfg.eos.clone())));
        }
        Generation {
            sampler: Sampler::new(cfg.sampler),
            max_new: cfg.max_new_tokens,
            eos: if cfg.ignore_eos { vec![] } else { cfg.eos },
            logprobs: cfg.logprobs,
            processors,
            filter: StopFilter::new(cfg.stops),
            detok,
            generated: vec![],
            done: None,
        }
    }

    /// Appends a processor to the chain (after the built-in masks).
    pub fn add_processor(&mut self, p: Box<dyn LogitsProcessor>) {
        self.processors.push(p);
    }

    /// Lowers the token limit (a cache with less room than asked).
    pub fn limit(&mut self, max_new: usize) {
        self.max_new = self.max_new.min(max_new);
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// Tokens the answer may still have.
    pub fn remaining(&self) -> usize {
        self.max_new.saturating_sub(self.generated.len())
    }

    /// The text shown so far.
    pub fn text(&self) -> &str {
        &self.filter.emitted
    }

    /// Why the answer ended, once it has.
    pub fn done(&self) -> Option<StopReason> {
        self.done
    }

    /// Chooses the token after `logits` (the model's, after every token in
    /// `history`: prompt and generated).
    ///
    /// The processors and the sampler's penalties work on `logits` in
    /// place (a decode step's row is large: 151k values for Qwen3), so the
    /// caller's row is changed.
    pub fn next(&mut self, logits: &mut [f32], history: &[u32]) -> Result<Step, GenerationError> {
        if let Some(reason) = self.done {
            return Ok(self.ended(reason));
        }
        if self.generated.len() >= self.max_new {
            return Ok(self.finish(StopReason::MaxTokens));
        }
        mllm_interpreter::numerics::check_logits(logits).map_err(GenerationError::NonFinite)?;
        for p in &mut self.processors {
            p.process(logits, history)
                .map_err(GenerationError::Processor)?;
        }
        // Log-probabilities are of the masked distribution, before the
        // penalties the sampler applies: kept only when asked for.
        let masked = self.logprobs.map(|k| (k, logits.to_vec()));
        let token = self
            .sampler
            .sample_masked(logits, history)
            .ok_or(GenerationError::NothingAllowed)?;
        if self.eos.contains(&token) {
            return Ok(self.finish(StopReason::Eos));
        }
        let logprob = masked.map(|(k, l)| logprob_of(&l, token, k));
        for p in &mut self.processors {
            p.accept(token).map_err(GenerationError::Processor)?;
        }
        self.generated.push(token);
        let chunk = self
            .detok
            .step(token)
            .map_err(GenerationError::Detokenize)?;
        let (text, stopped) = self.filter.push(&chunk);
        let mut step = Step {
            token: Some(token),
            logprob,
            text,
            done: None,
        };
        let end = if stopped {
            Some(StopReason::StopString)
        } else if self.processors.iter().any(|p| p.is_complete()) {
            Some(StopReason::Eos)
        } else if self.generated.len() >= self.max_new {
            Some(StopReason::MaxTokens)
        } else {
            None
        };
        if let Some(reason) = end {
            step.text.push_str(&self.finish(reason).text);
            step.done = Some(reason);
        }
        Ok(step)
    }

    /// Checks a drafter's `proposed` tokens against `rows`: `rows[i]` are
    /// the logits after `history` and `proposed[..i]` (one row more than
    /// proposals). Samples from each row in turn exactly as `next` would,
    /// so the answer is the same token for token, and stops at the first
    /// token that differs from the proposal (it is the correction) or at
    /// an end. The tokens accepted are `proposed[..steps.len() - 1]` when
    /// the last step's token differs from its proposal, else all the steps'
    /// tokens; the caller's cache keeps those and computes the last
    /// step's token next.
    pub fn verify(
        &mut self,
        proposed: &[u32],
        rows: &mut [Vec<f32>],
        history: &[u32],
    ) -> Result<Vec<Step>, GenerationError> {
        let mut h = history.to_vec();
        let mut steps = vec![];
        for (i, row) in rows.iter_mut().enumerate().take(proposed.len() + 1) {
            let step = self.next(row, &h)?;
            let stop = step.done.is_some()
                || match (step.token, proposed.get(i)) {
                    (Some(t), Some(&p)) => t != p,
                    _ => true,
                };
            if let Some(t) = step.token {
                h.push(t);
            }
            steps.push(step);
            if stop {
                break;
            }
        }
        Ok(steps)
    }

    /// Ends the answer now (the client left, an interrupt, a full cache):
    /// the text held back, as a last step.
    pub fn finish(&mut self, reason: StopReason) -> Step {
        if self.done.is_some() {
            return self.ended(reason);
        }
        self.done = Some(reason);
        let mut text = String::new();
        if reason != StopReason::StopString {
            let rest = self.detok.flush();
            let (shown, stopped) = self.filter.push(&rest);
            text.push_str(&shown);
            if stopped {
                self.done = Some(StopReason::StopString);
            } else {
                text.push_str(&self.filter.finish());
            }
        }
        Step {
            token: None,
            logprob: None,
            text,
            done: self.done,
        }
    }

    fn ended(&self, reason: StopReason) -> Step {
        Step {
            token: None,
            logprob: None,
            text: String::new(),
            done: self.done.or(Some(reason)),
        }
    }
}

/// `token`'s log-probability and the `k` most likely tokens' under the
/// softmax of `logits` (masked entries are `-inf`: probability 0, never
/// among the top).
fn logprob_of(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |id: usize| (logits[id] as f64 - lse) as f32;
    let mut order: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i].is_finite())
        .collect();
    let k = k.min(order.len());
    if k > 0 {
        order.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
        order.truncate(k);
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    } else {
        order.clear();
    }
    TokenLogprob {
        token,
        logprob: lp(token as usize),
        top: order.into_iter().map(|i| (i as u32, lp(i))).collect(),
    }
}
