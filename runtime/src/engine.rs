//! A loaded model with its KV cache, fed token ids; and the generation loop
//! (sampling, EOS and stop strings, streaming text) shared by `run` and `chat`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use mllm_backends::Tensor;
use mllm_interpreter::{Executor, ForwardInputs, KvCache, Model, Sampler, Value};

use crate::runner::Runner;
use crate::sequence::Sequence;

use crate::{color, Error as CliError, Result as CliResult};

pub use crate::runner::PREFILL_CHUNK;

pub struct Engine {
    pub runner: Runner,
    /// The conversation's cache and the tokens it holds.
    pub seq: Sequence,
}

impl Engine {
    /// Text steps (prompts, decode) run as captured graphs by default
    /// (`eager` undoes it).
    pub fn new(model: Model, max_context: Option<usize>) -> Engine {
        let mut runner = Runner::new(model);
        runner.compile_default(max_context.unwrap_or(crate::model_files::DEFAULT_CONTEXT));
        Engine {
            runner,
            seq: Sequence::new(max_context),
        }
    }

    /// The model's context length, when its config says.
    pub fn max_context(&self) -> Option<usize> {
        self.seq.max_context
    }

    /// Whether the cache holds as many tokens as the context allows.
    pub fn is_full(&self) -> bool {
        self.seq
            .max_context
            .is_some_and(|m| self.seq.cached.len() >= m)
    }

    /// Runs later text steps as captured graphs: prefill in chunks of
    /// `chunk` tokens, decode one token a step (prompts with images are
    /// still prefilled eagerly; the decoding after them is compiled).
    pub fn compile(&mut self, chunk: usize) {
        let context = self
            .seq
            .max_context
            .unwrap_or(crate::model_files::DEFAULT_CONTEXT);
        self.runner.compile(context, chunk);
    }

    /// Stores keys and values as `dtype` (f32, f16, q8_0) from now on; the
    /// conversation starts over.
    pub fn set_kv_dtype(&mut self, dtype: mllm_backends::DType) -> CliResult<()> {
        self.seq.set_kv_dtype(dtype)
    }

    /// Every step eager, no captured graphs (`--eager`).
    pub fn eager(&mut self) {
        self.runner.eager_only();
    }

    /// Applies the step settings of `opts`: the KV cache's dtype, eager or
    /// compiled steps, and `check_numerics` (which needs eager steps: the
    /// interpreter sees each op and its script line).
    pub fn configure(&mut self, opts: &crate::model_files::LoadOptions) -> CliResult<()> {
        configure_runner(&mut self.runner, opts);
        self.set_kv_dtype(opts.kv.0)
    }

    /// Bytes the KV cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.seq.kv_bytes()
    }

    /// Forgets the conversation: an empty cache.
    pub fn reset(&mut self) {
        self.seq.reset();
    }

    /// Computes a prompt with images from scratch (ids hold each image's
    /// placeholder tokens) and returns the logits after the last id; later
    /// `step`s continue at the rope positions the images left.
    pub fn feed_images(
        &mut self,
        ids: &[u32],
        images: &crate::images::Images,
        spec: &crate::images::ImageTokens,
    ) -> CliResult<Vec<f32>> {
        self.seq
            .feed_images(&mut self.runner, ids, images, spec, None)
    }

    /// Makes the cache hold exactly `ids`, reusing the longest prefix it
    /// already holds, and returns the logits after the last id.
    pub fn feed(&mut self, ids: &[u32]) -> CliResult<Vec<f32>> {
        self.seq.feed(&mut self.runner, ids)
    }

    /// Appends one token and returns the logits after it.
    pub fn step(&mut self, token: u32) -> CliResult<Vec<f32>> {
        self.seq.step(&mut self.runner, token)
    }
}

/// The step settings of `opts` a runner takes: eager or compiled steps and
/// `check_numerics` (which needs eager steps: the interpreter sees each op
/// and its script line).
pub fn configure_runner(runner: &mut Runner, opts: &crate::model_files::LoadOptions) {
    if opts.eager || opts.check_numerics {
        runner.eager_only();
    } else if opts.compiled {
        let context = runner
            .compiled
            .as_ref()
            .map_or(crate::model_files::DEFAULT_CONTEXT, |c| c.context);
        runner.compile(context, PREFILL_CHUNK);
    }
    runner.exec.check_numerics = opts.check_numerics;
}

