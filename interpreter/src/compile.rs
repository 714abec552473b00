//! Compiled execution of a model's forward: graphs captured on demand per
//! step shape (decode: 1 token; prefill: chunks of `chunk` tokens), passed
//! through the graph passes and replayed by `mllm_graph::Compiled` against
//! the same `KvCache` eager steps use.
//!
//! A prompt's tail shorter than a chunk runs as pieces of power-of-two
//! lengths (100 = 64 + 32 + 4), not as one graph of its own length nor as
//! a padded chunk: every prompt length is then served by at most
//! `log2(chunk) + 1` static graphs, each captured once (what an NPU's fixed
//! shapes need), with no padding rows computed or written to the cache.
//! Short pieces cost about what their share of one step would: a step of
//! few rows is bound by streaming the weights, not by arithmetic.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mllm_backends::{Backend, DType, KvCache, Tensor};
use mllm_graph::{Compiled, Graph};

use crate::capture::Capture;
use crate::executor::Eager;
use crate::model::{ForwardInputs, Model};
use crate::value::Value;

/// Captures `model`'s forward for `seq` tokens (rows of the past KV buffers:
/// `context`), as the raw graph before any pass.
pub fn capture<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    seq: usize,
    context: usize,
    last_only: bool,
) -> Result<Graph, String> {
    capture_with_kv(model, backend, seq, context, last_only, DType::F32, false)
}

/// `capture` for a KV cache storing `kv_dtype` (f32, f16, q8_0): the past
/// buffers the graph declares have that dtype. With `side_outputs`, what
/// the script `emit`s becomes outputs `side.NAME` too.
pub fn capture_with_kv<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    seq: usize,
    context: usize,
    last_only: bool,
    kv_dtype: DType,
    side_outputs: bool,
) -> Result<Graph, String> {
    let opts = (seq, context, side_outputs, last_only);
    record_forward(model, backend, opts, kv_dtype, true)
}

/// `capture` with every op of the recording run computed, linears too:
/// the twin the placeholders of `Capture::skip_linears` are checked
/// against (the graphs must be the same).
pub fn capture_computing_all<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    seq: usize,
    context: usize,
    last_only: bool,
) -> Result<Graph, String> {
    let opts = (seq, context, false, last_only);
    record_forward(model, backend, opts, DType::F32, false)
}

/// The forward recorded against a scratch cache of `kv_dtype` (`record`'s
/// options, linears computed unless `skip_linears`).
fn record_forward<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    opts: (usize, usize, bool, bool),
    kv_dtype: DType,
    skip_linears: bool,
) -> Result<Graph, String> {
    let (seq, last_only) = (opts.0, opts.3);
    let scratch = Rc::new(RefCell::new(KvCache::with_dtype(kv_dtype)?));
    let inputs =
        ForwardInputs::text(&vec![0; seq], 0, scratch, last_only).map_err(|e| e.to_string())?;
    record(model, backend, "the forward", opts, skip_linears, |cap| {
        model.run(cap, inputs)
    })
}

/// Runs `run` once under a graph capture (`seq` rows, past buffers of
/// `context` rows, side outputs and last-row logits as said; linears
/// computed or given placeholders: `skip_linears`) and returns the graph
/// with its result as `logits`.
fn record<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    what: &str,
    (seq, context, side_outputs, last_only): (usize, usize, bool, bool),
    skip_linears: bool,
    run: impl FnOnce(&mut Capture<Eager<B>>) -> crate::error::RtResult<Value>,
) -> Result<Graph, String> {
    if seq == 0 {
        return Err("a graph needs at least one token".into());
    }
    let mut cap = Capture::new(Eager::new(backend.clone()), &model.weights, context);
    cap.side_outputs = side_outputs;
    cap.last_only = last_only;
    cap.skip_linears = skip_linears;
    let out = run(&mut cap).map_err(|e| e.render(&model.program.sources, false))?;
    let Value::Tensor(logits) = out else {
        return Err(format!("{what} returned {out:?}, not logits"));
    };
    cap.finish(&logits)
}

