//! Graph capture: an executor that runs a forward eagerly once (on a scratch
//! KV cache) and records it as an SSA graph (`mllm_graph::Graph`), as
//! tinygrad's TinyJit does: run once, record once, replay.
//!
//! Every tensor the interpreter touches arrives through the executor seam,
//! so each is known as an op result, a named input, a checkpoint parameter
//! (tagged with its name) or a constant; a tensor of unknown origin is a
//! capture error. The KV cache becomes graph I/O: `kv_append` adds inputs
//! `past_key.N`, `past_value.N` (capacity `context` rows) and `past_len`,
//! outputs `present_key.N`, `present_value.N` (the new rows), and the
//! attention reading the appended cache becomes `CachedSdpa`, so one graph
//! serves every step of its sequence length. A recurrent layer's state
//! (Gated DeltaNet) becomes graph I/O too: `recurrent_state(shapes)` adds
//! inputs `state.L.K` of the declared shapes, `set_recurrent_state` outputs
//! `new_state.L.K`, which must have those shapes again (see
//! `mllm_graph::StateLayer`).
//!
//! Scripts whose control flow reads tensor data (`to_list`, `item`, integer
//! indexes from tensors: Qwen3-VL's image placement) are refused: such a
//! forward stays eager (images are prefilled eagerly and the text decoder
//! after them is captured, since decoding reads no data).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use mllm_backends::{BackendError, Buffer, DType, KvCache, Op, Tensor, TensorMeta};
use mllm_graph::{Def, Graph, KvLayer, StateLayer, ValueId};

use crate::executor::Executor;

/// Identity of a tensor: its storage, where it starts, its shape.
type Key = (usize, usize, Vec<usize>);

/// Zeros standing in for a host linear's product during a capture that
/// keeps only the graph (`skip_linears`). The linears are nearly all of a
/// step's arithmetic, and the recording never looks at the values (a
/// forward whose control flow reads data is refused), so computing them
/// only made capturing a new shape cost about a step of its rows: 15-35
/// ms for each verification row count a speculative answer met
/// (SmolLM2-135M F16, 3-17 rows), paid inside the answer. Other ops still
/// run: they are cheap, and views of their results keep the identities
/// the recording follows.
fn placeholder(
    op: &Op,
    inputs: &[&Tensor],
    meta: &TensorMeta,
) -> Option<Result<Tensor, BackendError>> {
    let host = inputs.iter().all(|t| t.device().is_none());
    if !matches!(op, Op::Linear) || !host || meta.dtype != DType::F32 {
        return None;
    }
    let n = meta.shape.iter().product();
    Some(Tensor::from_f32(vec![0.0; n], meta.shape.clone()))
}

fn key(t: &Tensor) -> Key {
    (
        Arc::as_ptr(t.buffer()) as *const u8 as usize,
        t.offset(),
        t.shape().to_vec(),
    )
}

/// What `kv_append` handed back: all keys or all values of a layer.
#[derive(Clone, Copy)]
struct CacheView {
    layer: usize,
    keys: bool,
}

pub struct Capture<E: Executor> {
    pub inner: E,
    graph: Graph,
    ids: HashMap<Key, ValueId>,
    views: HashMap<Key, CacheView>,
    /// Names of weights by tensor identity (from the model's bound weights).
    weight_names: HashMap<Key, String>,
    params: HashMap<String, ValueId>,
    past_len: Option<ValueId>,
    /// A weak reference to the storage of everything seen: it keeps each
    /// buffer's control block allocated, so no later buffer can take its
    /// address (identities stay unique), while the data itself is freed
    /// when the forward drops it (a 128-token capture would otherwise hold
    /// every activation of the forward at once).
    keep: Vec<Weak<Buffer>>,
    /// Why the captured forward cannot be replayed, if it cannot.
    problems: Vec<String>,
    /// Recurrent layers whose state was read without declared shapes
    /// (already a problem).
    undeclared: HashSet<usize>,
    /// Whether `emit`ted tensors become graph outputs (`side.NAME`).
    pub side_outputs: bool,
    /// Whether the graph gives only the last row's logits (a prompt's
    /// chunk): then no step reads its rows' recurrent states, and
    /// `keeps("state_rows")` is false (they would be copied out for
    /// nothing, ~1 MB per layer and row at 0.8B).
    pub last_only: bool,
    /// Whether host linears give zeros instead of their products
    /// (`placeholder`): for a caller that keeps only the graph, never the
    /// values the recording run computed.
    pub skip_linears: bool,
}