/// Runs the entry `forward` on `ids` at positions `start..` against `cache`;
/// returns the logits `[rows, vocab]` (one row with `last_only`).
pub fn run_forward(
    model: &Model,
    exec: &mut dyn Executor,
    cache: &Rc<RefCell<KvCache>>,
    ids: &[i32],
    start: usize,
    last_only: bool,
) -> CliResult<Tensor> {
    let inputs = ForwardInputs::text(ids, start, cache.clone(), last_only)?;
    forward_logits(model, exec, inputs)
}

/// Runs the entry `forward` on `inputs`; the logits `[rows, vocab]` it must
/// return.
pub(crate) fn forward_logits(
    model: &Model,
    exec: &mut dyn Executor,
    inputs: ForwardInputs,
) -> CliResult<Tensor> {
    let out = model
        .run(exec, inputs)
        .map_err(|e| CliError(e.render(&model.program.sources, color())))?;
    match out {
        Value::Tensor(t) if t.rank() == 2 && t.shape()[0] >= 1 => Ok(t),
        other => Err(CliError(format!(
            "error: the script's forward returned {other:?}, expected logits [seq, vocab]"
        ))),
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Eos,
    StopString,
    MaxTokens,
    Interrupted,
}

pub struct GenStats {
    pub prompt_tokens: usize,
    /// Tokens actually run through the model for the prompt (the rest were cached).
    pub prompt_computed: usize,
    pub prompt_secs: f64,
    pub generated: Vec<u32>,
    pub gen_secs: f64,
    pub text: String,
    pub reason: StopReason,
}

impl GenStats {
    pub fn summary(&self, load_secs: Option<f64>) -> String {
        let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let mut line = format!(
            "prompt {} tok ({} computed, {:.1} tok/s) | generated {} tok ({:.1} tok/s)",
            self.prompt_tokens,
            self.prompt_computed,
            rate(self.prompt_computed, self.prompt_secs),
            self.generated.len(),
            rate(self.generated.len(), self.gen_secs),
        );
        if let Some(l) = load_secs {
            line.push_str(&format!(" | load {l:.2}s"));
        }
        line
    }
}

/// Emits text while holding back any tail that could still become a stop
/// string, so a stop string is never printed.
pub struct StopFilter {
    stops: Vec<String>,
    pending: String,
    pub emitted: String,
}

impl StopFilter {
    pub fn new(stops: Vec<String>) -> StopFilter {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
            emitted: String::new(),
        }
    }

    /// Adds a chunk; returns the text safe to show and whether a stop string appeared.
    pub fn push(&mut self, chunk: &str) -> (String, bool) {
        self.pending.push_str(chunk);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            self.emitted.push_str(&out);
            return (out, true);
        }
        // Longest suffix of `pending` that is a proper prefix of a stop string.
        let mut hold = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if self.pending.ends_with(&s[..i]) {
                    hold = hold.max(i);
                }
            }
        }
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        self.emitted.push_str(&out);
        (out, false)
    }

    /// The held-back text, at the end of generation.
    pub fn finish(&mut self) -> String {
        let out = std::mem::take(&mut self.pending);
        self.emitted.push_str(&out);
        out
    }
}

pub struct GenRequest<'a> {
    pub prompt: &'a [u32],
    pub max_new_tokens: usize,
    pub eos: &'a [u32],
    pub stops: Vec<String>,
    /// Images whose placeholder tokens `prompt` holds.
    pub images: Option<(&'a crate::images::Images, &'a crate::images::ImageTokens)>,
}

/// What the sampling loop steps: the engine (eager or compiled steps) or
/// the NPU host loop over exported graphs.
pub(crate) trait Decoder {
    /// The tokens the cache holds (the sampler's repetition history).
    fn history(&self) -> &[u32];
    /// Appends `token`; the logits after it, or None when it cannot take
    /// another token (generation then ends as if at the length limit).
    fn advance(&mut self, token: u32) -> CliResult<Option<Vec<f32>>>;
    /// An EOS token was sampled (it is not shown).
    fn eos(&mut self, _token: u32) -> CliResult<()> {
        Ok(())
    }
}