/// Captures the model's function `func` (a head beside `forward`, e.g. the
/// MTP head's `mtp_forward`) for `seq` rows of `input_ids` i32 `[seq]`,
/// `positions` i32 `[seq]` and `hidden` f32 `[seq, width]` against a
/// cache (`context` rows): its result as `logits`, what it `emit`s as
/// `side.*` outputs.
pub fn capture_call<B: Backend + Clone>(
    model: &Model,
    backend: &B,
    func: &str,
    seq: usize,
    width: usize,
    context: usize,
    kv_dtype: DType,
) -> Result<Graph, String> {
    let scratch = Rc::new(RefCell::new(KvCache::with_dtype(kv_dtype)?));
    let e = |e: mllm_backends::BackendError| e.to_string();
    let ids = Tensor::from_i32(vec![0; seq], vec![seq]).map_err(e)?;
    let pos = Tensor::from_i32((0..seq as i32).collect(), vec![seq]).map_err(e)?;
    let hidden = Tensor::from_f32(vec![0.0; seq * width], vec![seq, width]).map_err(e)?;
    let inputs = vec![
        ("input_ids", Value::Tensor(ids)),
        ("hidden", Value::Tensor(hidden)),
        ("positions", Value::Tensor(pos)),
        ("cache", Value::Cache(scratch)),
    ];
    let what = format!("`{func}`");
    record(
        model,
        backend,
        &what,
        (seq, context, true, false),
        true,
        |cap| model.call(func, cap, inputs),
    )
}

/// Per-shape compiled graphs of one model.
pub struct CompiledModel<B: Backend + Clone> {
    backend: B,
    /// Rows of the past KV buffers the graphs declare (the model's context).
    pub context: usize,
    /// Prefill chunk length.
    pub chunk: usize,
    /// Whether steps keep what the script `emit`s (`emitted`).
    pub side_outputs: bool,
    /// The side outputs of the steps run since the runner last took them,
    /// in order (one per graph run: a prompt's chunks each give theirs).
    pub emitted: Vec<(String, Tensor)>,
    graphs: HashMap<(usize, bool, DType, bool), Compiled<B>>,
    /// Graphs of other functions (`call`), by function, rows and cache type.
    fn_graphs: HashMap<(String, usize, DType), Compiled<B>>,
}

impl<B: Backend + Clone> CompiledModel<B> {
    pub fn new(backend: B, context: usize, chunk: usize) -> CompiledModel<B> {
        CompiledModel {
            backend,
            context,
            chunk: chunk.max(1),
            side_outputs: false,
            emitted: vec![],
            graphs: HashMap::new(),
            fn_graphs: HashMap::new(),
        }
    }

    /// Graphs captured so far.
    pub fn graph_count(&self) -> usize {
        self.graphs.len()
    }

    fn graph(
        &mut self,
        model: &Model,
        seq: usize,
        last_only: bool,
        kv_dtype: DType,
    ) -> Result<&mut Compiled<B>, String> {
        let key = (seq, last_only, kv_dtype, self.side_outputs);
        if !self.graphs.contains_key(&key) {
            let g = capture_with_kv(
                model,
                &self.backend,
                seq,
                self.context,
                last_only,
                kv_dtype,
                self.side_outputs,
            )?;
            let c = self.compile(model, g)?;
            self.graphs.insert(key, c);
        }
        self.graphs
            .get_mut(&key)
            .ok_or_else(|| "graph missing".to_string())
    }