impl<E: Executor> Capture<E> {
    /// `weights`: the model's bound parameters by checkpoint name;
    /// `context`: rows of the past KV buffers the graph declares.
    pub fn new(inner: E, weights: &[(String, Tensor)], context: usize) -> Capture<E> {
        let mut keep = vec![];
        let mut weight_names = HashMap::new();
        for (name, t) in weights {
            weight_names.insert(key(t), name.clone());
            keep.push(Arc::downgrade(t.buffer()));
        }
        Capture {
            inner,
            graph: Graph {
                context,
                ..Graph::default()
            },
            ids: HashMap::new(),
            views: HashMap::new(),
            weight_names,
            params: HashMap::new(),
            past_len: None,
            keep,
            problems: vec![],
            undeclared: HashSet::new(),
            side_outputs: false,
            last_only: false,
            skip_linears: false,
        }
    }

    fn remember(&mut self, t: &Tensor, id: ValueId) {
        self.ids.insert(key(t), id);
        self.keep.push(Arc::downgrade(t.buffer()));
    }

    /// The value id of a tensor an op reads.
    fn value_of(&mut self, t: &Tensor, op: &Op) -> Result<ValueId, BackendError> {
        let k = key(t);
        if let Some(&id) = self.ids.get(&k) {
            return Ok(id);
        }
        if let Some(name) = self.weight_names.get(&k).cloned() {
            let id = match self.params.get(&name) {
                Some(&id) => id,
                None => {
                    let id = self
                        .graph
                        .push(TensorMeta::of(t), Def::Param { name: name.clone() });
                    self.params.insert(name, id);
                    id
                }
            };
            self.ids.insert(k, id);
            return Ok(id);
        }
        if self.views.contains_key(&k) {
            return Err(capture_err(format!(
                "`{}` reads the KV cache's history directly; a captured graph only lets `sdpa` attend over it",
                op.name()
            )));
        }
        Err(capture_err(format!(
            "`{}` reads a {}{:?} tensor that reached the interpreter without passing the executor",
            op.name(),
            t.dtype(),
            t.shape()
        )))
    }

    /// The recorded graph with `output` as `logits`, or why it cannot be
    /// replayed.
    pub fn finish(mut self, output: &Tensor) -> Result<Graph, String> {
        if !self.problems.is_empty() {
            return Err(self.problems.join("; "));
        }
        let id = self
            .value_of(output, &Op::Reshape { shape: vec![] })
            .map_err(|e| e.to_string())?;
        self.graph.outputs.insert(0, ("logits".into(), id));
        Ok(self.graph)
    }

    fn past_len(&mut self) -> ValueId {
        *self.past_len.get_or_insert_with(|| {
            self.graph.push(
                TensorMeta::new(vec![1], DType::I32),
                Def::Input {
                    name: "past_len".into(),
                },
            )
        })
    }
}

/// Why a recurrent layer whose script declares no state shapes is not
/// captured.
fn undeclared_state_problem(layer: usize) -> String {
    format!("layer {layer} reads its recurrent state (linear attention) without declaring its shapes (`recurrent_state(shapes)`), so a captured graph cannot take it as inputs; run it eagerly")
}

fn capture_err(msg: String) -> BackendError {
    BackendError::Invalid { op: "capture", msg }
}

