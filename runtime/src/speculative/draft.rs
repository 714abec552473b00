//! A draft model: a smaller model with the target's vocabulary proposes
//! its greedy continuation, token by token, while it is confident (top
//! probability at least `--draft-p-min`), and then the token it was not
//! confident of when that is still likely (`--draft-p-last`). It keeps
//! its own cache, which follows the target's answer by prefix reuse: each
//! proposal starts by feeding the history, which keeps what the draft's
//! cache shares with it and computes only the rest (the token the target
//! chose, usually one; two after a kept last guess).
//!
//! Where the text repeats itself (a rewrite quoting its input), prompt
//! lookup guesses what the draft will choose next: the draft then computes
//! its token and the guesses after it in one step and keeps the guesses
//! it agrees with, one step for several tokens instead of one each. Its
//! proposals stay exactly the token-by-token ones; only its steps change.

use super::{NgramLookup, Proposer, SpecConfig, SpecType, TargetView};
use crate::runner::Runner;
use crate::sequence::Sequence;
use crate::{Error, Result};

/// The prompt lookup that hands a draft its guesses (see `draft_propose`):
/// only matches of 3-4 tokens. With 2 the draft's one-row steps became
/// many-row steps that it left at the first row more often than not:
/// SmolLM2-135M Q4_0 drafting for its F16 copy (docs/benchmarks.md),
/// `type_hints` 1.25x plain decode with 2 against 1.37-1.40x with 3 or 4.
const LOOKUP: NgramLookup = NgramLookup { max_n: 4, min_n: 3 };

/// Most lookup guesses a draft checks in one step: 7, so that with the
/// token before them the step is 8 rows, one tile of the int8 kernels
/// (qbench, the Q8_0 head 49152x576 at 2 threads: 0.7 ms for one row, 1.2
/// for 8, 1.9 for 9). SmolLM2-135M Q4_0 drafting for its F16 copy:
/// `rewrite` 2.00x plain decode with 4 guesses, 2.02-2.09x with 7,
/// 1.98-2.12x with 8 (runs of one hour).
const LOOKAHEAD: usize = 7;

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

/// The most likely token of `logits` (the first on ties, as greedy
/// decoding takes it) and its probability.
fn top(logits: &[f32]) -> Option<(u32, f32)> {
    let best = crate::generation::argmax(logits);
    let mx = *logits.get(best)?;
    if !mx.is_finite() {
        return None;
    }
    // Logits more than 40 below the top add at most vocab * e^-40 (2e-13
    // for 49152 tokens) to the sum: no probability a threshold can see.
    // NaN fails the comparison. `>=`: at a top of -1e30 the floor rounds
    // to the top itself, which must still count (with `>` the sum was
    // empty and p -inf).
    let sum = mllm_backends::cpu::exp_sum::exp_sum(logits, mx, mx - 40.0);
    Some((best as u32, (1.0 / sum) as f32))
}