    /// Runs the model's function `func` (see `capture_call`) on `ids` at
    /// rotary positions `pos..` with `hidden` `[ids.len(), width]` after
    /// what `kv` holds, as one graph per row count (captured once); returns
    /// its logits, and its side outputs go to `emitted`.
    pub fn call(
        &mut self,
        model: &Model,
        func: &str,
        ids: &[i32],
        hidden: Tensor,
        pos: usize,
        kv: &mut KvCache,
    ) -> Result<Tensor, String> {
        let n = ids.len();
        let width = hidden.shape().last().copied().unwrap_or(0);
        if hidden.shape() != [n, width] {
            return Err(format!(
                "`{func}` takes hidden [{n}, width], not {:?}",
                hidden.shape()
            ));
        }
        self.check_room(kv, n)?;
        let key = (func.to_string(), n, kv.dtype());
        if !self.fn_graphs.contains_key(&key) {
            let g = capture_call(
                model,
                &self.backend,
                func,
                n,
                width,
                self.context,
                kv.dtype(),
            )?;
            let c = self.compile(model, g)?;
            self.fn_graphs.insert(key.clone(), c);
        }
        let g = self.fn_graphs.get(&key).ok_or("graph missing")?;
        let e = |e: mllm_backends::BackendError| e.to_string();
        let input = Tensor::from_i32(ids.to_vec(), vec![n]).map_err(e)?;
        let positions =
            Tensor::from_i32((pos..pos + n).map(|p| p as i32).collect(), vec![n]).map_err(e)?;
        let outs = g
            .run(
                &[
                    ("input_ids", input),
                    ("positions", positions),
                    ("hidden", hidden),
                ],
                kv,
            )
            .map_err(|e| e.to_string())?;
        self.logits_keeping_side(outs)
    }

    /// A captured graph through the passes, ready to run (work on small
    /// weights alone, such as norm gains 1 + w, folded once first).
    /// Whether `kv` has room for `n` more rows within the compiled context.
    fn check_room(&self, kv: &KvCache, n: usize) -> Result<(), String> {
        if kv.len(0) + n > self.context {
            return Err(format!(
                "{} cached + {n} new tokens exceed the compiled context of {}",
                kv.len(0),
                self.context
            ));
        }
        Ok(())
    }

    fn compile(&self, model: &Model, g: Graph) -> Result<Compiled<B>, String> {
        let weights: HashMap<&str, &Tensor> =
            model.weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let g = mllm_graph::passes::fold_params::fold_params(&g, &|name| {
            weights.get(name).map(|t| (*t).clone())
        })
        .map_err(|e| e.to_string())?;
        let g = mllm_graph::passes::all(g).map_err(|e| e.to_string())?;
        Compiled::new(g, self.backend.clone(), &|name| {
            weights.get(name).map(|t| (*t).clone())
        })
        .map_err(|e| e.to_string())
    }

    /// Captures (once) the graph `forward` would use for `seq` tokens, so a
    /// runner can learn that a script cannot be captured before any step
    /// touches its cache.
    pub fn prepare(
        &mut self,
        model: &Model,
        seq: usize,
        last_only: bool,
        kv_dtype: DType,
    ) -> Result<(), String> {
        self.graph(model, seq, last_only, kv_dtype).map(|_| ())
    }

    /// Runs `ids` at rotary positions `pos..` after what `kv` holds, in
    /// chunks; returns the logits of the last chunk (its last row only with
    /// `last_only`).
    pub fn forward(
        &mut self,
        model: &Model,
        ids: &[i32],
        pos: usize,
        kv: &mut KvCache,
        last_only: bool,
    ) -> Result<Tensor, String> {
        if !last_only {
            // Every row's logits: one graph for the whole length.
            return self.step(model, ids, pos, kv, false);
        }
        let mut logits = None;
        let mut at = 0;
        while at < ids.len() {
            let end = at + piece(ids.len() - at, self.chunk);
            logits = Some(self.step(model, &ids[at..end], pos + at, kv, last_only)?);
            at = end;
        }
        logits.ok_or_else(|| "no tokens to run".to_string())
    }

