//! Speculative decoding in the server (`serve --spec-type`): each decoding
//! slot proposes tokens after the one it just chose, every busy slot's
//! rows (its token and its proposals) are computed in one batched step,
//! and each slot's generation core keeps exactly what one-token decoding
//! would have chosen (`slot::Active::verify`). Answers are unchanged,
//! greedy or sampled, alone or beside other requests.
//!
//! Proposers: `ngram` looks up the slot's own conversation first, then an
//! `NgramCache` of what the model's earlier conversations said (shared by
//! its slots); `draft` runs one draft model with a cache per slot; `mtp`
//! runs the model's own head with a cache per slot, from the hidden
//! states each slot's sequence keeps.

use mllm_runtime::model_files::{LoadOptions, ModelFiles};
use mllm_runtime::speculative::{
    self as spec, MtpHead, NgramCache, NgramLookup, SpecConfig, SpecSettings, SpecType, TargetView,
};
use mllm_runtime::{Runner, Sequence};

use crate::api::error::engine_message;

/// Keys the shared n-gram cache holds per slot of context (bounded: at
/// most this many per token a slot can hold, all slots together).
const SHARED_KEYS_PER_TOKEN: usize = 4;

pub(super) struct Speculation {
    pub config: SpecConfig,
    kind: SpecType,
    lookup: NgramLookup,
    shared: NgramCache,
    /// The draft model and one draft cache per slot.
    draft: Option<(Runner, Vec<Sequence>)>,
    /// The model's MTP head, one per slot (its own cache each).
    mtp: Vec<MtpHead>,
    /// The draft's forward passes not yet counted in the metrics.
    draft_steps: usize,
}

impl Speculation {
    /// Which proposer guesses.
    pub(super) fn kind(&self) -> SpecType {
        self.kind
    }

    /// What `settings` asks for, beside the model of `files` with `slots`
    /// slots of `context` tokens.
    /// `mtp` needs `target`'s runner and `seqs` (the slots' sequences) to
    /// keep hidden states: this makes them.
    pub fn load(
        settings: &SpecSettings,
        files: &ModelFiles,
        load: LoadOptions,
        target: &mut Runner,
        seqs: &mut [&mut Sequence],
        context: usize,
    ) -> Result<Speculation, String> {
        let slots = seqs.len();
        let mut mtp = vec![];
        // Each row's recurrent states: a rejection then computes nothing
        // again (`Sequence::keep_step_states`).
        target.keep_side_outputs();
        for seq in seqs.iter_mut() {
            seq.keep_step_states();
            if settings.kind == SpecType::Mtp {
                let head = MtpHead::compiled(&target.model, context);
                mtp.push(head.map_err(|e| engine_message(&e))?);
                seq.keep_hidden();
            }
        }
        let draft = match &settings.draft {
            Some(path) => {
                let d = spec::load_draft(path, files, load, Some(context))
                    .map_err(|e| engine_message(&e))?;
                let mut seqs = vec![];
                for _ in 0..slots {
                    let mut s = Sequence::new(Some(context));
                    s.set_kv_dtype(load.kv.0).map_err(|e| engine_message(&e))?;
                    seqs.push(s);
                }
                Some((d.runner, seqs))
            }
            None => None,
        };
        Ok(Speculation {
            config: settings.config,
            kind: settings.kind,
            lookup: NgramLookup::default(),
            shared: NgramCache::new(
                settings.config.draft_max,
                SHARED_KEYS_PER_TOKEN * context * slots.max(1),
            ),
            draft,
            mtp,
            draft_steps: 0,
        })
    }

    /// The draft model's forward passes since the last call.
    pub fn take_draft_steps(&mut self) -> usize {
        std::mem::take(&mut self.draft_steps)
    }

    /// Up to `max` tokens likely to follow `history` in slot `slot`
    /// (`target`: the model and the slot's hidden states, for `mtp`).
    pub fn propose(
        &mut self,
        slot: usize,
        history: &[u32],
        max: usize,
        target: TargetView,
    ) -> Result<Vec<u32>, String> {
        if max == 0 {
            return Ok(vec![]);
        }
        let mut out = match (self.kind, self.draft.as_mut()) {
            (SpecType::Mtp, _) => {
                let head = self
                    .mtp
                    .get_mut(slot)
                    .ok_or_else(|| format!("no MTP cache for slot {slot}"))?;
                match target.hidden {
                    Some(hidden) => head
                        .propose(target.model, hidden, history, max)
                        .map_err(|e| engine_message(&e))?,
                    None => vec![],
                }
            }
            (SpecType::Draft, Some((runner, seqs))) => {
                let seq = seqs
                    .get_mut(slot)
                    .ok_or_else(|| format!("no draft cache for slot {slot}"))?;
                let before = seq.steps;
                let out = spec::draft_propose(runner, seq, history, max, &self.config)
                    .map_err(|e| engine_message(&e))?;
                self.draft_steps += seq.steps.saturating_sub(before);
                out
            }
            _ => {
                let own = self.lookup.lookup(history, max);
                if own.is_empty() {
                    self.shared.lookup(history, max)
                } else {
                    own
                }
            }
        };
        out.truncate(max);
        if out.len() < self.config.draft_min {
            out.clear();
        }
        Ok(out)
    }

