//! Several sequences in one step: a server's busy slots decode (and
//! verify their proposals) together, one pass over the weights for all.

use crate::runner::Runner;
use crate::{Error, Result};

use super::Sequence;

impl Sequence {
    /// Appends `tokens[b]` to `seqs[b]`, all in one batched step, and
    /// returns each sequence's logits after its token.
    pub fn step_batch(
        runner: &mut Runner,
        seqs: &mut [&mut Sequence],
        tokens: &[u32],
    ) -> Result<Vec<Vec<f32>>> {
        let rows: Vec<Vec<u32>> = tokens.iter().map(|&t| vec![t]).collect();
        let out = Sequence::extend_batch(runner, seqs, &rows)?;
        Ok(out.into_iter().flat_map(|mut r| r.pop()).collect())
    }

    /// Appends `ids[b]` (one or more tokens) to `seqs[b]` and returns the
    /// logits after each of them, `out[b][j]` after `ids[b][j]`: the
    /// matmuls see every row of every sequence at once (one pass over the
    /// weights), attention runs per row over its own sequence's keys. A
    /// step holds at most `ROW_INVARIANT_STEP` rows, so that every row
    /// gets the bits a one-row step would; more rows run as several steps
    /// (a sequence's rows never split). This is how a server verifies the
    /// proposals of all its speculating slots together.
    pub fn extend_batch<T: AsRef<[u32]>>(
        runner: &mut Runner,
        seqs: &mut [&mut Sequence],
        ids: &[T],
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let most = mllm_backends::cpu::ROW_INVARIANT_STEP;
        if seqs.len() != ids.len() {
            return Err(Error::generate(format!(
                "{} sequences but {} token lists in a batched step",
                seqs.len(),
                ids.len()
            )));
        }
        for (s, t) in seqs.iter().zip(ids) {
            let t = t.as_ref();
            if t.is_empty() || t.len() > most {
                return Err(Error::generate(format!(
                    "a sequence takes 1 to {most} tokens in a batched step, not {}",
                    t.len()
                )));
            }
            s.check_context(s.cached.len() + t.len())?;
        }
        // Recurrent layers (Qwen3.5's linear attention) do not batch yet:
        // such sequences step one after the other, with the same results.
        if seqs.iter().any(|s| s.cache.borrow().has_state()) {
            let mut out = Vec::with_capacity(seqs.len());
            for (s, t) in seqs.iter_mut().zip(ids) {
                out.push(s.extend_rows(runner, t.as_ref())?);
            }
            return Ok(out);
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut start = 0;
        while start < seqs.len() {
            // As many whole sequences as fit in one step.
            let mut end = start;
            let mut rows = 0;
            while end < seqs.len() && rows + ids[end].as_ref().len() <= most {
                rows += ids[end].as_ref().len();
                end += 1;
            }
            out.extend(Sequence::one_batched_step(
                runner,
                &mut seqs[start..end],
                &ids[start..end],
            )?);
            start = end;
        }
        Ok(out)
    }

    /// `extend_batch` for rows that fit one step.
    fn one_batched_step<T: AsRef<[u32]>>(
        runner: &mut Runner,
        seqs: &mut [&mut Sequence],
        ids: &[T],
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let (mut flat, mut positions, mut caches) = (vec![], vec![], vec![]);
        for (s, t) in seqs.iter().zip(ids) {
            let t = t.as_ref();
            for j in 0..t.len() {
                let p = i32::try_from((s.cached.len() + j) as i64 + s.pos_offset)
                    .map_err(|_| Error::generate("a rotary position out of range"))?;
                positions.push(p);
                caches.push(s.cache.clone());
            }
            flat.extend(t.iter().map(|&t| t as i32));
        }
        let logits = runner.step_batch(caches, &flat, &positions)?;
        // Hidden rows of every sequence's rows, in order (no recurrent
        // states: such sequences step through `extend_rows`).
        let mut hidden: Option<(Vec<f32>, usize)> = None;
        if runner.keeps_side_outputs() {
            let wanted = seqs.iter().any(|s| s.hidden.is_some());
            for (name, t) in runner.take_side_outputs()? {
                if wanted && name == "hidden" {
                    let w = t.shape().last().copied().unwrap_or(0);
                    let (data, _) = hidden.get_or_insert_with(|| (vec![], w));
                    data.extend(t.to_f32_vec()?);
                }
            }
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut row = 0;
        for (s, t) in seqs.iter_mut().zip(ids) {
            let t = t.as_ref();
            if let Some(h) = s.hidden.as_mut() {
                let start = s.cached.len();
                match &hidden {
                    Some((data, w)) if data.len() == flat.len() * w => {
                        h.put(start, &data[row * w..(row + t.len()) * w], *w)
                    }
                    _ => h.truncate(start),
                }
            }
            s.computed(runner, s.cached.len(), t.len());
            s.cached.extend_from_slice(t);
            let mut rows = Vec::with_capacity(t.len());
            for _ in t {
                rows.push(logits.narrow0(row, row + 1)?.to_f32_vec()?);
                row += 1;
            }
            out.push(rows);
        }
        Ok(out)
    }
}
