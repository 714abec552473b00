//! A loaded model with its KV cache, fed token ids; and the loop that
//! drives the generation core (`crate::generation`) over it for `run`,
//! `chat` and the embedding library.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use mllm_backends::Tensor;
use mllm_interpreter::{Executor, ForwardInputs, KvCache, Model, Value};

use crate::generation::{Generation, StopReason};
use crate::runner::Runner;
use crate::sequence::Sequence;

use crate::{Error, Result};

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
    pub fn set_kv_dtype(&mut self, dtype: mllm_backends::DType) -> Result<()> {
        self.seq.set_kv_dtype(dtype)
    }

    /// Every step eager, no captured graphs (`--eager`).
    pub fn eager(&mut self) {
        self.runner.eager_only();
    }

    /// Applies the step settings of `opts`: the KV cache's dtype, eager or
    /// compiled steps, and `check_numerics` (which needs eager steps: the
    /// interpreter sees each op and its script line).
    pub fn configure(&mut self, opts: &crate::model_files::LoadOptions) -> Result<()> {
        configure_runner(&mut self.runner, opts);
        self.set_kv_dtype(opts.kv.0)
    }

    /// Bytes the KV cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.seq.kv_bytes()
    }

    /// Keeps the final hidden state of each position the conversation
    /// computes (for an MTP head: `speculative::MtpHead`).
    pub fn keep_hidden(&mut self) {
        self.runner.keep_side_outputs();
        self.seq.keep_hidden();
    }

    /// Keeps each row's recurrent states of a speculative verification
    /// step, so that taking rejected rows back computes nothing again
    /// (`Sequence::keep_step_states`).
    pub fn keep_step_states(&mut self) {
        self.runner.keep_side_outputs();
        self.seq.keep_step_states();
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
    ) -> Result<Vec<f32>> {
        self.seq
            .feed_images(&mut self.runner, ids, images, spec, None)
    }

    /// Makes the cache hold exactly `ids`, reusing the longest prefix it
    /// already holds, and returns the logits after the last id.
    pub fn feed(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.seq.feed(&mut self.runner, ids)
    }

    /// Appends one token and returns the logits after it.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
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
) -> Result<Tensor> {
    let inputs = ForwardInputs::text(ids, start, cache.clone(), last_only)?;
    forward_logits(model, exec, inputs)
}

/// Runs the entry `forward` on `inputs`; the logits `[rows, vocab]` it must
/// return.
pub(crate) fn forward_logits(
    model: &Model,
    exec: &mut dyn Executor,
    inputs: ForwardInputs,
) -> Result<Tensor> {
    let out = model.run(exec, inputs).map_err(|e| {
        Error::diagnostics(crate::ErrorKind::Generate, |c| {
            e.render(&model.program.sources, c)
        })
    })?;
    match out {
        Value::Tensor(t) if t.rank() == 2 && t.shape()[0] >= 1 => Ok(t),
        other => Err(Error::generate(format!(
            "the script's forward returned {other:?}, expected logits [seq, vocab]"
        ))),
    }
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

/// What speculative decoding needs for one answer.
pub struct Speculation<'a> {
    pub proposer: &'a mut dyn crate::speculative::Proposer,
    pub config: crate::speculative::SpecConfig,
    pub stats: &'a mut crate::speculative::SpecStats,
}

pub struct GenRequest<'a> {
    pub prompt: &'a [u32],
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
    fn advance(&mut self, token: u32) -> Result<Option<Vec<f32>>>;
}

impl Decoder for Engine {
    fn history(&self) -> &[u32] {
        &self.seq.cached
    }

    /// A full cache ends the answer as the length limit would, rather
    /// than failing it: the text so far is kept.
    fn advance(&mut self, token: u32) -> Result<Option<Vec<f32>>> {
        if self.is_full() {
            return Ok(None);
        }
        self.step(token).map(Some)
    }
}

/// Drives `gen` after a prompt whose last logits are `logits`: one token
/// a step until it ends, `interrupt` is raised, or `dec` is full; `out`
/// receives the text to show.
pub(crate) fn decode_loop(
    dec: &mut dyn Decoder,
    mut logits: Vec<f32>,
    gen: &mut Generation,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> Result<StopReason> {
    loop {
        if interrupt.swap(false, Ordering::SeqCst) {
            return Ok(end(gen, StopReason::Interrupted, out));
        }
        let step = gen.next(&mut logits, dec.history())?;
        out(&step.text);
        let (Some(token), None) = (step.token, step.done) else {
            return Ok(step.done.unwrap_or(StopReason::MaxTokens));
        };
        match dec.advance(token)? {
            Some(next) => logits = next,
            None => return Ok(end(gen, StopReason::MaxTokens, out)),
        }
    }
}

/// Ends `gen` for `reason`, showing the text it held back.
fn end(gen: &mut Generation, reason: StopReason, out: &mut dyn FnMut(&str)) -> StopReason {
    let step = gen.finish(reason);
    out(&step.text);
    step.done.unwrap_or(reason)
}

/// Runs prompt + generation: the prompt through the engine's cache, then
/// `gen` one token a step; `out` receives the text to show.
pub fn generate(
    engine: &mut Engine,
    gen: &mut Generation,
    req: GenRequest,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> Result<GenStats> {
    generate_with(engine, gen, req, None, out, interrupt)
}

/// `generate` with speculative decoding when `spec` gives a proposer: the
/// same answer, fewer passes over the weights when the guesses are good;
/// what speculation did is added to `spec`'s stats.
pub fn generate_with(
    engine: &mut Engine,
    gen: &mut Generation,
    req: GenRequest,
    mut spec: Option<Speculation>,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> Result<GenStats> {
    let t0 = Instant::now();
    let logits = match req.images {
        Some((images, spec)) => engine.feed_images(req.prompt, images, spec)?,
        None => engine.feed(req.prompt)?,
    };
    if let Some(s) = spec.as_mut() {
        let target = crate::speculative::TargetView {
            model: &engine.runner.model,
            hidden: engine.seq.hidden.as_mut(),
        };
        s.proposer.prepare(target, req.prompt)?;
    }
    let prompt_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let reason = match spec {
        Some(s) => crate::speculative::decode_loop(engine, logits, gen, s, out, interrupt)?,
        None => decode_loop(engine, logits, gen, out, interrupt)?,
    };
    Ok(GenStats {
        prompt_tokens: req.prompt.len(),
        prompt_computed: engine.seq.last_computed,
        prompt_secs,
        generated: gen.generated().to_vec(),
        gen_secs: t1.elapsed().as_secs_f64(),
        text: gen.text().to_string(),
        reason,
    })
}
