//! The constraint's mask computed beside the forward, not after it: each
//! answer's parser lives on a helper thread. When a token is accepted the
//! helper consumes it (the caller waits for that: microseconds, and it
//! must know at once whether the answer is complete), then computes the
//! next step's mask while the engine runs the forward for that token; the
//! next `process` only collects it. The first mask is computed while the
//! prompt is prefilled. Dropping the constraint ends the helper.

use std::sync::mpsc::{channel, Receiver, Sender};

use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

use super::constrain::ConstraintError;
use super::processors::{LogitsProcessor, ProcessorError};

enum Cmd {
    /// Consume a token, reply `Consumed`, then (unless the parser stopped)
    /// compute the next mask and reply `Mask`.
    Consume(u32),
    /// Compute a mask now and reply `Mask`.
    Mask,
}

enum Reply {
    Consumed(Result<(), String>, bool),
    Mask(Result<SimpleVob, String>),
}

/// One answer's constraint: masks every token its parser cannot take.
pub struct Constraint {
    tx: Sender<Cmd>,
    rx: Receiver<Reply>,
    /// A `Mask` reply is on its way (or waiting).
    mask_coming: bool,
    /// The parser accepts nothing more.
    stopped: bool,
}

impl Constraint {
    /// Starts the helper thread, which begins on the first mask at once.
    pub(super) fn start(mut matcher: Matcher) -> Result<Constraint, ConstraintError> {
        let (tx, cmds) = channel::<Cmd>();
        let (replies, rx) = channel::<Reply>();
        let mask =
            |m: &mut Matcher| Reply::Mask(m.compute_mask_or_eos().map_err(|e| e.to_string()));
        std::thread::Builder::new()
            .name("mllm-constraint".into())
            .spawn(move || {
                if replies.send(mask(&mut matcher)).is_err() {
                    return;
                }
                for cmd in cmds {
                    let sent = match cmd {
                        Cmd::Consume(t) => {
                            let r = matcher.consume_token(t).map_err(|e| e.to_string());
                            let stopped = matcher.is_stopped();
                            let go_on = r.is_ok() && !stopped;
                            let sent = replies.send(Reply::Consumed(r, stopped)).is_ok();
                            sent && (!go_on || replies.send(mask(&mut matcher)).is_ok())
                        }
                        Cmd::Mask => replies.send(mask(&mut matcher)).is_ok(),
                    };
                    if !sent {
                        return;
                    }
                }
            })
            .map_err(|e| ConstraintError(format!("cannot start the constraint's thread: {e}")))?;
        Ok(Constraint {
            tx,
            rx,
            mask_coming: true,
            stopped: false,
        })
    }

    fn gone() -> ProcessorError {
        ProcessorError("the constraint's thread stopped".into())
    }
}

/// Sets every logit whose bit in `words` (32 tokens a word, lowest bit
/// first; `len` tokens in all) is clear to minus infinity, and every logit
/// past `len` (a padded head's rows). A word at a time: whole words of
/// refused tokens, the common case in JSON's structure, are one fill.
fn apply(words: &[u32], len: usize, logits: &mut [f32]) {
    let n = len.min(logits.len());
    for (w, &bits) in words.iter().enumerate() {
        let base = w * 32;
        if base >= n {
            break;
        }
        if bits == u32::MAX {
            continue;
        }
        let chunk = &mut logits[base..(base + 32).min(n)];
        if bits == 0 {
            chunk.fill(f32::NEG_INFINITY);
        } else {
            for (i, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << i) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }
    // Tokens the mask does not cover are never allowed.
    let covered = (words.len() * 32).min(n);
    logits[covered..].fill(f32::NEG_INFINITY);
}

impl LogitsProcessor for Constraint {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), ProcessorError> {
        if !self.mask_coming {
            self.tx.send(Cmd::Mask).map_err(|_| Self::gone())?;
        }
        self.mask_coming = false;
        let mask = match self.rx.recv().map_err(|_| Self::gone())? {
            Reply::Mask(m) => {
                m.map_err(|e| ProcessorError(format!("the constraint failed: {e}")))?
            }
            Reply::Consumed(..) => {
                return Err(ProcessorError(
                    "the constraint's replies are out of order".into(),
                ))
            }
        };
        apply(mask.as_slice(), mask.len(), logits);
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<(), ProcessorError> {
        // A mask computed for this step and not collected (a token taken
        // without `process`) is stale: drop it.
        if self.mask_coming {
            self.mask_coming = false;
            self.rx.recv().map_err(|_| Self::gone())?;
        }
        self.tx
            .send(Cmd::Consume(token))
            .map_err(|_| Self::gone())?;
        match self.rx.recv().map_err(|_| Self::gone())? {
            Reply::Consumed(r, stopped) => {
                self.stopped = stopped;
                self.mask_coming = r.is_ok() && !stopped;
                r.map_err(|e| ProcessorError(format!("the constraint refused token {token}: {e}")))
            }
            Reply::Mask(_) => Err(ProcessorError(
                "the constraint's replies are out of order".into(),
            )),
        }
    }

    fn is_complete(&self) -> bool {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// `apply` is the token-at-a-time reference (llguidance's
        /// `iter_unset_entries`, then the rows past the mask).
        #[test]
        fn apply_is_the_reference(
            bits in proptest::collection::vec(any::<bool>(), 0..300),
            words_like in proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()], 0..4),
            extra in 0usize..70,
        ) {
            let mut v = SimpleVob::from_slice(&bits);
            // Whole allowed or refused words too, not only random ones.
            for (w, &word) in words_like.iter().enumerate() {
                for i in 0..32 {
                    let idx = w * 32 + i;
                    if idx < v.len() {
                        v.set(idx, word & (1 << i) != 0);
                    }
                }
            }
            let n = v.len() + extra;
            let fresh: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut want = fresh.clone();
            let len = v.len().min(n);
            v.iter_unset_entries(|i| {
                if i < len {
                    want[i] = f32::NEG_INFINITY;
                }
            });
            want[len..].fill(f32::NEG_INFINITY);
            let mut got = fresh;
            apply(v.as_slice(), v.len(), &mut got);
            prop_assert_eq!(got, want);
        }
    }
}