impl Decoder for Engine {
    fn history(&self) -> &[u32] {
        &self.seq.cached
    }

    /// A full cache ends the answer as the length limit would, rather
    /// than failing it: the text so far is kept.
    fn advance(&mut self, token: u32) -> CliResult<Option<Vec<f32>>> {
        if self.is_full() {
            return Ok(None);
        }
        self.step(token).map(Some)
    }

    /// Keeps the cache consistent with what a template will render next.
    fn eos(&mut self, token: u32) -> CliResult<()> {
        if self.is_full() {
            return Ok(());
        }
        self.step(token).map(|_| ())
    }
}

/// What the sampling loop produced.
pub(crate) struct Decoded {
    pub generated: Vec<u32>,
    pub text: String,
    pub reason: StopReason,
}

/// The sampling loop after a prompt whose last logits are `logits`:
/// sample, stop at EOS, stream text through the stop strings, step.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_loop(
    dec: &mut dyn Decoder,
    mut logits: Vec<f32>,
    sampler: &mut Sampler,
    max_new_tokens: usize,
    eos: &[u32],
    stops: Vec<String>,
    detok: &mut dyn FnMut(u32) -> CliResult<String>,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> CliResult<Decoded> {
    let mut filter = StopFilter::new(stops);
    let mut generated = vec![];
    let mut reason = StopReason::MaxTokens;
    while generated.len() < max_new_tokens {
        if interrupt.swap(false, Ordering::SeqCst) {
            reason = StopReason::Interrupted;
            break;
        }
        let token = sampler
            .sample(&logits, dec.history())
            .map_err(|e| CliError(format!("error: {e}")))?;
        if eos.contains(&token) {
            reason = StopReason::Eos;
            dec.eos(token)?;
            break;
        }
        generated.push(token);
        let (shown, stopped) = filter.push(&detok(token)?);
        out(&shown);
        if stopped {
            reason = StopReason::StopString;
            break;
        }
        if generated.len() == max_new_tokens {
            break;
        }
        match dec.advance(token)? {
            Some(next) => logits = next,
            None => break,
        }
    }
    if reason != StopReason::StopString {
        let rest = filter.finish();
        out(&rest);
    }
    Ok(Decoded {
        generated,
        text: filter.emitted,
        reason,
    })
}

/// Runs prompt + generation. `detok` turns each new token into a text chunk
/// (an incremental decoder that never splits a character); `out` receives
/// the text to show.
pub fn generate(
    engine: &mut Engine,
    sampler: &mut Sampler,
    req: GenRequest,
    detok: &mut dyn FnMut(u32) -> CliResult<String>,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> CliResult<GenStats> {
    let t0 = Instant::now();
    let logits = match req.images {
        Some((images, spec)) => engine.feed_images(req.prompt, images, spec)?,
        None => engine.feed(req.prompt)?,
    };
    let prompt_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let d = decode_loop(
        engine,
        logits,
        sampler,
        req.max_new_tokens,
        req.eos,
        req.stops,
        detok,
        out,
        interrupt,
    )?;
    Ok(GenStats {
        prompt_tokens: req.prompt.len(),
        prompt_computed: engine.seq.last_computed,
        prompt_secs,
        generated: d.generated,
        gen_secs: t1.elapsed().as_secs_f64(),
        text: d.text,
        reason: d.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::StopFilter;

    #[test]
    fn stop_strings_are_never_shown() {
        let mut f = StopFilter::new(vec!["<|end|>".into(), "\n\nUser:".into()]);
        let mut shown = String::new();
        let mut stopped = false;
        for chunk in ["Hello", " wor", "ld<|e", "nd|> tail"] {
            let (s, st) = f.push(chunk);
            shown.push_str(&s);
            if st {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
        assert_eq!(shown, "Hello world");
    }

    #[test]
    fn held_text_is_released_when_it_cannot_stop() {
        let mut f = StopFilter::new(vec!["<|end|>".into()]);
        let (a, _) = f.push("a <|e");
        assert_eq!(a, "a ");
        let (b, _) = f.push("xample");
        assert_eq!(b, "<|example");
        assert_eq!(f.finish(), "");
    }
}
