//! The compiled executor: replays a graph on a backend, node by node, with
//! no interpreter. Parameters and constants are bound once. Results the
//! backend can write into a caller's buffer (`Backend::writes_into`) live in
//! one arena laid out by the memory plan and allocated once, so a step
//! allocates no activation buffers for them; other results are the
//! backend's own tensors, dropped after their last reader.
//!
//! The KV cache: `CachedSdpa` nodes read `past_key.N` / `past_value.N` and
//! the new rows. On a host backend the executor keeps the cache as one
//! growing `KvCache` (the same type eager runs append to): the node appends
//! the new rows (the "host copies present rows into the past buffers" step)
//! and attends over the whole prefix with the backend's `Sdpa`, so compiled
//! and eager steps give the same numbers and can be interleaved.
//!
//! Recurrent states (`Graph::states`) likewise: the step reads each
//! `state.L.K` input from the cache (zeros before the layer's first step)
//! and stores the `new_state.L.K` outputs back into it afterwards, as the
//! eager `set_recurrent_state` does, so the two kinds of steps interleave
//! here too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mllm_backends::{Backend, ByteOwner, DType, KvCache, Op, Tensor};

use crate::ir::{Def, Graph, ValueId};
use crate::plan::{is_view, plan_memory_with, MemoryPlan};
use crate::{err, Result};

/// The arena's memory, allocated once per compiled graph.
struct ArenaMem {
    base: *mut u8,
    len: usize,
    _buf: Box<[u64]>,
}

// The memory is only written through `region_mut` under the plan's
// guarantee (below); reads go through `Region::bytes`.
unsafe impl Send for ArenaMem {}
unsafe impl Sync for ArenaMem {}

/// One planned value's bytes in the arena, as a tensor's storage.
struct Region {
    mem: Arc<ArenaMem>,
    offset: usize,
    len: usize,
}

impl ByteOwner for Region {
    fn bytes(&self) -> &[u8] {
        // In bounds: the plan placed `offset + len` inside the arena.
        unsafe { std::slice::from_raw_parts(self.mem.base.add(self.offset), self.len) }
    }
}

pub struct Compiled<B: Backend> {
    pub graph: Graph,
    backend: B,
    /// Parameters and constants, bound once.
    fixed: Vec<Option<Tensor>>,
    last: Vec<usize>,
    /// `past_key.N` input -> layer N.
    layer_of: HashMap<ValueId, usize>,
    /// `state.L.K` input -> (layer L, K).
    state_of: HashMap<ValueId, (usize, usize)>,
    pub plan: MemoryPlan,
    arena: Arc<ArenaMem>,
    /// The tensor over each arena-placed value's region, made once.
    placed: Vec<Option<Tensor>>,
    /// The step's values, by id: one list kept from step to step (emptied
    /// after each), so a step does not allocate it.
    slots: Mutex<Vec<Option<Tensor>>>,
}