/// The draft's greedy proposals after `history`, computed with `runner`
/// in `seq` (a draft cache that follows one conversation; a server keeps
/// one per slot beside one draft model).
pub fn draft_propose(
    runner: &mut Runner,
    seq: &mut Sequence,
    history: &[u32],
    max: usize,
    cfg: &SpecConfig,
) -> Result<Vec<u32>> {
    if max == 0 || history.is_empty() {
        return Ok(vec![]);
    }
    // Leave room for the proposals in the draft's own context.
    if let Some(m) = seq.max_context {
        if history.len() + max > m {
            return Ok(vec![]);
        }
    }
    let err = |e: Error| Error::generate(format!("the draft model: {}", e.message()));
    // Rows past where the draft leaves a lookup's guess are cut off its
    // cache, which a recurrent state cannot be: such drafts (and a first
    // feed, before the cache knows) step alone.
    let can_cut = |seq: &Sequence| !seq.cached.is_empty() && !seq.has_state();
    let mut prop = Proposal {
        out: vec![],
        text: history.to_vec(),
        max,
        cfg,
    };
    // What the draft lacks of the history (the target's last token,
    // usually), with the lookup's guesses after it where they fit a step.
    let todo = if can_cut(seq) {
        let start = seq.rewind_to(history).map_err(err)?;
        &history[start..]
    } else {
        history
    };
    // The guesses fill the step up to one int8 tile (LOOKAHEAD + 1 rows):
    // after a kept last guess the draft lacks two tokens, and a ninth row
    // made the step 1.3x an eight-row one (SmolLM2-135M Q4_0, 2 threads:
    // 7.3 vs 9.5 ms).
    let room = (LOOKAHEAD + 1).saturating_sub(todo.len());
    let guess = if room > 0 && can_cut(seq) {
        LOOKUP.lookup(history, max.min(room))
    } else {
        vec![]
    };
    let mut next = if guess.is_empty() {
        top(&seq.feed(runner, history).map_err(err)?)
    } else {
        seq.last_computed = todo.len();
        step_with_guesses(runner, seq, todo, &guess, &mut prop).map_err(err)?
    };
    // A recurrent draft cannot cut its proposals off its state: it goes
    // back to the history afterwards, and the next call computes what the
    // target kept.
    let checkpoint = seq.checkpoint();
    let lookup = can_cut(seq).then_some(LOOKUP);
    while let Some((t, p)) = next {
        if prop.out.len() == max {
            break;
        }
        if p < cfg.draft_p_min {
            // The last guess: its probability is known without a draft
            // step, so it costs only its row of the verification step.
            if p >= cfg.draft_p_last {
                prop.out.push(t);
            }
            break;
        }
        prop.out.push(t);
        prop.text.push(t);
        if prop.out.len() == max {
            break;
        }
        let guess = lookup.map_or(vec![], |l| {
            l.lookup(&prop.text, (max - prop.out.len()).min(LOOKAHEAD))
        });
        next = if guess.is_empty() {
            top(&seq.step(runner, t).map_err(err)?)
        } else {
            step_with_guesses(runner, seq, &[t], &guess, &mut prop).map_err(err)?
        };
    }
    if let Some(cp) = checkpoint {
        seq.restore(cp).map_err(err)?;
    }
    Ok(prop.out)
}

/// A draft's proposal in the making: its tokens so far (`out`; `text` is
/// the history and them).
struct Proposal<'a> {
    out: Vec<u32>,
    text: Vec<u32>,
    max: usize,
    cfg: &'a SpecConfig,
}

/// Computes `ids` (what the draft's cache lacks of the text: the history's
/// last tokens, or the token just proposed) and the lookup's `guess`es
/// after them in one step. Each row has the bits a one-token step gives
/// it, so the draft chooses what it would have chosen token by token:
/// every guess it agrees with (and is sure of) joins the proposal without
/// a step of its own. The cache is cut after the last token kept; returns
/// the draft's top after it.
fn step_with_guesses(
    runner: &mut Runner,
    seq: &mut Sequence,
    ids: &[u32],
    guess: &[u32],
    prop: &mut Proposal,
) -> Result<Option<(u32, f32)>> {
    let held = seq.cached.len();
    let rows = seq.extend_rows(runner, &[ids, guess].concat())?;
    let at = |kept: usize| (ids.len() + kept).checked_sub(1).and_then(|i| rows.get(i));
    let mut kept = 0;
    let mut next = at(0).and_then(|r| top(r));
    while let (Some(&g), Some((u, q))) = (guess.get(kept), next) {
        if u != g || q < prop.cfg.draft_p_min || prop.out.len() == prop.max {
            break;
        }
        prop.out.push(u);
        prop.text.push(u);
        kept += 1;
        next = at(kept).and_then(|r| top(r));
    }
    seq.truncate(held + ids.len() + kept)?;
    Ok(next)
}

/// Computes `prompt` into the draft's cache `seq` (what it shares with
/// the cache already is kept), so that proposing after it computes only
/// the tokens the target adds. A prompt that leaves the draft no room is
/// left for `draft_propose` to refuse.
pub fn draft_prefill(runner: &mut Runner, seq: &mut Sequence, prompt: &[u32]) -> Result<()> {
    if prompt.is_empty() || seq.max_context.is_some_and(|m| prompt.len() >= m) {
        return Ok(());
    }
    seq.feed(runner, prompt)
        .map(|_| ())
        .map_err(|e| Error::generate(format!("the draft model: {}", e.message())))
}

