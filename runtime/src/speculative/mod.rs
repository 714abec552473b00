//! Speculative decoding: a proposer guesses the next tokens, the target
//! model computes the logits after each guess in one step (one pass over
//! its weights for all of them), and the generation core keeps exactly
//! the tokens it would have chosen one at a time (`Generation::verify`):
//! the answer is the one plain decoding gives, token for token, at any
//! temperature and seed.
//!
//! Why that is exact: the CPU kernels give every row of a step the bits a
//! one-row step gives it (`mllm_backends::cpu::ROW_INVARIANT_STEP`), and
//! `verify` samples each row with the same sampler state plain decoding
//! would have, stopping at the first token that differs from the proposal
//! (that token, drawn from the target's own distribution, is kept). With
//! proposals that do not depend on chance (n-gram lookup, a draft model's
//! greedy choices) this is also what speculative sampling (Leviathan et
//! al. 2023, Chen et al. 2023) reduces to: accepting proposal `x` with
//! probability `min(1, p(x) / q(x))` for `q` a point mass is accepting it
//! with probability `p(x)`, and the residual `max(0, p - q)` normalised is
//! `p` without `x`, which is what drawing from `p` until it differs gives.
//!
//! Proposers: `ngram` (prompt lookup: the continuation of the latest
//! earlier occurrence of the text's last few tokens, no second model; a
//! server adds an `NgramCache` of what its earlier conversations said),
//! `draft` (a smaller model with the same vocabulary and its own cache)
//! and `mtp` (Qwen3.5's multi-token-prediction head, from the target's
//! hidden states).

mod draft;
mod mtp;
mod ngram;
mod ngram_cache;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};

pub use draft::{draft_prefill, draft_propose, load_draft, same_vocabulary, DraftModel};
/// Most rows a step may hold and still give each row a one-row step's bits.
pub use mllm_backends::cpu::ROW_INVARIANT_STEP;
pub use mtp::{check_model as check_mtp, MtpHead};
pub use ngram::NgramLookup;
pub use ngram_cache::NgramCache;

use crate::engine::Engine;
use crate::generation::{Generation, StopReason};
use crate::{Error, Result};

/// Which proposer guesses (`--spec-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecType {
    /// Prompt lookup over the conversation so far.
    Ngram,
    /// A second, smaller model (`--model-draft`).
    Draft,
    /// The model's own multi-token-prediction head (Qwen3.5's `mtp.*`).
    Mtp,
}

impl SpecType {
    pub fn parse(s: &str) -> Result<SpecType> {
        match s {
            "ngram" => Ok(SpecType::Ngram),
            "draft" => Ok(SpecType::Draft),
            "mtp" => Ok(SpecType::Mtp),
            other => Err(Error::invalid(format!(
                "unknown --spec-type `{other}`: use ngram, draft or mtp"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SpecType::Ngram => "ngram",
            SpecType::Draft => "draft",
            SpecType::Mtp => "mtp",
        }
    }
}

/// How much to propose (llama.cpp's flag names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpecConfig {
    /// Most tokens proposed per step (`--draft-max`, 16).
    pub draft_max: usize,
    /// Fewer proposals than this are not verified: the step decodes one
    /// token instead (`--draft-min`, 0).
    pub draft_min: usize,
    /// A draft model stops proposing at a token it gives less than this
    /// probability (`--draft-p-min`, 0.5). Measured on SmolLM2-135M F16
    /// with its Q4_0 copy as draft (docs/benchmarks.md), 0.5 beat 0.75
    /// (llama.cpp's old default: every guess kept, 2.1-2.4 tokens a step,
    /// the draft stopping where it would still have been right), 0.6, 0.4,
    /// 0.3 and 0 on all three quoting prompts (1.06-1.48x plain decode
    /// against 1.04-1.14x at 0.75); a threshold that adapted to the
    /// target's verdicts did not beat it.
    pub draft_p_min: f32,
    /// The token a draft model gives less than `draft_p_min` ends its
    /// proposal but is still proposed, as its last, when the draft gives it
    /// at least this probability (`--draft-p-last`, 0.1): the draft
    /// computed its probability already, so the guess costs one more row
    /// of the verification step and no draft step, and the target keeps it
    /// about as often as the draft believes it. On SmolLM2-135M F16 with
    /// its Q4_0 copy as draft (docs/benchmarks.md) 0.1 raised the tokens
    /// per step on all three quoting prompts (5.28 -> 5.59, 3.17 -> 3.52,
    /// 2.44 -> 2.79).
    pub draft_p_last: f32,
}

impl SpecConfig {
    pub const DEFAULT: SpecConfig = SpecConfig {
        draft_max: 16,
        draft_min: 0,
        draft_p_min: 0.5,
        draft_p_last: 0.1,
    };

    /// The settings checked: a verification step holds `draft_max + 1`
    /// rows, which must stay row-invariant.
    pub fn checked(self) -> Result<SpecConfig> {
        let most = mllm_backends::cpu::ROW_INVARIANT_STEP - 1;
        if self.draft_max == 0 || self.draft_max > most {
            return Err(Error::invalid(format!(
                "--draft-max {} is out of range: 1 to {most} proposed tokens per step",
                self.draft_max
            )));
        }
        if self.draft_min > self.draft_max {
            return Err(Error::invalid(format!(
                "--draft-min {} is more than --draft-max {}",
                self.draft_min, self.draft_max
            )));
        }
        for (flag, p) in [
            ("--draft-p-min", self.draft_p_min),
            ("--draft-p-last", self.draft_p_last),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::invalid(format!(
                    "{flag} {p} is not a probability (0 to 1)"
                )));
            }
        }
        Ok(self)
    }
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig::DEFAULT
    }
}

