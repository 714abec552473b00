//! One request in a slot: its prompt computed chunk by chunk, then one
//! token per turn (sample, stop checks, stream the text), until EOS, a stop
//! string, its token limit, the context's end, or the client leaving.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mllm_runtime::generation::processors::LogitBias;
use mllm_runtime::generation::{self, Constraint, Generation, Step, StopReason};
use mllm_runtime::model_files::ModelFiles;
use mllm_runtime::speculative::SpecType;
use mllm_runtime::tokenizer::{StreamDecoder, Tokenizer};
use mllm_runtime::{Checkpoint, Runner, Sequence, PREFILL_CHUNK};
use tokio::sync::mpsc::UnboundedSender;

use super::prepare::Prepared;
use super::{Event, GenJob, TokenLogprob, Usage};
use crate::api::error::{engine_message, ApiError};
use crate::metrics::ModelMetrics;

/// A tokenized request waiting for a slot.
pub struct Pending {
    job: GenJob,
    pub prompt: Prepared,
    /// The compiled `response_format`/`json_schema`/`grammar`.
    constraint: Option<Constraint>,
    fault: bool,
}

impl Pending {
    pub fn new(
        job: GenJob,
        prompt: Prepared,
        constraint: Option<Constraint>,
        fault: bool,
    ) -> Pending {
        Pending {
            job,
            prompt,
            constraint,
            fault,
        }
    }

    /// The client has gone.
    pub fn cancelled(&self) -> bool {
        self.job.events.is_closed()
    }
}

pub enum Progress {
    Running,
    Finished,
}

/// What a slot needs after sampling.
pub enum Next {
    /// Its prompt is still being computed.
    Wait,
    Finished,
    /// Compute this token (with the other slots' in one batched step).
    Feed(u32),
}

pub struct Active {
    /// Panic at the first decode step (`MLLM_SERVE_FAULT`, tests only).
    pub fault: bool,
    events: UnboundedSender<Event>,
    prompt: Prepared,
    /// Where computing the prompt goes on (its length once done).
    next: usize,
    /// The logits to sample the next token from, once the prompt is in.
    logits: Option<Vec<f32>>,
    /// The answer's state: sampler, stop strings, limits (the runtime's
    /// one generation core, as `mllm run` drives it).
    gen: Generation<'static>,
    tok: Arc<Tokenizer>,
    usage: Usage,
    started: Instant,
    decode_started: Option<Instant>,
    /// The token the last verification step chose after what it accepted
    /// (speculation samples as it verifies): computed next round without
    /// sampling again.
    pending: Option<u32>,
    /// Proposals the next verification takes at most
    /// (`speculative::next_budget`); 0 without speculation.
    pub spec_budget: usize,
}

impl Active {
    /// Takes a slot: keeps the longest prefix of the prompt its cache holds.
    pub fn start(
        p: Pending,
        seq: &mut Sequence,
        files: &ModelFiles,
        spec_budget: usize,
    ) -> Result<Active, (UnboundedSender<Event>, ApiError)> {
        let Pending {
            job,
            prompt,
            constraint,
            fault,
        } = p;
        let events = job.events;
        let Some(tok) = files.tokenizer.clone() else {
            return Err((events, ApiError::internal("the model has no tokenizer")));
        };
        let next = if prompt.images.is_some() {
            0
        } else {
            match seq.rewind_for_continuation(&prompt.ids) {
                Ok(n) => n,
                Err(e) => return Err((events, ApiError::bad_request(engine_message(&e)))),
            }
        };
        let context = seq.max_context.unwrap_or(usize::MAX);
        let room = context.saturating_sub(prompt.ids.len());
        let max_new = job.params.max_tokens.unwrap_or(usize::MAX).min(room);
        let p = &job.params;
        let mut cfg = files.generation_config(p.sampler.clone(), max_new, p.stops.clone());
        cfg.ignore_eos = p.ignore_eos;
        cfg.logprobs = p.logprobs;
        let mut gen = Generation::new(cfg, Box::new(StreamDecoder::shared(tok.clone(), true)));
        if !p.logit_bias.is_empty() {
            gen.add_processor(Box::new(LogitBias(p.logit_bias.clone())));
        }
        if let Some(c) = constraint {
            gen.add_processor(Box::new(c));
        }
        Ok(Active {
            fault,
            gen,
            tok,
            usage: Usage {
                prompt_tokens: prompt.ids.len(),
                cached_tokens: next,
                ..Usage::default()
            },
            events,
            prompt,
            next,
            logits: None,
            started: Instant::now(),
            decode_started: None,
            pending: None,
            spec_budget,
        })
    }

    /// The client has gone: the slot is freed at this token boundary.
    pub fn cancelled(&self) -> bool {
        self.events.is_closed()
    }

    /// Whether the prompt is still being computed.
    pub fn prefilling(&self) -> bool {
        self.next < self.prompt.ids.len()
    }

    /// The logits after the token `sample` returned.
    pub fn set_logits(&mut self, logits: Vec<f32>) {
        self.logits = Some(logits);
    }

