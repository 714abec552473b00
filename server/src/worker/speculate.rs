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
}

impl Speculation {
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
        })
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
                spec::draft_propose(runner, seq, history, max, &self.config)
                    .map_err(|e| engine_message(&e))?
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