/// What `--spec-type` and its flags ask for, checked, before any model is
/// loaded (`run`, `chat` and `bench` build a `Speculator` from it, `serve`
/// a speculation per model).
#[derive(Clone, Debug, PartialEq)]
pub struct SpecSettings {
    pub kind: SpecType,
    pub config: SpecConfig,
    /// `--model-draft`: the draft model's path (`draft` only).
    pub draft: Option<String>,
}

impl SpecSettings {
    /// `--spec-type` (None: `draft` when a draft is given) with its
    /// settings; None when neither flag asks for speculation.
    pub fn from_flags(
        spec_type: Option<&str>,
        draft: Option<&str>,
        config: SpecConfig,
        backend: &crate::model_files::Backend,
    ) -> Result<Option<SpecSettings>> {
        let kind = match (spec_type, draft) {
            (None, None) => return Ok(None),
            (Some(t), _) => SpecType::parse(t)?,
            (None, Some(_)) => SpecType::Draft,
        };
        check_backend(backend)?;
        match (kind, draft) {
            (SpecType::Ngram | SpecType::Mtp, Some(_)) => {
                return Err(Error::invalid(format!(
                    "--model-draft is for --spec-type draft; --spec-type {} needs no second model",
                    kind.name()
                )))
            }
            (SpecType::Draft, None) => {
                return Err(Error::invalid(
                    "--spec-type draft needs --model-draft PATH (a smaller model with the same tokenizer)",
                ))
            }
            _ => {}
        }
        Ok(Some(SpecSettings {
            kind,
            config: config.checked()?,
            draft: draft.map(str::to_string),
        }))
    }

    /// How a log line names the settings.
    pub fn describe(&self) -> String {
        match (&self.draft, self.kind) {
            (Some(d), _) => format!(
                "draft {d} (draft-max {}, p-min {})",
                self.config.draft_max, self.config.draft_p_min
            ),
            (None, k) => format!("{} (draft-max {})", k.name(), self.config.draft_max),
        }
    }
}

/// The proposal budget after a step that verified `proposed` tokens and
/// kept `accepted`: what was accepted plus one after a rejection, doubled
/// (up to `draft_max`) after a step that kept everything. A rejected row
/// costs compute (a step of k + 1 rows is not free once the weights are
/// read), so guesses that keep failing shrink to one, while a run of right
/// guesses grows to `draft_max`. A draft model gauges each guess itself
/// (`--draft-p-min`), so its budget stays `draft_max`: a short proposal
/// cut its next one short too while the draft was sure of more (SmolLM2
/// F16 with its Q4_0 copy, docs/benchmarks.md: tokens per step 5.59 ->
/// 6.79, 3.52 -> 3.65 and 2.79 -> 3.39 on the three quoting prompts).
pub fn next_budget(
    kind: SpecType,
    budget: usize,
    proposed: usize,
    accepted: usize,
    draft_max: usize,
) -> usize {
    if kind == SpecType::Draft {
        draft_max
    } else if proposed == 0 {
        budget
    } else if accepted == proposed {
        (budget * 2).clamp(1, draft_max)
    } else {
        accepted + 1
    }
}

/// What the target offers a proposer besides the text: its model (whose
/// own head `mtp` runs) and the final hidden states of its cached
/// positions (where the sequence keeps them).
pub struct TargetView<'a> {
    pub model: &'a mllm_interpreter::Model,
    pub hidden: Option<&'a mut crate::hidden_rows::HiddenRows>,
}