    /// Computes the prompt's next chunk.
    pub fn prefill(
        &mut self,
        runner: &mut Runner,
        seq: &mut Sequence,
        metrics: &ModelMetrics,
    ) -> Progress {
        let ids = &self.prompt.ids;
        let result = if let Some((imgs, spec, key)) = &self.prompt.images {
            let r = seq.feed_images(runner, ids, imgs, spec, Some(*key));
            self.usage.cached_tokens = ids.len() - seq.last_computed;
            self.next = ids.len();
            r
        } else {
            // Chunks end at multiples of the chunk length, as `mllm run`
            // computes a prompt, so a request's numbers do not depend on
            // what its slot held before.
            let end = ((self.next / PREFILL_CHUNK + 1) * PREFILL_CHUNK).min(ids.len());
            let r = seq.extend(runner, &ids[self.next..end]);
            self.next = end;
            r
        };
        match result {
            Err(e) => {
                self.fail(ApiError::internal(engine_message(&e)));
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                Progress::Finished
            }
            Ok(logits) => {
                if self.next == self.prompt.ids.len() {
                    let secs = self.started.elapsed().as_secs_f64();
                    self.usage.prompt_ms = secs * 1e3;
                    metrics.add_prompt(
                        self.usage.prompt_tokens,
                        self.usage.prompt_tokens - self.usage.cached_tokens,
                        secs,
                    );
                    self.logits = Some(logits);
                    self.decode_started = Some(Instant::now());
                }
                Progress::Running
            }
        }
    }

    /// Picks the next token from the logits, streams its text, and says
    /// whether the sequence goes on (then the caller computes the token).
    pub fn sample(&mut self, seq: &Sequence, metrics: &ModelMetrics) -> Next {
        if let Some(t) = self.pending.take() {
            // Chosen (and streamed) by the last verification step.
            return Next::Feed(t);
        }
        let Some(mut logits) = self.logits.take() else {
            return Next::Wait;
        };
        let step = match self.gen.next(&mut logits, &seq.cached) {
            Ok(s) => s,
            Err(e) => {
                self.fail(ApiError::internal(format!("error: {e}")));
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                return Next::Finished;
            }
        };
        if step.token.is_some() {
            metrics.generated.fetch_add(1, Ordering::Relaxed);
        }
        self.send(step, metrics)
    }

    /// Tokens the answer may still generate.
    pub fn remaining(&self) -> usize {
        self.gen.remaining()
    }

    /// Keeps what the generation core accepts of a verification step:
    /// `rows[j]` are the logits after the token `sample` returned and
    /// `proposed[..j]`, which `seq` now holds. Streams the accepted tokens
    /// and the one chosen after them (computed next round), and drops the
    /// rejected rows from the cache (a recurrent state goes back to
    /// `checkpoint`, taken before the step, and the kept tokens run again
    /// with `runner`): the answer is the one plain decoding gives, token
    /// for token.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &mut self,
        seq: &mut Sequence,
        runner: &mut Runner,
        checkpoint: Option<Checkpoint>,
        proposed: &[u32],
        mut rows: Vec<Vec<f32>>,
        metrics: &ModelMetrics,
        (kind, draft_max): (SpecType, usize),
    ) -> Next {
        // The history of the first row: what the cache held before the
        // step, and the token it computed first.
        let Some(history) = seq.cached.len().checked_sub(proposed.len()) else {
            self.fail(ApiError::internal("a verification step lost its rows"));
            return Next::Finished;
        };
        let steps = match self.gen.verify(proposed, &mut rows, &seq.cached[..history]) {
            Ok(s) => s,
            Err(e) => {
                self.fail(ApiError::internal(format!("error: {e}")));
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                return Next::Finished;
            }
        };
        let accepted = steps
            .iter()
            .zip(proposed)
            .take_while(|(s, &p)| s.token == Some(p))
            .count();
        metrics.add_speculation(proposed.len(), accepted);
        self.spec_budget = mllm_runtime::speculative::next_budget(
            kind,
            self.spec_budget,
            proposed.len(),
            accepted,
            draft_max,
        );
        // Rows cut; a recurrent state set to the last kept row's, or back
        // at its checkpoint and the kept rows computed again.
        if let Err(e) = seq.take_back(runner, checkpoint, history + accepted) {
            self.fail(ApiError::internal(engine_message(&e)));
            metrics.failed.fetch_add(1, Ordering::Relaxed);
            return Next::Finished;
        }
        let mut next = Next::Wait;
        for step in steps {
            if step.token.is_some() {
                metrics.generated.fetch_add(1, Ordering::Relaxed);
            }
            next = self.send(step, metrics);
            if matches!(next, Next::Finished) {
                return next;
            }
        }
        if let Next::Feed(t) = next {
            self.pending = Some(t);
        }
        next
    }

    /// Streams a step of the core; the token to compute, if it goes on.
    fn send(&mut self, step: Step, metrics: &ModelMetrics) -> Next {
        let Step {
            token,
            logprob,
            text,
            done,
        } = step;
        if token.is_some() || !text.is_empty() {
            let logprob = logprob.map(|lp| self.logprob_text(lp));
            let _ = self.events.send(Event::Token { text, logprob });
        }
        match (done, token) {
            (Some(reason), _) => {
                self.send_done(reason, metrics);
                Next::Finished
            }
            (None, Some(t)) => Next::Feed(t),
            (None, None) => Next::Wait,
        }
    }

    fn send_done(&mut self, reason: StopReason, metrics: &ModelMetrics) {
        let decode_secs = self
            .decode_started
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.usage.completion_tokens = self.gen.generated().len();
        self.usage.decode_ms = decode_secs * 1e3;
        metrics.add_decode(decode_secs);
        metrics.finished.fetch_add(1, Ordering::Relaxed);
        let _ = self.events.send(Event::Done {
            finish_reason: reason.finish_reason(),
            usage: self.usage.clone(),
        });
    }

    /// The core's log-probabilities with the tokens spelled out.
    fn logprob_text(&self, lp: generation::TokenLogprob) -> TokenLogprob {
        let text = |id: u32| self.tok.decode(&[id], false).unwrap_or_default();
        TokenLogprob {
            token: text(lp.token),
            logprob: lp.logprob,
            top: lp.top.into_iter().map(|(i, p)| (text(i), p)).collect(),
        }
    }

    pub fn fail(&mut self, e: ApiError) {
        let _ = self.events.send(Event::Error(e));
    }
}
