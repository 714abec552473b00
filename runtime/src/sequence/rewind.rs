//! Taking a speculative step's rejected rows back: checkpoints of the
//! recurrent states, what a step hands over beside its logits (the final
//! hidden states a proposer reads, each row's recurrent states) and
//! `take_back`, which keeps the accepted positions.

use crate::hidden_rows::HiddenRows;
use crate::runner::Runner;
use crate::{Error, Result};

use super::Sequence;

/// A sequence's recurrent states at one position (`Sequence::checkpoint`).
pub struct Checkpoint {
    states: mllm_backends::kv::StateSnapshot,
}

/// Each row's recurrent states of the last multi-row step, where the
/// runner handed them over (`Sequence::keep_step_states`).
pub(super) struct StepStates {
    /// The position of the step's first row.
    start: usize,
    /// `rows[j]`: every recurrent layer's states after row j, in layer
    /// order.
    rows: Vec<Vec<Vec<mllm_backends::Tensor>>>,
}

impl Sequence {
    /// Keeps the final hidden state of each position computed from now on
    /// (`hidden`), as a runner that keeps side outputs gives them.
    pub fn keep_hidden(&mut self) {
        self.hidden.get_or_insert_with(HiddenRows::default);
    }

    /// Keeps each row's recurrent states of a speculative verification
    /// step (as a runner that keeps side outputs gives them), so that
    /// `take_back` picks the last kept row's states instead of computing
    /// the kept rows again.
    pub fn keep_step_states(&mut self) {
        self.keeps_states = true;
    }

    /// Takes what `runner`'s last step handed over for positions
    /// `start..start + n`: its last `n` hidden rows (none: what the rows
    /// held from `start` is forgotten) and, with `rows` (a verification
    /// step), each row's recurrent states.
    pub(super) fn collect_side(
        &mut self,
        runner: &mut Runner,
        start: usize,
        n: usize,
        rows: bool,
    ) -> Result<()> {
        self.step_states = None;
        let side = match runner.keeps_side_outputs() {
            true => runner.take_side_outputs()?,
            false => vec![],
        };
        let (mut hidden, mut width, mut states) = (vec![], 0, vec![]);
        for (name, t) in side {
            match name.as_str() {
                // Rows only a sequence that keeps them reads.
                "hidden" if self.hidden.is_some() => {
                    let w = t.shape().last().copied().unwrap_or(0);
                    if w == 0 || (width != 0 && w != width) {
                        return Err(Error::generate(format!(
                            "the script emitted hidden states of shape {:?} after rows of width {width}",
                            t.shape()
                        )));
                    }
                    width = w;
                    hidden.extend(t.to_f32_vec()?);
                }
                "state_rows" => states.push(t),
                _ => {}
            }
        }
        if let Some(h) = self.hidden.as_mut() {
            match width {
                w if w > 0 && hidden.len() >= n * w => {
                    h.put(start, &hidden[hidden.len() - n * w..], w)
                }
                _ => h.truncate(start),
            }
        }
        // Per recurrent layer, two tensors (the conv's and the rule's
        // states) per row, layer after layer.
        if self.keeps_states && rows && n > 1 && !states.is_empty() && states.len() % (2 * n) == 0 {
            let layers = states.len() / (2 * n);
            let rows = (0..n)
                .map(|j| {
                    (0..layers)
                        .map(|l| {
                            let at = l * 2 * n + 2 * j;
                            vec![states[at].clone(), states[at + 1].clone()]
                        })
                        .collect()
                })
                .collect();
            self.step_states = Some(StepStates { start, rows });
        }
        Ok(())
    }

    /// Where this sequence stands now, to come back to with `restore`: the
    /// recurrent layers' states (None for a model without them, whose
    /// cache `truncate` rewinds as it is). A verification step takes one
    /// before computing proposals a recurrent state would otherwise keep.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        let states = self.cache.borrow().snapshot_states()?;
        (states.tokens() == self.cached.len()).then_some(Checkpoint { states })
    }

    /// Back to `cp` (taken on this sequence, which has only grown since):
    /// the positions after it forgotten, the recurrent states as they were.
    pub fn restore(&mut self, cp: Checkpoint) -> Result<()> {
        let n = cp.states.tokens();
        if n > self.cached.len() || !self.cache.borrow_mut().restore_states(cp.states) {
            self.reset();
            return Err(Error::generate(
                "a speculative step's checkpoint does not fit the cache it came back to (the cache was emptied)",
            ));
        }
        self.cached.truncate(n);
        self.aligned = self.aligned.min(n);
        self.step_states = None;
        if let Some(h) = self.hidden.as_mut() {
            h.truncate(n);
        }
        Ok(())
    }

    /// Keeps the first `n` cached positions after a speculative step that
    /// began at `checkpoint` (taken before it; None without a recurrent
    /// state): rows are cut; a recurrent state, which cannot be cut, is set
    /// to the last kept row's states where the step kept each row's
    /// (`keep_step_states`), else goes back to the checkpoint and the kept
    /// tokens are computed again in one step, which gives them the bits
    /// they had (the delta rule runs token by token for steps this short).
    /// That extra step is what a rejection costs a recurrent model without
    /// the rows' states. True where it was taken.
    pub fn take_back(
        &mut self,
        runner: &mut Runner,
        checkpoint: Option<Checkpoint>,
        n: usize,
    ) -> Result<bool> {
        match checkpoint {
            Some(cp) if self.cached.len() > n => {
                let from = cp.states.tokens();
                if self.rewind_to_step_states(from, n) {
                    return Ok(false);
                }
                let again = self.cached.get(from..n).map(<[u32]>::to_vec);
                let again = again.ok_or_else(|| {
                    Error::generate("a speculative step's checkpoint is past what it keeps")
                })?;
                self.restore(cp)?;
                self.extend_rows(runner, &again)?;
                Ok(true)
            }
            _ => self.truncate(n).map(|()| false),
        }
    }

    /// Keeps the first `n` positions of a verification step that began at
    /// `from` with each row's states kept (`keep_step_states`): rows cut,
    /// every recurrent layer's state set to what it was after the last kept
    /// row. False (nothing changed) where those states are not at hand.
    fn rewind_to_step_states(&mut self, from: usize, n: usize) -> bool {
        let Some(st) = self.step_states.take() else {
            return false;
        };
        if st.start != from || n <= from || n > from + st.rows.len() {
            return false;
        }
        let Some(row) = st.rows.into_iter().nth(n - from - 1) else {
            return false;
        };
        if !self.cache.borrow_mut().rewind_to_states(n, row) {
            return false;
        }
        self.cached.truncate(n);
        self.aligned = self.aligned.min(n);
        if let Some(h) = self.hidden.as_mut() {
            h.truncate(n);
        }
        true
    }
}