/// What guesses the next tokens.
pub trait Proposer {
    /// Up to `max` tokens likely to follow `history` (the prompt and the
    /// answer so far, the last token not yet computed by the target).
    fn propose(&mut self, history: &[u32], max: usize, cfg: &SpecConfig) -> Result<Vec<u32>>;
    /// `propose` with the target at hand (what the generation loop calls;
    /// a proposer that reads the target's hidden states overrides it).
    fn propose_with(
        &mut self,
        target: TargetView,
        history: &[u32],
        max: usize,
        cfg: &SpecConfig,
    ) -> Result<Vec<u32>> {
        let _ = target;
        self.propose(history, max, cfg)
    }
    fn kind(&self) -> SpecType;
    /// Reads the prompt before the answer's first step, as part of the
    /// prompt's work: a draft model computes it into its own cache (as
    /// `llama-speculative` encodes the prompt with both models before its
    /// decode timer starts), so the first proposal computes one token, not
    /// the whole prompt inside the answer's time; the MTP head computes
    /// its pairs of the prompt's positions.
    fn prepare(&mut self, target: TargetView, prompt: &[u32]) -> Result<()> {
        let _ = (target, prompt);
        Ok(())
    }
    /// Forgets what it keeps between answers (a draft model's cache).
    fn reset(&mut self) {}
    /// Forward passes its own model has run so far (a draft model's steps,
    /// of any number of rows; lookup has no model).
    fn model_steps(&self) -> usize {
        0
    }
}

/// What speculation did in one answer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecStats {
    /// Target steps run (each verifies its proposals).
    pub steps: usize,
    /// Tokens proposed, and how many of them the target kept.
    pub proposed: usize,
    pub accepted: usize,
    /// Forward passes of a draft model (`Proposer::model_steps`): one per
    /// proposed token but the last, fewer where it checked a lookup's
    /// guesses in one step, and one per target step for what it lacks.
    pub draft_steps: usize,
}

impl SpecStats {
    /// Accepted / proposed (0 when nothing was proposed).
    pub fn acceptance(&self) -> f64 {
        if self.proposed == 0 {
            0.0
        } else {
            self.accepted as f64 / self.proposed as f64
        }
    }

    /// Tokens per target step (1 without speculation).
    pub fn tokens_per_step(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            (self.steps + self.accepted) as f64 / self.steps as f64
        }
    }

    pub fn add(&mut self, o: &SpecStats) {
        self.steps += o.steps;
        self.proposed += o.proposed;
        self.accepted += o.accepted;
        self.draft_steps += o.draft_steps;
    }

    pub fn summary(&self) -> String {
        format!(
            "speculation: {} steps, {} proposed, {} accepted ({:.1}%), {:.2} tokens per step{}",
            self.steps,
            self.proposed,
            self.accepted,
            100.0 * self.acceptance(),
            self.tokens_per_step(),
            self.draft_summary()
        )
    }

    /// `, N draft steps per step` where a draft model ran (else empty).
    pub fn draft_summary(&self) -> String {
        if self.draft_steps == 0 || self.steps == 0 {
            return String::new();
        }
        let per = self.draft_steps as f64 / self.steps as f64;
        format!(", {per:.2} draft steps per step")
    }
}

/// A proposer with its settings and what it did: what `run`, `chat` and
/// `bench` keep across answers.
pub struct Speculator {
    pub proposer: Box<dyn Proposer>,
    pub config: SpecConfig,
    pub stats: SpecStats,
}

impl Speculator {
    /// `kind`'s proposer (`draft` needs `draft`: `load_draft`).
    pub fn new(
        kind: SpecType,
        config: SpecConfig,
        draft: Option<DraftModel>,
    ) -> Result<Speculator> {
        let config = config.checked()?;
        let proposer: Box<dyn Proposer> = match (kind, draft) {
            (SpecType::Ngram, _) => Box::new(NgramLookup::default()),
            (SpecType::Draft, Some(d)) => Box::new(d),
            (SpecType::Draft, None) => {
                return Err(Error::invalid(
                    "--spec-type draft needs --model-draft PATH (a smaller model with the same tokenizer)",
                ))
            }
            (SpecType::Mtp, _) => {
                return Err(Error::invalid(
                    "--spec-type mtp takes the model's own head: build it with Speculator::mtp",
                ))
            }
        };
        Ok(Speculator {
            proposer,
            config,
            stats: SpecStats::default(),
        })
    }

    /// The MTP head of the target (`MtpHead::new` of its model); the
    /// target's runner and sequence must keep hidden states
    /// (`Engine::keep_hidden`).
    pub fn mtp(config: SpecConfig, head: MtpHead) -> Result<Speculator> {
        Ok(Speculator {
            proposer: Box::new(head),
            config: config.checked()?,
            stats: SpecStats::default(),
        })
    }