impl<B: Backend> Compiled<B> {
    /// Binds the graph's parameters by checkpoint name through `params`.
    pub fn new(
        graph: Graph,
        backend: B,
        params: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<Compiled<B>> {
        let mut fixed = vec![None; graph.values.len()];
        for (i, v) in graph.values.iter().enumerate() {
            match &v.def {
                Def::Param { name } => {
                    let Some(t) = params(name) else {
                        return err(format!(
                            "the graph needs parameter `{name}`, which the model lacks"
                        ));
                    };
                    fixed[i] = Some(t);
                }
                Def::Const { data } => fixed[i] = Some(backend.upload(data.clone())?),
                _ => {}
            }
        }
        let layer_of = graph.kv.iter().map(|l| (l.past_key, l.layer)).collect();
        let state_of = graph
            .states
            .iter()
            .flat_map(|s| s.inputs.iter().enumerate().map(|(k, &i)| (i, (s.layer, k))))
            .collect();
        // The new KV rows are graph outputs for runtimes that copy them into
        // the past buffers after the step; here `CachedSdpa` appends them
        // to the cache when it runs, so they need not outlive their last
        // reader (kept to the end, they and the merged q/k/v results they
        // are views of would hold every layer's rows: a 128-token chunk's
        // arena measured 78 MB, most of it those).
        let mut lifetimes = graph.clone();
        lifetimes.outputs.retain(|(_, id)| {
            !graph
                .kv
                .iter()
                .any(|l| l.present_key == *id || l.present_value == *id)
        });
        let last = lifetimes.last_uses();
        let plan = plan_memory_with(&lifetimes, &|op, meta| {
            // CachedSdpa writes through the backend's Sdpa.
            let op = match op {
                Op::CachedSdpa {
                    causal,
                    scale,
                    window,
                } => &Op::Sdpa {
                    causal: *causal,
                    scale: *scale,
                    window: *window,
                },
                other => other,
            };
            backend.writes_into(op, meta)
        });
        // New states outlive the step (the cache keeps them as the next
        // step's inputs, as eager steps keep the op results): their storage
        // is the backend's own, not arena bytes the next step rewrites, so
        // storing them copies nothing.
        let mut plan = plan;
        for s in &graph.states {
            for &o in &s.outputs {
                plan.offsets[storage_root(&graph, o)] = None;
            }
        }
        let mut buf = vec![0u64; plan.arena_bytes.div_ceil(8)].into_boxed_slice();
        let arena = Arc::new(ArenaMem {
            base: buf.as_mut_ptr() as *mut u8,
            len: plan.arena_bytes,
            _buf: buf,
        });
        let mut placed = vec![None; graph.values.len()];
        for (i, off) in plan.offsets.iter().enumerate() {
            let Some(offset) = *off else { continue };
            let meta = &graph.values[i].meta;
            let len = meta.numel() * 4;
            if offset + len > arena.len || meta.dtype != DType::F32 {
                return err(format!("%{i}: planned outside the arena"));
            }
            let owner: Arc<dyn ByteOwner> = Arc::new(Region {
                mem: arena.clone(),
                offset,
                len,
            });
            placed[i] = Some(Tensor::from_bytes(
                owner,
                0,
                len,
                DType::F32,
                meta.shape.clone(),
            )?);
        }
        Ok(Compiled {
            graph,
            backend,
            fixed,
            last,
            layer_of,
            state_of,
            plan,
            arena,
            placed,
            slots: Mutex::new(Vec::new()),
        })
    }

    /// Where value `i`'s f32 region starts in the arena, and its length.
    fn region(&self, i: ValueId) -> Option<(*mut f32, usize)> {
        let offset = self.plan.offsets[i]?;
        let n = self.graph.values[i].meta.numel();
        // In bounds: checked against the arena when the graph was bound.
        Some((unsafe { self.arena.base.add(offset) } as *mut f32, n))
    }

    /// Runs `op` for value `i`: into its arena region when it has one.
    fn compute(&self, i: ValueId, op: &Op, args: &[&Tensor]) -> Result<Tensor> {
        if let (Some((ptr, n)), Some(t)) = (self.region(i), &self.placed[i]) {
            // SAFETY: value `i` is being computed inside `run`, which holds
            // `&mut self`; the plan gives every value alive now other bytes,
            // so no tensor read during this op overlaps the slice.
            // Not zeroed first: `run_into` overwrites every value (the
            // arena holds an earlier value's bytes here). Zeroing each
            // output on the calling thread was ~3-4% of a Qwen3-0.6B pp512.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
            if !self.backend.run_into(op, args, out)? {
                let r = self.backend.run(op, args)?;
                out.copy_from_slice(self.backend.download(&r)?.f32s()?);
            }
            return Ok(t.clone());
        }
        let r = self.backend.run(op, args)?;
        // A result sharing an input's storage (a cast to the same dtype, say)
        // must not outlive that input's arena bytes: copy it unless the plan
        // knows it as a view.
        let aliased = !is_view(op) && args.iter().any(|a| Arc::ptr_eq(a.buffer(), r.buffer()));
        if aliased {
            return Ok(self.backend.upload(host_copy(&self.backend, &r)?)?);
        }
        Ok(r)
    }

    /// Values whose results live in the arena, of all op results that
    /// need storage of their own (views share their source's).
    pub fn arena_coverage(&self) -> (usize, usize) {
        let placed = self.placed.iter().filter(|p| p.is_some()).count();
        let computed = self
            .graph
            .values
            .iter()
            .filter(|v| matches!(&v.def, Def::Node { op, .. } if !is_view(op)))
            .count();
        (placed, computed)
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// One step: `inputs` by name (every graph input except the KV cache's,
    /// which come from `kv`); returns the outputs other than the cache rows.
    pub fn run(
        &self,
        inputs: &[(&str, Tensor)],
        kv: &mut KvCache,
    ) -> Result<Vec<(String, Tensor)>> {
        self.run_steps(inputs, &mut [kv], &[])
    }

    /// One step over several sequences at once (a server's busy slots):
    /// the graph's rows are split into consecutive runs, `rows[c]` of them
    /// for the sequence cached in `kvs[c]`. Every op but attention sees all
    /// rows together (one pass over the weights); `CachedSdpa` appends each
    /// run's keys and values to its own cache and attends over that cache
    /// alone, as the sequence's own step would. The `positions` input holds
    /// each row's position in its sequence. A graph with recurrent state
    /// runs one sequence only.
    pub fn run_batch(
        &self,
        inputs: &[(&str, Tensor)],
        kvs: &mut [&mut KvCache],
        rows: &[usize],
    ) -> Result<Vec<(String, Tensor)>> {
        if kvs.len() != rows.len() || kvs.is_empty() || rows.contains(&0) {
            return err(format!(
                "a batched step needs one cache per run of rows, each of at least one row: {} caches, runs {rows:?}",
                kvs.len()
            ));
        }
        if kvs.len() > 1 && !self.graph.states.is_empty() {
            return err("a graph with recurrent state steps one sequence at a time");
        }
        self.run_steps(inputs, kvs, rows)
    }

    /// `run_batch`, where no runs (`rows` empty) means every row is the
    /// one sequence of `kvs[0]`.
    fn run_steps(
        &self,
        inputs: &[(&str, Tensor)],
        kvs: &mut [&mut KvCache],
        rows: &[usize],
    ) -> Result<Vec<(String, Tensor)>> {
        let g = &self.graph;
        // Step values only; parameters and constants are read from `fixed`
        // (no per-step clones of ~hundreds of bound weights).
        let mut guard = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slots = &mut *guard;
        slots.clear();
        slots.resize(g.values.len(), None);
        let r = self.step(inputs, kvs, rows, slots);
        slots.clear();
        r
    }

    fn step(
        &self,
        inputs: &[(&str, Tensor)],
        kvs: &mut [&mut KvCache],
        rows: &[usize],
        slots: &mut [Option<Tensor>],
    ) -> Result<Vec<(String, Tensor)>> {
        let g = &self.graph;
        let fixed = &self.fixed;
        // Appends up to the captured context never regrow the caches.
        let mut past = Vec::with_capacity(kvs.len());
        for kv in kvs.iter_mut() {
            kv.reserve(g.context);
            past.push(g.kv.first().map_or(0, |l| kv.len(l.layer)));
        }
        for (name, id) in g.inputs() {
            let t = if name == "past_len" {
                // Read by CachedSdpa alone, which takes each cache's own
                // length from the cache; the input is the first one's.
                self.backend
                    .upload(Tensor::from_i32(vec![past[0] as i32], vec![1])?)?
            } else if name.starts_with("past_key.") || name.starts_with("past_value.") {
                continue; // read by CachedSdpa through `kv`
            } else if let Some(&(layer, k)) = self.state_of.get(&id) {
                self.state_input(kvs[0], id, layer, k)?
            } else {
                let Some((_, t)) = inputs.iter().find(|(n, _)| *n == name) else {
                    return err(format!("the graph's input `{name}` was not given"));
                };
                if t.shape() != g.values[id].meta.shape.as_slice()
                    || t.dtype() != g.values[id].meta.dtype
                {
                    return err(format!(
                        "input `{name}` is {}{:?}; the graph was captured for {}",
                        t.dtype(),
                        t.shape(),
                        g.values[id].meta
                    ));
                }
                self.backend.upload(t.clone())?
            };
            slots[id] = Some(t);
        }
        for i in 0..g.values.len() {
            let Def::Node { op, inputs } = &g.values[i].def else {
                continue;
            };
            let out = match op {
                Op::CachedSdpa {
                    causal,
                    scale,
                    window,
                } => {
                    let layer = self.layer_of[&inputs[3]];
                    let (q, k, v) = (
                        get(slots, fixed, inputs[0])?,
                        get(slots, fixed, inputs[1])?,
                        get(slots, fixed, inputs[2])?,
                    );
                    let sdpa = Op::Sdpa {
                        causal: *causal,
                        scale: *scale,
                        window: *window,
                    };
                    self.cached_sdpa(i, &sdpa, layer, [q, k, v], kvs, rows, &past)?
                }
                _ => {
                    let args: Vec<&Tensor> = inputs
                        .iter()
                        .map(|&j| get(slots, fixed, j))
                        .collect::<Result<_>>()?;
                    self.compute(i, op, &args)?
                }
            };
            slots[i] = Some(out);
            for &j in inputs {
                if self.last[j] == i && matches!(g.values[j].def, Def::Node { .. }) {
                    slots[j] = None;
                }
            }
        }
        for s in &g.states {
            if s.outputs.is_empty() {
                continue;
            }
            let states = s
                .outputs
                .iter()
                .map(|&o| get(slots, fixed, o).cloned())
                .collect::<Result<Vec<_>>>()?;
            kvs[0]
                .set_state(s.layer, states, s.tokens)
                .map_err(crate::GraphError)?;
        }
        let kv_rows = |id: ValueId| {
            g.kv.iter()
                .any(|l| l.present_key == id || l.present_value == id)
                || g.states.iter().any(|s| s.outputs.contains(&id))
        };
        // Outputs leave as copies: the arena is rewritten by the next step.
        // A side output (`side.*`, what the script emits) leaves even where
        // it is also a state the cache took (the last row's).
        g.outputs
            .iter()
            .filter(|(name, id)| !kv_rows(*id) || name.starts_with("side."))
            .map(|(name, id)| {
                Ok((
                    name.clone(),
                    host_copy(&self.backend, get(slots, fixed, *id)?)?,
                ))
            })
            .collect()
    }
}

impl<B: Backend> Compiled<B> {
    /// `CachedSdpa` (value `i`) of `layer`: each run of rows appends its
    /// keys and values to its own cache (the backend keeps the cache where
    /// its kernels read it) and attends over that cache. One sequence is
    /// one `Sdpa` into the arena; several runs' results are concatenated
    /// into it.
    #[allow(clippy::too_many_arguments)]
    fn cached_sdpa(
        &self,
        i: ValueId,
        sdpa: &Op,
        layer: usize,
        [q, k, v]: [&Tensor; 3],
        kvs: &mut [&mut KvCache],
        rows: &[usize],
        past: &[usize],
    ) -> Result<Tensor> {
        if rows.is_empty() {
            let kv = &mut *kvs[0];
            if kv.len(layer) != past[0] {
                return err(format!(
                    "layer {layer} caches {} positions, layer 0 {}",
                    kv.len(layer),
                    past[0]
                ));
            }
            let (keys, values) = self.backend.kv_append(kv, layer, k, v)?;
            return self.compute(i, sdpa, &[q, &keys, &values]);
        }
        let total: usize = rows.iter().sum();
        if q.shape().first() != Some(&total) || k.shape().first() != Some(&total) {
            return err(format!(
                "attention of layer {layer} has {:?} query rows; the step's runs hold {total}",
                q.shape().first()
            ));
        }
        let causal = matches!(sdpa, Op::Sdpa { causal: true, .. });
        let mut outs = Vec::with_capacity(rows.len());
        let mut at = 0;
        for ((kv, &n), &p) in kvs.iter_mut().zip(rows).zip(past) {
            if kv.len(layer) != p {
                return err(format!(
                    "layer {layer} caches {} positions, layer 0 {p}",
                    kv.len(layer)
                ));
            }
            let (kr, vr) = (k.narrow0(at, at + n)?, v.narrow0(at, at + n)?);
            let (keys, values) = self.backend.kv_append(kv, layer, &kr, &vr)?;
            if causal || n == 1 {
                outs.push(
                    self.backend
                        .run(sdpa, &[&q.narrow0(at, at + n)?, &keys, &values])?,
                );
            } else {
                // Without the causal mask, a run's rows would see each
                // other's keys; a row sees the keys up to its own, as its
                // own one-row step would.
                let len = keys.shape()[0];
                for j in 0..n {
                    let upto = len - n + j + 1;
                    let qr = q.narrow0(at + j, at + j + 1)?;
                    let args = [&qr, &keys.narrow0(0, upto)?, &values.narrow0(0, upto)?];
                    outs.push(self.backend.run(sdpa, &args)?);
                }
            }
            at += n;
        }
        let refs: Vec<&Tensor> = outs.iter().collect();
        self.compute(i, &Op::Concat { dim: 0 }, &refs)
    }

    /// Input `state.L.K`: what the cache stores for layer L, or zeros
    /// before the layer's first step (what the script starts from).
    fn state_input(&self, kv: &KvCache, id: ValueId, layer: usize, k: usize) -> Result<Tensor> {
        let meta = &self.graph.values[id].meta;
        let Some(stored) = kv.state(layer) else {
            if meta.dtype != DType::F32 {
                return err(format!(
                    "recurrent state `state.{layer}.{k}` is {meta}; only f32 states start at zeros"
                ));
            }
            let zeros = Tensor::from_f32(vec![0.0; meta.numel()], meta.shape.clone())?;
            return Ok(self.backend.upload(zeros)?);
        };
        match stored.get(k) {
            Some(t) if t.shape() == meta.shape.as_slice() && t.dtype() == meta.dtype => {
                Ok(self.backend.upload(t.clone())?)
            }
            Some(t) => err(format!(
                "layer {layer}'s recurrent state {k} is {}{:?} in the cache; the graph was captured for {meta}",
                t.dtype(),
                t.shape()
            )),
            None => err(format!(
                "layer {layer}'s recurrent state has {} tensors in the cache; the graph reads `state.{layer}.{k}`",
                stored.len()
            )),
        }
    }
}

/// The value whose storage `i` shares (itself unless it is a view).
fn storage_root(g: &Graph, mut i: ValueId) -> ValueId {
    while let Def::Node { op, inputs } = &g.values[i].def {
        if !is_view(op) {
            break;
        }
        i = inputs[0];
    }
    i
}

/// A host tensor with storage of its own (not arena bytes, not an input's).
fn host_copy<B: Backend>(backend: &B, t: &Tensor) -> Result<Tensor> {
    let host = backend.download(t)?;
    let shape = host.shape().to_vec();
    Ok(match host.dtype() {
        DType::I32 => Tensor::from_i32(host.i32s()?.to_vec(), shape)?,
        _ => Tensor::from_f32(host.to_f32_vec()?, shape)?,
    })
}

/// Value `i`: a step value, else a bound parameter or constant.
fn get<'a>(
    slots: &'a [Option<Tensor>],
    fixed: &'a [Option<Tensor>],
    i: ValueId,
) -> Result<&'a Tensor> {
    slots[i]
        .as_ref()
        .or(fixed[i].as_ref())
        .ok_or_else(|| crate::GraphError(format!("%{i} is read after it was freed")))
}