impl Proposer for DraftModel {
    fn propose(&mut self, history: &[u32], max: usize, cfg: &SpecConfig) -> Result<Vec<u32>> {
        draft_propose(&mut self.runner, &mut self.seq, history, max, cfg)
    }

    fn kind(&self) -> SpecType {
        SpecType::Draft
    }

    fn prepare(&mut self, _target: TargetView, prompt: &[u32]) -> Result<()> {
        draft_prefill(&mut self.runner, &mut self.seq, prompt)
    }

    fn reset(&mut self) {
        self.seq.reset();
    }

    fn model_steps(&self) -> usize {
        self.seq.steps
    }
}

/// Opens `path` as the draft for `target` (same options, own cache of
/// `context` tokens): refused unless its tokenizer is the target's,
/// token for token, since proposals are token ids.
pub fn load_draft(
    path: &str,
    target: &crate::model_files::ModelFiles,
    opts: crate::model_files::LoadOptions,
    context: Option<usize>,
) -> Result<DraftModel> {
    let files = crate::model_files::open_with(path, opts)
        .map_err(|e| e.context(format_args!("the draft model {path}")))?;
    same_vocabulary(target.tokenizer()?, files.tokenizer()?, path)?;
    let model = crate::model_files::load_model(&files, None)
        .map_err(|e| e.context(format_args!("the draft model {path}")))?;
    let mut runner = Runner::new(model);
    runner.compile_default(context.unwrap_or(crate::model_files::DEFAULT_CONTEXT));
    runner.few_rows_as_graphs();
    crate::engine::configure_runner(&mut runner, &opts);
    let mut draft = DraftModel::new(runner, context.or(files.max_context()));
    draft
        .seq
        .set_kv_dtype(opts.kv.0)
        .map_err(|e| e.context("the draft model"))?;
    Ok(draft)
}

/// Whether two tokenizers give every id the same token (the first that
/// differs is named).
pub fn same_vocabulary(
    target: &mllm_converter::tokenizer::Tokenizer,
    draft: &mllm_converter::tokenizer::Tokenizer,
    path: &str,
) -> Result<()> {
    let (a, b) = (target.vocab_size(), draft.vocab_size());
    if a != b {
        return Err(Error::invalid(format!(
            "the draft model {path} has a vocabulary of {b} tokens and the model {a}: a draft must share the model's tokenizer (e.g. a smaller model of the same family, or a requantized copy)"
        )));
    }
    for id in 0..a as u32 {
        let (x, y) = (target.id_to_token(id), draft.id_to_token(id));
        if x != y {
            return Err(Error::invalid(format!(
                "the draft model {path} calls token {id} {y:?} and the model {x:?}: a draft must share the model's tokenizer"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::top;
    use proptest::prelude::*;

    /// The top probability over every logit, as `top` took it before it
    /// skipped the far ones.
    fn full(logits: &[f32]) -> f64 {
        let mx = logits
            .iter()
            .filter(|v| !v.is_nan())
            .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let sum: f64 = logits
            .iter()
            .filter(|v| !v.is_nan())
            .map(|&v| ((v - mx) as f64).exp())
            .sum();
        1.0 / sum
    }

    proptest! {
        #[test]
        fn top_is_the_full_softmax_maximum(
            mut logits in proptest::collection::vec(-80.0f32..30.0, 1..3000),
            holes in proptest::collection::vec((0usize..3000, 0u8..3), 0..8),
        ) {
            for (at, kind) in holes {
                let n = logits.len();
                logits[at % n] = [f32::NAN, f32::NEG_INFINITY, -1e30][kind as usize];
            }
            let Some((best, p)) = top(&logits) else {
                prop_assert!(!logits.iter().any(|v| v.is_finite()));
                return Ok(());
            };
            let mx = logits.iter().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            prop_assert_eq!(logits[best as usize], mx);
            prop_assert_eq!(Some(best as usize), logits.iter().position(|&v| v == mx));
            let want = full(&logits);
            prop_assert!(((p as f64) - want).abs() <= 1e-6 * want, "{} vs {}", p, want);
        }
    }

    #[test]
    fn nothing_finite_has_no_top() {
        assert_eq!(top(&[f32::NAN, f32::NAN]), None);
        assert_eq!(top(&[f32::NEG_INFINITY]), None);
        assert_eq!(top(&[]), None);
    }
}
