//! Qwen3.5's multi-token-prediction head as a proposer (`--spec-type
//! mtp`): the checkpoint's `mtp.*` layer, declared by the script
//! (`qwen3_5_base.Mtp`) and run through its `mtp_forward`, guesses token
//! `i + 2` from the target's final hidden state at `i` and token `i + 1`;
//! fed its own output and guess it guesses on (vLLM's qwen3_next_mtp).
//!
//! The head keeps its own KV cache of pairs, one per position: pair `i`
//! is (the target's hidden state at `i`, token `i + 1`). Each proposal
//! first drops the chained guesses of the last one and the pairs whose
//! token or hidden state changed (a rejected proposal, a rewound
//! conversation), computes the pairs the target added since (their hidden
//! states come with the target's steps: `Sequence::keep_hidden`), then
//! chains. Only the head's one layer and the model's output head run per
//! guess; the target's weights are read once per verification step.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::{SharedBackend, Tensor};
use mllm_interpreter::{CompiledModel, Eager, KvCache, Model, Value};

use super::{Proposer, SpecConfig, SpecType, TargetView};
use crate::hidden_rows::HiddenRows;
use crate::{Error, Result};

/// The function of the script that runs the head.
const ENTRY: &str = "mtp_forward";

/// Most rows of one captured call (a longer catch-up runs in pieces of
/// powers of two up to it).
const PIECE: usize = 32;

/// Hidden rows kept behind the last pair the head computed: a rewind
/// within them (a chat's next turn re-templating the end of the answer)
/// keeps the head's cache; an older one starts it over where they begin.
/// Bounds what the rows take (4 MB at hidden size 1024).
const KEEP_ROWS: usize = 1024;

pub struct MtpHead {
    exec: Eager<SharedBackend>,
    /// Captured graphs of the head (`MtpHead::compiled`); None: eager.
    compiled: Option<CompiledModel<SharedBackend>>,
    cache: Rc<RefCell<KvCache>>,
    /// The position of the first pair the cache holds.
    first: usize,
    /// The token of each pair the cache holds (`paired[k]` is token
    /// `first + k + 1`), chained guesses not included.
    paired: Vec<u32>,
}

impl MtpHead {
    /// The head of `model`, refused (with what to do) where its script or
    /// checkpoint has none.
    pub fn new(model: &Model) -> Result<MtpHead> {
        check_model(model)?;
        let mut exec = Eager::new(model.backend.clone());
        exec.emitted = Some(vec![]);
        Ok(MtpHead {
            exec,
            compiled: None,
            cache: Rc::new(RefCell::new(KvCache::new())),
            first: 0,
            paired: vec![],
        })
    }

    /// The head running as captured graphs (what `run`, `chat`, `bench` and
    /// `serve` use), its cache sized for `context` positions: the same
    /// bits as eager calls, without the interpreter's time per call.
    pub fn compiled(model: &Model, context: usize) -> Result<MtpHead> {
        let mut head = MtpHead::new(model)?;
        // Chained guesses run past the target's context by up to a step.
        let c = CompiledModel::new(model.backend.clone(), context + PIECE, PIECE);
        head.compiled = Some(c);
        Ok(head)
    }

    /// Up to `max` greedy guesses after `history` (the target's cached
    /// tokens and the one it chose last), from the target's hidden states
    /// `hidden` of its cached positions.
    pub fn propose(
        &mut self,
        model: &Model,
        hidden: &mut HiddenRows,
        history: &[u32],
        max: usize,
    ) -> Result<Vec<u32>> {
        let n = history.len();
        let changed = hidden.take_changed();
        if max == 0 || n < 2 {
            return Ok(vec![]);
        }
        // Pairs at positions `from..to` are computed now: every position the
        // target has cached (`to = n - 1`: the last one's pair is the chosen
        // token's).
        let to = n - 1;
        let mut keep = 0;
        while keep < self.paired.len() {
            let p = self.first + keep;
            if p >= changed || p + 1 >= n || self.paired[keep] != history[p + 1] {
                break;
            }
            keep += 1;
        }
        // Always compute at least the last pair: its output is the guess.
        keep = keep.min((to - self.first.min(to)).saturating_sub(1));
        let mut from = self.first + keep;
        if from < hidden.base() || from >= to {
            // The rows before `hidden.base()` are gone (adopted or rewound
            // positions): start the head's cache over where they begin.
            keep = 0;
            from = hidden.base().min(to - 1);
            self.first = from;
        }
        if hidden.end() < to || from < hidden.base() {
            // The target's steps did not keep their hidden states.
            return Ok(vec![]);
        }
        self.cache.borrow_mut().truncate(keep);
        self.paired.truncate(keep);
        let rows = hidden
            .range(from, to)
            .ok_or_else(|| Error::generate("the MTP head's hidden rows are out of range"))?;
        let h = Tensor::from_f32(rows.to_vec(), vec![to - from, hidden.width()])?;
        let ids = &history[from + 1..=to];
        let (mut logits, mut h) = self.step(model, ids, h, from)?;
        self.paired.extend_from_slice(ids);
        hidden.forget_before(to.saturating_sub(KEEP_ROWS));
        let mut out = vec![];
        while let Some(t) = argmax(&logits) {
            out.push(t);
            if out.len() == max {
                break;
            }
            (logits, h) = self.step(model, &[t], h, to + out.len() - 1)?;
        }
        Ok(out)
    }