    /// Computes what slot `slot`'s sequence now holds (`cached`: its prompt
    /// so far) into the slot's draft cache, beside the target's prompt
    /// chunk: the draft's first proposal then computes only the token the
    /// target added, instead of the whole prompt inside a batched decode
    /// step that every busy slot waits on. A no-op for other proposers.
    pub fn prefill(&mut self, slot: usize, cached: &[u32]) -> Result<(), String> {
        let Some((runner, seqs)) = self.draft.as_mut() else {
            return Ok(());
        };
        let seq = seqs
            .get_mut(slot)
            .ok_or_else(|| format!("no draft cache for slot {slot}"))?;
        spec::draft_prefill(runner, seq, cached).map_err(|e| engine_message(&e))
    }

    /// Remembers a finished conversation (prompt and answer) for the
    /// slots' later lookups.
    pub fn learn(&mut self, tokens: &[u32]) {
        if self.kind == SpecType::Ngram {
            self.shared.learn(tokens);
        }
    }
}

/// Shrinks proposals, longest first, until one step holds every slot's
/// token and proposals within `ROW_INVARIANT_STEP` rows (beyond, rows
/// would run as a second step: another pass over the weights).
pub(super) fn fit_rows(proposals: &mut [Vec<u32>]) {
    let most = spec::ROW_INVARIANT_STEP;
    let mut rows: usize = proposals.iter().map(|p| p.len() + 1).sum();
    while rows > most {
        let Some(longest) = proposals
            .iter_mut()
            .filter(|p| !p.is_empty())
            .max_by_key(|p| p.len())
        else {
            break;
        };
        longest.pop();
        rows -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prefill` computes a slot's prompt chunks into its draft cache, so
    /// the first proposal after the prompt computes only the new token.
    #[test]
    fn a_draft_computes_the_prompt_beside_the_target() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/qwen3_5_vl/dense"
        );
        let load = LoadOptions::default();
        let files = mllm_runtime::model_files::open_with(path, load).expect("fixture");
        let model = mllm_runtime::model_files::load_model(&files, None).expect("model");
        let mut target = Runner::new(model);
        let mut seq = Sequence::new(Some(64));
        let settings = SpecSettings {
            kind: SpecType::Draft,
            // A draft that proposes nothing: its feed of the history is
            // all that runs.
            config: SpecConfig {
                draft_p_min: 2.0,
                draft_p_last: 2.0,
                ..SpecConfig::DEFAULT
            },
            draft: Some(path.to_string()),
        };
        let mut spec = Speculation::load(&settings, &files, load, &mut target, &mut [&mut seq], 64)
            .expect("speculation");
        let prompt: Vec<u32> = (1..=12).collect();
        let draft = |s: &Speculation| s.draft.as_ref().map(|(_, seqs)| seqs[0].cached.clone());
        spec.prefill(0, &prompt[..5]).expect("first chunk");
        assert_eq!(draft(&spec), Some(prompt[..5].to_vec()));
        spec.prefill(0, &prompt).expect("second chunk");
        assert_eq!(draft(&spec), Some(prompt.clone()));
        let mut history = prompt.clone();
        history.push(40);
        let target_view = TargetView {
            model: &target.model,
            hidden: None,
        };
        assert_eq!(spec.propose(0, &history, 4, target_view), Ok(vec![]));
        let computed = spec.draft.as_ref().map(|(_, seqs)| seqs[0].last_computed);
        assert_eq!(computed, Some(1), "the proposal computed the prompt again");
        // Another proposer has nothing to compute.
        let mut ngram = Speculation::load(
            &SpecSettings {
                kind: SpecType::Ngram,
                config: SpecConfig::DEFAULT,
                draft: None,
            },
            &files,
            load,
            &mut target,
            &mut [&mut seq],
            64,
        )
        .expect("ngram");
        assert_eq!(ngram.prefill(0, &prompt), Ok(()));
    }

    #[test]
    fn fit_rows_trims_the_longest_proposals_first() {
        let mut p = vec![vec![1; 16], vec![2; 3], vec![], vec![4; 16]];
        fit_rows(&mut p);
        let rows: usize = p.iter().map(|x| x.len() + 1).sum();
        assert_eq!(rows, spec::ROW_INVARIANT_STEP);
        assert_eq!(p[1].len(), 3, "short proposals keep their length");
        assert!(p[0].len().abs_diff(p[3].len()) <= 1, "{p:?}");
        // More slots than rows: proposals go, tokens stay.
        let mut many = vec![vec![7; 2]; 40];
        fit_rows(&mut many);
        assert!(many.iter().all(Vec::is_empty));
    }
}