    /// What one answer's generation takes (`engine::generate_with`).
    pub fn speculation(&mut self) -> crate::engine::Speculation<'_> {
        crate::engine::Speculation {
            proposer: self.proposer.as_mut(),
            config: self.config,
            stats: &mut self.stats,
        }
    }
}

/// Refuses a backend whose kernels do not promise row invariance: a
/// verification step's rows could then differ from one-token steps in the
/// last bits, and an answer could change.
pub fn check_backend(backend: &crate::model_files::Backend) -> Result<()> {
    if !matches!(backend, crate::model_files::Backend::Cpu) {
        return Err(Error::invalid(
            "--spec-type runs on the CPU backend for now: the OpenCL kernels do not yet give a row of a many-row step the bits a one-row step gives, so speculation could change an answer",
        ));
    }
    Ok(())
}

/// Drives `gen` after a prompt whose last logits are `logits`, verifying
/// `proposer`'s guesses: each target step computes the pending token and
/// the proposals after it, keeps what `gen` accepts and drops the rest of
/// the cache. Ends as the plain loop does (`engine::decode_loop`).
pub(crate) fn decode_loop(
    engine: &mut Engine,
    mut logits: Vec<f32>,
    gen: &mut Generation,
    spec: crate::engine::Speculation,
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> Result<StopReason> {
    let crate::engine::Speculation {
        proposer,
        config: cfg,
        stats,
    } = spec;
    let step = gen.next(&mut logits, &engine.seq.cached)?;
    out(&step.text);
    let (Some(mut pending), None) = (step.token, step.done) else {
        return Ok(step.done.unwrap_or(StopReason::MaxTokens));
    };
    // Proposals the next step verifies at most (`next_budget`).
    let mut budget = cfg.draft_max;
    loop {
        if interrupt.swap(false, Ordering::SeqCst) {
            return Ok(end(gen, StopReason::Interrupted, out));
        }
        let held = engine.seq.cached.len();
        let room = engine
            .max_context()
            .map_or(usize::MAX, |m| m.saturating_sub(held));
        if room == 0 {
            // A full cache ends the answer as the length limit would.
            return Ok(end(gen, StopReason::MaxTokens, out));
        }
        let mut history = engine.seq.cached.clone();
        history.push(pending);
        // A step emits at most one token more than it proposed.
        let max = budget.min(room - 1).min(gen.remaining().saturating_sub(1));
        let mut proposed = if max > 0 {
            let target = TargetView {
                model: &engine.runner.model,
                hidden: engine.seq.hidden.as_mut(),
            };
            let before = proposer.model_steps();
            let proposed = proposer.propose_with(target, &history, max, &cfg)?;
            stats.draft_steps += proposer.model_steps().saturating_sub(before);
            proposed
        } else {
            vec![]
        };
        proposed.truncate(max);
        if proposed.len() < cfg.draft_min {
            proposed.clear();
        }
        let mut ids = Vec::with_capacity(proposed.len() + 1);
        ids.push(pending);
        ids.extend_from_slice(&proposed);
        // A recurrent layer's state would keep the rejected proposals:
        // remember it before the step (see `Sequence::take_back`).
        let checkpoint = if proposed.is_empty() {
            None
        } else {
            engine.seq.checkpoint()
        };
        let mut rows = engine.seq.extend_rows(&mut engine.runner, &ids)?;
        let steps = gen.verify(&proposed, &mut rows, &history)?;
        let accepted = steps
            .iter()
            .zip(&proposed)
            .take_while(|(s, &p)| s.token == Some(p))
            .count();
        stats.steps += 1;
        stats.proposed += proposed.len();
        stats.accepted += accepted;
        budget = next_budget(
            proposer.kind(),
            budget,
            proposed.len(),
            accepted,
            cfg.draft_max,
        );
        for s in &steps {
            out(&s.text);
        }
        // The cache keeps the pending token and the accepted proposals.
        engine
            .seq
            .take_back(&mut engine.runner, checkpoint, history.len() + accepted)?;
        let last = steps
            .last()
            .ok_or_else(|| Error::generate("verification chose no token"))?;
        if let Some(reason) = last.done {
            return Ok(reason);
        }
        pending = last
            .token
            .ok_or_else(|| Error::generate("verification ended without a token"))?;
    }
}

/// Ends `gen` for `reason`, showing the text it held back.
fn end(gen: &mut Generation, reason: StopReason, out: &mut dyn FnMut(&str)) -> StopReason {
    let step = gen.finish(reason);
    out(&step.text);
    step.done.unwrap_or(reason)
}
