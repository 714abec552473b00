//! The compiled executor: replays a graph on a backend, node by node, with
//! no interpreter. Parameters and constants are bound once; each node's
//! result is dropped after its last reader (the memory plan's lifetimes).
//!
//! The KV cache: `CachedSdpa` nodes read `past_key.N` / `past_value.N` and
//! the new rows. On a host backend the executor keeps the cache as one
//! growing `KvCache` (the same type eager runs append to): the node appends
//! the new rows (the "host copies present rows into the past buffers" step)
//! and attends over the whole prefix with the backend's `Sdpa`, so compiled
//! and eager steps give the same numbers and can be interleaved.

use std::collections::HashMap;

use mllm_backends::{Backend, KvCache, Op, Tensor};

use crate::ir::{Def, Graph, ValueId};
use crate::{err, Result};

pub struct Compiled<B: Backend> {
    pub graph: Graph,
    backend: B,
    /// Parameters and constants, bound once.
    fixed: Vec<Option<Tensor>>,
    last: Vec<usize>,
    /// `past_key.N` input -> layer N.
    layer_of: HashMap<ValueId, usize>,
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
        let last = graph.last_uses();
        Ok(Compiled {
            graph,
            backend,
            fixed,
            last,
            layer_of,
        })
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
        let g = &self.graph;
        let mut slots: Vec<Option<Tensor>> = self.fixed.clone();
        let past = g.kv.first().map_or(0, |l| kv.len(l.layer));
        for (name, id) in g.inputs() {
            let t = if name == "past_len" {
                Tensor::from_i32(vec![past as i32], vec![1])?
            } else if name.starts_with("past_key.") || name.starts_with("past_value.") {
                continue; // read by CachedSdpa through `kv`
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
                Op::CachedSdpa { causal, scale } => {
                    let layer = self.layer_of[&inputs[3]];
                    if kv.len(layer) != past {
                        return err(format!(
                            "layer {layer} caches {} positions, layer 0 {past}",
                            kv.len(layer)
                        ));
                    }
                    let (q, k, v) = (
                        get(&slots, inputs[0])?,
                        get(&slots, inputs[1])?,
                        get(&slots, inputs[2])?,
                    );
                    let (k, v) = (self.backend.download(k)?, self.backend.download(v)?);
                    let (keys, values) = kv
                        .append(layer, &k, &v)
                        .map_err(|m| crate::GraphError(format!("kv cache: {m}")))?;
                    let sdpa = Op::Sdpa {
                        causal: *causal,
                        scale: *scale,
                    };
                    self.backend.run(&sdpa, &[q, &keys, &values])?
                }
                _ => {
                    let args: Vec<&Tensor> = inputs
                        .iter()
                        .map(|&j| get(&slots, j))
                        .collect::<Result<_>>()?;
                    self.backend.run(op, &args)?
                }
            };
            slots[i] = Some(out);
            for &j in inputs {
                if self.last[j] == i && matches!(g.values[j].def, Def::Node { .. }) {
                    slots[j] = None;
                }
            }
        }
        let kv_rows: Vec<ValueId> =
            g.kv.iter()
                .flat_map(|l| [l.present_key, l.present_value])
                .collect();
        g.outputs
            .iter()
            .filter(|(_, id)| !kv_rows.contains(id))
            .map(|(name, id)| Ok((name.clone(), self.backend.download(get(&slots, *id)?)?)))
            .collect()
    }
}

fn get(slots: &[Option<Tensor>], i: ValueId) -> Result<&Tensor> {
    slots[i]
        .as_ref()
        .ok_or_else(|| crate::GraphError(format!("%{i} is read after it was freed")))
}
