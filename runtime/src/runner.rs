//! A bound model with what its steps run on: the eager executor and, with
//! `compile`, captured graphs. `Engine` (conversations) and `Loaded` (one
//! model and its checkpoint's settings, for `exec` and the tests) both step
//! through it, so there is one path from ids to logits.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::{Backend, Op, SharedBackend, Tensor};
use mllm_interpreter::{CompiledModel, Eager, Executor, KvCache, Model};

use crate::images::{run_forward_images_from, ImageTokens, Images};
use crate::{Error, Result};

/// Tokens per captured prefill graph.
pub const PREFILL_CHUNK: usize = 128;

pub struct Runner {
    pub model: Model,
    pub exec: Eager<SharedBackend>,
    /// Captured graphs the text steps run as (prefill chunks, decode).
    pub compiled: Option<CompiledModel<SharedBackend>>,
    /// The default mode (`compile_default`): a script that cannot be
    /// captured steps eagerly after one warning, and a prompt runs its
    /// whole chunks as graphs but its tail eagerly (so a prompt shorter than
    /// a chunk gives exactly what `--eager` gives, and no graph is captured
    /// per prompt length). Otherwise (`compile`, `--compiled`) every step
    /// is a graph and a capture failure is an error.
    lenient: bool,
    /// Whether the lenient mode still has to learn if the script captures.
    unchecked: bool,
    /// Whether steps keep what the script `emit`s (`keep_side_outputs`).
    keeps_side: bool,
    /// Whether the lenient mode runs steps of a few rows (up to
    /// `ROW_INVARIANT_STEP`) as graphs too (`few_rows_as_graphs`).
    few_rows: bool,
}

impl Runner {
    pub fn new(model: Model) -> Runner {
        Runner {
            exec: Eager::new(model.backend.clone()),
            model,
            compiled: None,
            lenient: false,
            unchecked: false,
            keeps_side: false,
            few_rows: false,
        }
    }

    /// Keeps what every step's script `emit`s from now on, for
    /// `take_side_outputs`: the final hidden states (`hidden`, which an MTP
    /// head reads) and, in multi-row steps of recurrent layers, each row's
    /// states (`state_rows`, which let a speculative step take rows back
    /// without computing the kept ones again). Graphs captured before are
    /// captured again with those outputs.
    pub fn keep_side_outputs(&mut self) {
        self.keeps_side = true;
        self.exec.emitted.get_or_insert_with(Vec::new);
        if let Some(c) = self.compiled.as_mut() {
            c.side_outputs = true;
        }
    }

    /// Whether steps keep their side outputs (`keep_side_outputs`).
    pub fn keeps_side_outputs(&self) -> bool {
        self.keeps_side
    }

    /// What the steps since the last call emitted, in order, on the host
    /// (nothing where `keep_side_outputs` was not called).
    pub fn take_side_outputs(&mut self) -> Result<Vec<(String, Tensor)>> {
        let mut parts = vec![];
        if let Some(c) = self.compiled.as_mut() {
            parts.append(&mut c.emitted);
        }
        if let Some(e) = self.exec.emitted.as_mut() {
            parts.append(e);
        }
        let backend = &self.model.backend;
        parts
            .into_iter()
            .map(|(n, t)| Ok((n, backend.download(&t)?)))
            .collect()
    }

    /// What `Engine` does by default: prompts (their last row's logits) and
    /// decode steps run as captured graphs, bit-identical to eager steps
    /// and faster (no interpreter, one arena); a script that cannot be
    /// captured runs eagerly after one warning.
    pub fn compile_default(&mut self, context: usize) {
        let mut c = CompiledModel::new(self.model.backend.clone(), context, PREFILL_CHUNK);
        c.side_outputs = self.keeps_side;
        self.compiled = Some(c);
        self.lenient = true;
        self.unchecked = true;
    }

    /// Runs steps of a few rows (up to `ROW_INVARIANT_STEP`, e.g. a
    /// draft model catching up on the tokens the target kept: its last
    /// guess and the target's own) as graphs, one per row count, instead
    /// of eagerly: SmolLM2-135M Q4_0's two-row steps as a draft took
    /// 11.4 ms eagerly and 8.6 ms as a graph (a one-row step 8.0 ms, the
    /// same minute), and a draft takes one after most accepted last
    /// guesses. Other runners keep the lenient mode's eager tail, so that
    /// no graph is captured per prompt length.
    pub fn few_rows_as_graphs(&mut self) {
        self.few_rows = true;
    }

