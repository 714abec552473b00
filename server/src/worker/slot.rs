//! One request in a slot: its prompt computed chunk by chunk, then one
//! token per turn (sample, stop checks, stream the text), until EOS, a stop
//! string, its token limit, the context's end, or the client leaving.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mllm_converter::tokenizer::{StreamDecoder, Tokenizer};
use mllm_interpreter::Sampler;
use mllm_runtime::engine::StopFilter;
use mllm_runtime::model_files::ModelFiles;
use mllm_runtime::{Runner, Sequence, PREFILL_CHUNK};
use tokio::sync::mpsc::UnboundedSender;

use super::prepare::Prepared;
use super::{Event, GenJob, TokenLogprob, Usage};
use crate::api::error::{engine_message, ApiError};
use crate::api::request::GenParams;
use crate::metrics::ModelMetrics;

/// A tokenized request waiting for a slot.
pub struct Pending {
    job: GenJob,
    pub prompt: Prepared,
    fault: bool,
}

impl Pending {
    pub fn new(job: GenJob, prompt: Prepared, fault: bool) -> Pending {
        Pending { job, prompt, fault }
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
    params: GenParams,
    prompt: Prepared,
    /// Where computing the prompt goes on (its length once done).
    next: usize,
    /// The logits to sample the next token from, once the prompt is in.
    logits: Option<Vec<f32>>,
    sampler: Sampler,
    filter: StopFilter,
    decoder: StreamDecoder<'static>,
    tok: Arc<Tokenizer>,
    generated: usize,
    /// Most tokens this request may still add (its limit and the context's).
    max_new: usize,
    usage: Usage,
    started: Instant,
    decode_started: Option<Instant>,
}

impl Active {
    /// Takes a slot: keeps the longest prefix of the prompt its cache holds.
    pub fn start(
        p: Pending,
        seq: &mut Sequence,
        tok: Option<Arc<Tokenizer>>,
    ) -> Result<Active, (UnboundedSender<Event>, ApiError)> {
        let Pending { job, prompt, fault } = p;
        let events = job.events;
        let Some(tok) = tok else {
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
        Ok(Active {
            fault,
            sampler: Sampler::new(job.params.sampler.clone()),
            filter: StopFilter::new(job.params.stops.clone()),
            decoder: StreamDecoder::shared(tok.clone(), true),
            tok,
            usage: Usage {
                prompt_tokens: prompt.ids.len(),
                cached_tokens: next,
                ..Usage::default()
            },
            events,
            params: job.params,
            prompt,
            next,
            logits: None,
            generated: 0,
            max_new,
            started: Instant::now(),
            decode_started: None,
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
    pub fn sample(&mut self, seq: &Sequence, files: &ModelFiles, metrics: &ModelMetrics) -> Next {
        let Some(mut logits) = self.logits.take() else {
            return Next::Wait;
        };
        if self.params.ignore_eos {
            for &e in &files.eos {
                if let Some(l) = logits.get_mut(e as usize) {
                    // Finite: the sampler refuses non-finite logits.
                    *l = f32::MIN;
                }
            }
        }
        if self.generated >= self.max_new {
            self.finish("length", metrics);
            return Next::Finished;
        }
        let token = match self.sampler.sample(&logits, &seq.cached) {
            Ok(t) => t,
            Err(e) => {
                self.fail(ApiError::internal(e));
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                return Next::Finished;
            }
        };
        if files.eos.contains(&token) {
            self.finish("stop", metrics);
            return Next::Finished;
        }
        self.generated += 1;
        metrics.generated.fetch_add(1, Ordering::Relaxed);
        let logprob = self
            .params
            .logprobs
            .map(|k| logprob_of(&self.tok, &logits, token, k));
        let chunk = self.decoder.step(token).unwrap_or_default();
        let (shown, stopped) = self.filter.push(&chunk);
        let _ = self.events.send(Event::Token {
            text: shown,
            logprob,
        });
        if stopped {
            self.send_done("stop", metrics);
            return Next::Finished;
        }
        if self.generated >= self.max_new {
            self.finish("length", metrics);
            return Next::Finished;
        }
        Next::Feed(token)
    }

    /// Emits the text held back (incomplete characters, a possible stop
    /// string that did not come), then the end.
    fn finish(&mut self, reason: &'static str, metrics: &ModelMetrics) {
        let rest = self.decoder.flush();
        let (mut shown, stopped) = self.filter.push(&rest);
        if !stopped {
            shown.push_str(&self.filter.finish());
        }
        if !shown.is_empty() {
            let _ = self.events.send(Event::Token {
                text: shown,
                logprob: None,
            });
        }
        self.send_done(if stopped { "stop" } else { reason }, metrics);
    }

    fn send_done(&mut self, reason: &'static str, metrics: &ModelMetrics) {
        let decode_secs = self
            .decode_started
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.usage.completion_tokens = self.generated;
        self.usage.decode_ms = decode_secs * 1e3;
        metrics.add_decode(decode_secs);
        metrics.finished.fetch_add(1, Ordering::Relaxed);
        let _ = self.events.send(Event::Done {
            finish_reason: reason,
            usage: self.usage.clone(),
        });
    }

    pub fn fail(&mut self, e: ApiError) {
        let _ = self.events.send(Event::Error(e));
    }
}

/// The chosen token's log-probability and the `k` most likely tokens',
/// from the model's distribution (before penalties and temperature).
fn logprob_of(tok: &Tokenizer, logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |id: usize| (logits[id] as f64 - lse) as f32;
    let text = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(order.len());
    if k > 0 {
        order.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
        order.truncate(k);
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    } else {
        order.clear();
    }
    TokenLogprob {
        token: text(token),
        logprob: lp(token as usize),
        top: order.into_iter().map(|i| (text(i as u32), lp(i))).collect(),
    }
}