impl<E: Executor> Executor for Capture<E> {
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        // Attention over the appended cache becomes CachedSdpa.
        if let (
            Op::Sdpa {
                causal,
                scale,
                window,
            },
            [q, k, v],
        ) = (op, inputs)
        {
            let (kv, vv) = (
                self.views.get(&key(k)).copied(),
                self.views.get(&key(v)).copied(),
            );
            if let (Some(kv), Some(vv)) = (kv, vv) {
                if kv.layer != vv.layer || !kv.keys || vv.keys {
                    return Err(capture_err(
                        "sdpa reads keys and values of different cache layers".into(),
                    ));
                }
                let out = self.inner.run(op, inputs)?;
                let layer = self
                    .graph
                    .kv
                    .iter()
                    .find(|l| l.layer == kv.layer)
                    .cloned()
                    .ok_or_else(|| capture_err("cache view without its layer".into()))?;
                let qid = self.value_of(q, op)?;
                let len = self.past_len();
                let id = self
                    .graph
                    .node(
                        Op::CachedSdpa {
                            causal: *causal,
                            scale: *scale,
                            window: *window,
                        },
                        vec![
                            qid,
                            layer.present_key,
                            layer.present_value,
                            layer.past_key,
                            layer.past_value,
                            len,
                        ],
                    )
                    .map_err(|e| capture_err(e.0))?;
                self.remember(&out, id);
                return Ok(out);
            }
        }
        let ids = inputs
            .iter()
            .map(|t| self.value_of(t, op))
            .collect::<Result<Vec<_>, _>>()?;
        let id = self
            .graph
            .node(op.clone(), ids)
            .map_err(|e| capture_err(e.0))?;
        let skipped = match self.skip_linears {
            true => placeholder(op, inputs, &self.graph.values[id].meta),
            false => None,
        };
        let out = match skipped {
            Some(t) => t?,
            None => self.inner.run(op, inputs)?,
        };
        if self.graph.values[id].meta != TensorMeta::of(&out) {
            return Err(capture_err(format!(
                "`{}` gave {}{:?} but its rules say {}",
                op.name(),
                out.dtype(),
                out.shape(),
                self.graph.values[id].meta
            )));
        }
        self.remember(&out, id);
        Ok(out)
    }

    fn constant(&mut self, t: Tensor) -> Result<Tensor, BackendError> {
        // The graph keeps the host data (passes fold constants on the CPU;
        // the compiled executor uploads them to its backend once).
        let host = t.clone();
        let t = self.inner.constant(t)?;
        let id = self
            .graph
            .push(TensorMeta::of(&t), Def::Const { data: host });
        self.remember(&t, id);
        Ok(t)
    }

    fn input(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        let t = self.inner.input(name, t)?;
        let id = self
            .graph
            .push(TensorMeta::of(&t), Def::Input { name: name.into() });
        self.remember(&t, id);
        Ok(t)
    }

    fn weight(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        let t = self.inner.weight(name, t)?;
        self.weight_names.insert(key(&t), name.to_string());
        self.keep.push(Arc::downgrade(t.buffer()));
        Ok(t)
    }

    fn read(&mut self, t: &Tensor) -> Result<Tensor, BackendError> {
        self.problems.push(format!(
            "the forward reads the data of a {}{:?} tensor (to_list, item or an index from a tensor), so its control flow depends on data; run it eagerly",
            t.dtype(),
            t.shape()
        ));
        self.inner.read(t)
    }

    fn kv_append(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), BackendError> {
        if self.graph.kv.iter().any(|l| l.layer == layer) {
            return Err(capture_err(format!(
                "layer {layer} of the cache is appended twice in one forward"
            )));
        }
        let op = Op::Reshape { shape: vec![] };
        let (kid, vid) = (self.value_of(k, &op)?, self.value_of(v, &op)?);
        let c = self.graph.context;
        let dtype = cache.dtype();
        let mut past = |what: &str, t: &Tensor| {
            let mut shape = t.shape().to_vec();
            shape[0] = c;
            self.graph.push(
                TensorMeta::new(shape, dtype),
                Def::Input {
                    name: format!("{what}.{layer}"),
                },
            )
        };
        let (pk, pv) = (past("past_key", k), past("past_value", v));
        self.graph.kv.push(KvLayer {
            layer,
            past_key: pk,
            past_value: pv,
            present_key: kid,
            present_value: vid,
        });
        self.graph
            .outputs
            .push((format!("present_key.{layer}"), kid));
        self.graph
            .outputs
            .push((format!("present_value.{layer}"), vid));
        let (keys, values) = self.inner.kv_append(cache, layer, k, v)?;
        self.views
            .insert(key(&keys), CacheView { layer, keys: true });
        self.views
            .insert(key(&values), CacheView { layer, keys: false });
        self.keep.push(Arc::downgrade(keys.buffer()));
        self.keep.push(Arc::downgrade(values.buffer()));
        Ok((keys, values))
    }

    fn state_read(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        shapes: Option<&[TensorMeta]>,
    ) -> Result<Option<Vec<Tensor>>, BackendError> {
        let Some(metas) = shapes else {
            self.undeclared.insert(layer);
            self.problems.push(undeclared_state_problem(layer));
            return self.inner.state_read(cache, layer, None);
        };
        if self.graph.states.iter().any(|s| s.layer == layer) {
            return Err(capture_err(format!(
                "layer {layer}'s recurrent state is read twice in one forward"
            )));
        }
        // The stored state (none on the scratch cache a capture runs on) or
        // zeros, made on the inner executor: the graph takes them as
        // inputs, not as the ops that made them.
        let tensors = match self.inner.state_read(cache, layer, shapes)? {
            Some(ts) => ts,
            None => metas
                .iter()
                .map(|m| {
                    self.inner.run(
                        &Op::Full {
                            shape: m.shape.clone(),
                            value: 0.0,
                            dtype: m.dtype,
                        },
                        &[],
                    )
                })
                .collect::<Result<_, _>>()?,
        };
        let mut inputs = vec![];
        for (k, t) in tensors.iter().enumerate() {
            let id = self.graph.push(
                TensorMeta::of(t),
                Def::Input {
                    name: format!("state.{layer}.{k}"),
                },
            );
            self.remember(t, id);
            inputs.push(id);
        }
        self.graph.states.push(StateLayer {
            layer,
            inputs,
            outputs: vec![],
            tokens: 0,
        });
        Ok(Some(tensors))
    }

    fn state_write(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        states: Vec<Tensor>,
        tokens: usize,
    ) -> Result<(), BackendError> {
        let Some(at) = self.graph.states.iter().position(|s| s.layer == layer) else {
            if self.undeclared.insert(layer) {
                self.problems.push(format!("layer {layer} writes a recurrent state it did not read with declared shapes (`recurrent_state(shapes)`), so a captured graph cannot carry it; run it eagerly"));
            }
            return self.inner.state_write(cache, layer, states, tokens);
        };
        if !self.graph.states[at].outputs.is_empty() {
            return Err(capture_err(format!(
                "layer {layer}'s recurrent state is written twice in one forward"
            )));
        }
        let ins = self.graph.states[at].inputs.clone();
        if ins.len() != states.len() {
            return Err(capture_err(format!(
                "layer {layer}'s recurrent state is read as {} tensors but written as {}: a captured graph carries one fixed state from step to step; run it eagerly",
                ins.len(),
                states.len()
            )));
        }
        let op = Op::Reshape { shape: vec![] };
        let mut outputs = vec![];
        for (k, (t, &i)) in states.iter().zip(&ins).enumerate() {
            let read = &self.graph.values[i].meta;
            if TensorMeta::of(t) != *read {
                return Err(capture_err(format!(
                    "layer {layer}'s recurrent state {k} is read as {read} but written as {}: a captured graph carries a state of one fixed shape from step to step, so the next step would read other shapes than this graph takes; declare the shapes the forward writes, or run it eagerly",
                    TensorMeta::of(t)
                )));
            }
            let id = self.value_of(t, &op)?;
            self.graph
                .outputs
                .push((format!("new_state.{layer}.{k}"), id));
            outputs.push(id);
        }
        let s = &mut self.graph.states[at];
        s.outputs = outputs;
        s.tokens = tokens;
        self.inner.state_write(cache, layer, states, tokens)
    }

    fn keeps(&self, name: &str) -> bool {
        self.side_outputs && !(self.last_only && name == "state_rows")
    }

    fn emit(&mut self, name: &str, t: &Tensor) -> Result<(), BackendError> {
        if self.side_outputs {
            let id = self.value_of(t, &Op::Reshape { shape: vec![] })?;
            // Output names are unique: the n-th output is `side.NAME#n`.
            let n = self.graph.outputs.len();
            self.graph.outputs.push((format!("side.{name}#{n}"), id));
        }
        Ok(())
    }
}