    /// One call of the head: pairs of `ids` and hidden rows `h` at
    /// positions `start..`; the logits after the last and its output row.
    /// Through captured graphs where the head has them (pieces of at most
    /// `PIECE` rows: a bounded set of graphs), else eagerly.
    fn step(
        &mut self,
        model: &Model,
        ids: &[u32],
        h: Tensor,
        start: usize,
    ) -> Result<(Vec<f32>, Tensor)> {
        let err = |e: String| Error::generate(format!("the MTP head: {e}"));
        if let Some(c) = self.compiled.as_mut() {
            let ids32: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
            let width = h.shape().last().copied().unwrap_or(0);
            let rows = h.to_f32_vec()?;
            let (mut at, mut logits) = (0, None);
            while at < ids.len() {
                let end = at + mllm_interpreter::compile::piece(ids.len() - at, PIECE);
                let piece = Tensor::from_f32(
                    rows[at * width..end * width].to_vec(),
                    vec![end - at, width],
                )?;
                let mut kv = self.cache.borrow_mut();
                logits = Some(
                    c.call(model, ENTRY, &ids32[at..end], piece, start + at, &mut kv)
                        .map_err(err)?,
                );
                at = end;
            }
            let logits = logits.ok_or_else(|| err("no rows".into()))?;
            let side = std::mem::take(&mut c.emitted);
            return self.finish(model, logits, side);
        }
        let t = ids.len();
        let input = Tensor::from_i32(ids.iter().map(|&x| x as i32).collect(), vec![t])?;
        let pos: Vec<i32> = (start..start + t).map(|p| p as i32).collect();
        let positions = Tensor::from_i32(pos, vec![t])?;
        let out = model
            .call(
                ENTRY,
                &mut self.exec,
                vec![
                    ("input_ids", Value::Tensor(input)),
                    ("hidden", Value::Tensor(h)),
                    ("positions", Value::Tensor(positions)),
                    ("cache", Value::Cache(self.cache.clone())),
                ],
            )
            .map_err(|e| {
                let sources = &model.program.sources;
                Error::diagnostics(crate::ErrorKind::Generate, |c| e.render(sources, c))
            })?;
        let Value::Tensor(logits) = out else {
            return Err(err(format!(
                "the script's `{ENTRY}` returned {out:?}, not logits"
            )));
        };
        let side = self
            .exec
            .emitted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        self.finish(model, logits, side)
    }

    /// The logits on the host and the head's last output row (the side
    /// output `mtp_hidden` of the step's last call).
    fn finish(
        &self,
        model: &Model,
        logits: Tensor,
        side: Vec<(String, Tensor)>,
    ) -> Result<(Vec<f32>, Tensor)> {
        let h = side
            .into_iter()
            .filter(|(n, _)| n == "mtp_hidden")
            .map(|(_, t)| t)
            .next_back()
            .ok_or_else(|| {
                Error::generate(format!(
                    "the MTP head: the script's `{ENTRY}` emitted no `mtp_hidden`"
                ))
            })?;
        let logits = model.backend.download(&logits)?;
        Ok((logits.to_f32_vec()?, model.backend.download(&h)?))
    }

    /// Forgets the pairs (a new conversation).
    pub fn clear(&mut self) {
        self.cache.borrow_mut().truncate(0);
        self.first = 0;
        self.paired.clear();
    }
}

/// Refuses a model without an MTP head, saying why.
pub fn check_model(model: &Model) -> Result<()> {
    let m = &model.program.modules[model.entry];
    if m.fn_index(ENTRY).is_none() {
        return Err(Error::invalid(format!(
            "--spec-type mtp: the script's `{}` has no `{ENTRY}` (a multi-token-prediction head); Qwen3.5 checkpoints with `mtp.*` tensors have one, other models can use --spec-type ngram or draft",
            m.name
        )));
    }
    if !model.weights.iter().any(|(n, _)| n.starts_with("mtp.")) {
        return Err(Error::invalid(
            "--spec-type mtp: this checkpoint has no `mtp.*` tensors (its multi-token-prediction head was left out, as transformers' save_pretrained and GGUF files without nextn layers do); use --spec-type ngram, or draft with --model-draft",
        ));
    }
    Ok(())
}

/// The greedy guess of `logits` (None where it holds no number).
fn argmax(logits: &[f32]) -> Option<u32> {
    logits
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
}

impl Proposer for MtpHead {
    fn propose(&mut self, _history: &[u32], _max: usize, _cfg: &SpecConfig) -> Result<Vec<u32>> {
        Err(Error::generate(
            "the MTP head proposes from the target's hidden states (propose_with)",
        ))
    }

    fn propose_with(
        &mut self,
        target: TargetView,
        history: &[u32],
        max: usize,
        _cfg: &SpecConfig,
    ) -> Result<Vec<u32>> {
        let Some(hidden) = target.hidden else {
            return Ok(vec![]);
        };
        MtpHead::propose(self, target.model, hidden, history, max)
    }

    fn kind(&self) -> SpecType {
        SpecType::Mtp
    }

    /// The pairs of the prompt's positions (all but the last, whose token
    /// the answer's first step chooses); the one guess is dropped.
    fn prepare(&mut self, target: TargetView, prompt: &[u32]) -> Result<()> {
        if let Some(hidden) = target.hidden {
            MtpHead::propose(self, target.model, hidden, prompt, 1)?;
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.clear();
    }
}