    /// Whether this model's steps give each row the same bits whatever
    /// the step's size (`Backend::chunk_invariant`): then any computed
    /// prefix can be shared, not only whole `PREFILL_CHUNK` chunks.
    pub fn chunk_invariant(&self) -> bool {
        self.model.backend.chunk_invariant()
    }

    /// Every step eager (`--eager`).
    pub fn eager_only(&mut self) {
        self.compiled = None;
    }

    /// How steps run, for reports: `eager` or `graph`.
    pub fn mode(&self) -> &'static str {
        match &self.compiled {
            Some(_) => "graph",
            None => "eager",
        }
    }

    /// Runs later text steps as captured graphs: prefill in chunks of
    /// `chunk` tokens, decode one token a step, against KV buffers of
    /// `context` rows (prompts with images are still prefilled eagerly;
    /// the decoding after them is compiled). A script that cannot be
    /// captured is an error at its first step.
    pub fn compile(&mut self, context: usize, chunk: usize) {
        let mut c = CompiledModel::new(self.model.backend.clone(), context, chunk);
        c.side_outputs = self.keeps_side;
        self.compiled = Some(c);
        self.lenient = false;
        self.unchecked = false;
    }

    /// Runs `ids` at rotary positions `start..` against `cache`; returns the
    /// logits `[rows, vocab]` (one row with `last_only`).
    pub fn step(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        last_only: bool,
    ) -> Result<Tensor> {
        let logits = self.step_on_backend(cache, ids, start, last_only)?;
        // Samplers read logits on the host (a copy from a device backend).
        Ok(self.model.backend.download(&logits)?)
    }

    fn step_on_backend(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        last_only: bool,
    ) -> Result<Tensor> {
        self.learn_capture(cache.borrow().dtype());
        let err = |e: String| Error::generate(format!("compiled step: {e}"));
        if let Some(c) = self.compiled.as_mut() {
            // Every row's logits for a few rows: a speculative decoding
            // verification step (one graph per row count, at most
            // `ROW_INVARIANT_STEP` of them, each as exact as eager steps).
            let few = ids.len() <= mllm_backends::cpu::ROW_INVARIANT_STEP;
            let verify = !last_only && few;
            if !self.lenient || (ids.len() == 1 && last_only) || verify || (self.few_rows && few) {
                return c
                    .forward(&self.model, ids, start, &mut cache.borrow_mut(), last_only)
                    .map_err(err);
            }
            // Lenient: whole chunks as graphs, the tail eagerly.
            let full = ids.len() / c.chunk * c.chunk;
            if last_only && full > 0 {
                let logits = c
                    .forward(
                        &self.model,
                        &ids[..full],
                        start,
                        &mut cache.borrow_mut(),
                        true,
                    )
                    .map_err(err)?;
                if full == ids.len() {
                    return Ok(logits);
                }
                return crate::engine::run_forward(
                    &self.model,
                    &mut self.exec,
                    cache,
                    &ids[full..],
                    start + full,
                    true,
                );
            }
        }
        crate::engine::run_forward(&self.model, &mut self.exec, cache, ids, start, last_only)
    }

    /// In the lenient mode, learns once whether the script captures
    /// (before a step touches a cache); if not, steps run eagerly.
    fn learn_capture(&mut self, dtype: mllm_backends::DType) {
        if !self.unchecked {
            return;
        }
        self.unchecked = false;
        if let Some(Err(e)) = self
            .compiled
            .as_mut()
            .map(|c| c.prepare(&self.model, 1, true, dtype))
        {
            eprintln!("warning: running eagerly: the script's steps cannot be captured: {e}");
            self.compiled = None;
        }
    }

    /// One decode step for several sequences at once: `ids[b]` at rotary
    /// position `positions[b]` of the sequence cached in `caches[b]` (a
    /// sequence's rows consecutive). Every row's logits come back
    /// `[batch, vocab]` on the host. The matmuls see all rows together (one
    /// pass over the weights for the whole batch); attention runs per
    /// sequence, as its own step would. With captured graphs, the step
    /// replays the graph of its row count (one per count, captured once);
    /// sequences with recurrent state or of different cache types step
    /// eagerly.
    pub fn step_batch(
        &mut self,
        caches: Vec<Rc<RefCell<KvCache>>>,
        ids: &[i32],
        positions: &[i32],
    ) -> Result<Tensor> {
        if let Some(first) = caches.first() {
            self.learn_capture(first.borrow().dtype());
        }
        if let (Some(c), Some((runs, rows))) = (self.compiled.as_mut(), graph_runs(&caches)) {
            let mut borrowed: Vec<_> = runs.iter().map(|k| k.borrow_mut()).collect();
            let mut kvs: Vec<&mut KvCache> = borrowed.iter_mut().map(|b| &mut **b).collect();
            let logits = c
                .forward_batch(&self.model, ids, positions, &mut kvs, &rows)
                .map_err(|e| Error::generate(format!("compiled batched step: {e}")))?;
            return Ok(self.model.backend.download(&logits)?);
        }
        let inputs = mllm_interpreter::ForwardInputs::batch(ids, positions, caches)?;
        let out = self.model.run(&mut self.exec, inputs).map_err(|e| {
            let sources = &self.model.program.sources;
            Error::diagnostics(crate::ErrorKind::Generate, |c| e.render(sources, c))
        })?;
        match out {
            mllm_interpreter::Value::Tensor(t) if t.rank() == 2 && t.shape()[0] == ids.len() => {
                Ok(self.model.backend.download(&t)?)
            }
            other => Err(Error::generate(format!("the script's forward returned {other:?} for a batch of {}, expected logits [batch, vocab]",
                ids.len()
            ))),
        }
    }

    /// Prefills a prompt with images (ids already hold each image's
    /// placeholder tokens), always eagerly, from `start` (the cache holds
    /// the text before: `images::run_forward_images_from`); returns the
    /// logits and the offset at which decoding continues (token `i` sits at
    /// `i + delta`).
    pub fn prefill_images(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        images: &Images,
        spec: &ImageTokens,
        last_only: bool,
    ) -> Result<(Tensor, i64)> {
        let (logits, delta) = run_forward_images_from(
            &self.model,
            &mut self.exec,
            cache,
            ids,
            start,
            images,
            spec,
            last_only,
        )?;
        Ok((self.model.backend.download(&logits)?, delta))
    }

    /// The greedy choice after the last row of `logits`.
    pub fn argmax_last(&mut self, logits: &Tensor) -> Result<i32> {
        let rows = logits.shape()[0];
        let last = logits.narrow0(rows - 1, rows)?;
        if last.device().is_none() {
            // Host logits (what `step` returns): no round trip to a device.
            // A NaN must not become a token (argmax would skip it).
            mllm_interpreter::numerics::check_logits(&last.to_f32_vec()?)
                .map_err(|e| Error::generate(e.to_string()))?;
            let idx = mllm_backends::CpuBackend.run(&Op::Argmax { dim: 1 }, &[&last])?;
            return Ok(idx.i32s()?[0]);
        }
        let idx = self.exec.run(&Op::Argmax { dim: 1 }, &[&last])?;
        Ok(self.exec.read(&idx)?.i32s()?[0])
    }
}

/// The caches of a batched step as runs of consecutive rows (each
/// sequence's cache once, with its row count), if a captured graph can run
/// the step: every cache distinct between runs, none with recurrent state,
/// all of one cache type.
#[allow(clippy::type_complexity)]
fn graph_runs(caches: &[Rc<RefCell<KvCache>>]) -> Option<(Vec<Rc<RefCell<KvCache>>>, Vec<usize>)> {
    let (mut runs, mut rows): (Vec<Rc<RefCell<KvCache>>>, Vec<usize>) = (vec![], vec![]);
    for c in caches {
        match runs.last() {
            Some(last) if Rc::ptr_eq(last, c) => *rows.last_mut()? += 1,
            _ => {
                if runs.iter().any(|r| Rc::ptr_eq(r, c)) {
                    return None;
                }
                runs.push(c.clone());
                rows.push(1);
            }
        }
    }
    let first = runs.first()?.borrow().dtype();
    let plain = runs.iter().all(|c| {
        let c = c.borrow();
        !c.has_state() && c.dtype() == first
    });
    plain.then_some((runs, rows))
}