    fn step(
        &mut self,
        model: &Model,
        ids: &[i32],
        pos: usize,
        kv: &mut KvCache,
        last_only: bool,
    ) -> Result<Tensor, String> {
        let n = ids.len();
        self.check_room(kv, n)?;
        let g = self.graph(model, n, last_only, kv.dtype())?;
        let e = |e: mllm_backends::BackendError| e.to_string();
        let input = Tensor::from_i32(ids.to_vec(), vec![n]).map_err(e)?;
        let positions =
            Tensor::from_i32((pos..pos + n).map(|p| p as i32).collect(), vec![n]).map_err(e)?;
        let outs = g
            .run(&[("input_ids", input), ("positions", positions)], kv)
            .map_err(|e| e.to_string())?;
        self.logits_keeping_side(outs)
    }

    /// The `logits` of a graph run's outputs; its side outputs go to
    /// `emitted`.
    fn logits_keeping_side(&mut self, outs: Vec<(String, Tensor)>) -> Result<Tensor, String> {
        let mut logits = None;
        for (name, t) in outs {
            if name == "logits" {
                logits = Some(t);
            } else if let Some(side) = name.strip_prefix("side.") {
                let side = side.rsplit_once('#').map_or(side, |(n, _)| n);
                self.emitted.push((side.to_string(), t));
            }
        }
        logits.ok_or_else(|| "the graph has no logits output".to_string())
    }

    /// One step for several sequences (a server's busy slots): `rows[c]`
    /// consecutive ids of `ids` continue the sequence cached in `kvs[c]`,
    /// at rotary positions `positions` (one per id). Replays the graph a
    /// step of `ids.len()` rows with every row's logits uses (the same one
    /// a speculative verification of that many rows replays), with each
    /// run's attention over its own cache; returns every row's logits.
    pub fn forward_batch(
        &mut self,
        model: &Model,
        ids: &[i32],
        positions: &[i32],
        kvs: &mut [&mut KvCache],
        rows: &[usize],
    ) -> Result<Tensor, String> {
        let n = ids.len();
        if positions.len() != n || rows.iter().sum::<usize>() != n {
            return Err(format!(
                "a batched step of {n} ids has {} positions and runs {rows:?}",
                positions.len()
            ));
        }
        let Some(dtype) = kvs.first().map(|kv| kv.dtype()) else {
            return Err("a batched step needs at least one sequence".into());
        };
        for (kv, &r) in kvs.iter().zip(rows) {
            if kv.dtype() != dtype {
                return Err(format!(
                    "the sequences of a batched step cache {dtype} and {} keys; one graph takes one cache type",
                    kv.dtype()
                ));
            }
            self.check_room(kv, r)?;
        }
        let g = self.graph(model, n, false, dtype)?;
        let e = |e: mllm_backends::BackendError| e.to_string();
        let input = Tensor::from_i32(ids.to_vec(), vec![n]).map_err(e)?;
        let positions = Tensor::from_i32(positions.to_vec(), vec![n]).map_err(e)?;
        let outs = g
            .run_batch(&[("input_ids", input), ("positions", positions)], kvs, rows)
            .map_err(|e| e.to_string())?;
        self.logits_keeping_side(outs)
    }
}

/// The next step's length for `left` tokens: a whole chunk while one fits,
/// else the largest power of two not above `left`.
pub fn piece(left: usize, chunk: usize) -> usize {
    if left >= chunk {
        chunk
    } else {
        1 << left.max(1).ilog2()
    }
}

#[cfg(test)]
mod tests {
    use super::piece;

    #[test]
    fn tails_split_into_powers_of_two() {
        let split = |mut n: usize, chunk: usize| {
            let mut out = vec![];
            while n > 0 {
                let p = piece(n, chunk);
                out.push(p);
                n -= p;
            }
            out
        };
        assert_eq!(split(300, 128), [128, 128, 32, 8, 4]);
        assert_eq!(split(100, 128), [64, 32, 4]);
        assert_eq!(split(7, 3), [3, 3, 1]);
        assert_eq!(split(1, 128), [1]);
        // Every length from 1 to 4 chunks uses only chunk and powers of two.
        for n in 1..=512 {
            for p in split(n, 128) {
                assert!(p == 128 || p.is_power_of_two(), "{n}: {p}");
            }
        }
    }
}
