//! The IR: one `Vec` of values in topological order; each value is defined
//! once (SSA) by a graph input, a checkpoint parameter, a constant, or one
//! op over earlier values.

use mllm_backends::{Op, Tensor, TensorMeta};

pub type ValueId = usize;

#[derive(Clone, Debug)]
pub enum Def {
    /// Supplied by the runner at every step (`input_ids`, `positions`,
    /// `past_len`, `past_key.3`, ...).
    Input { name: String },
    /// A checkpoint tensor, by its name in the checkpoint.
    Param { name: String },
    /// Data fixed at capture (script literals, folded rope tables).
    Const { data: Tensor },
    /// `op` over earlier values.
    Node { op: Op, inputs: Vec<ValueId> },
}

#[derive(Clone, Debug)]
pub struct GValue {
    pub meta: TensorMeta,
    pub def: Def,
}

/// One decoder layer's KV cache as graph I/O: the past keys and values of
/// the fixed context in, the new rows out (the host copies them into the
/// past buffers after the step, as NPU runtimes do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayer {
    pub layer: usize,
    pub past_key: ValueId,
    pub past_value: ValueId,
    pub present_key: ValueId,
    pub present_value: ValueId,
}

/// One recurrent layer's state (Gated DeltaNet's conv and delta-rule
/// states) as graph I/O: the stored state in (`state.L.K`, zeros before
/// the layer's first step), the new state out (`new_state.L.K`, of the
/// same types: a graph carries a state of one fixed shape from step to
/// step). The host stores the outputs back into the cache after the step,
/// covering `tokens` more positions (what the script told
/// `set_recurrent_state` when it was captured). `outputs` is empty when
/// the forward only reads the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateLayer {
    pub layer: usize,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub tokens: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<GValue>,
    /// Named results: `logits`, `present_key.N`, `present_value.N`,
    /// `new_state.N.K`.
    pub outputs: Vec<(String, ValueId)>,
    pub kv: Vec<KvLayer>,
    pub states: Vec<StateLayer>,
    /// Rows the past buffers hold (the context the graph was captured for).
    pub context: usize,
}

impl Graph {
    pub fn push(&mut self, meta: TensorMeta, def: Def) -> ValueId {
        self.values.push(GValue { meta, def });
        self.values.len() - 1
    }

    /// Adds `op` over `inputs`, typed by `Op::infer`.
    pub fn node(&mut self, op: Op, inputs: Vec<ValueId>) -> crate::Result<ValueId> {
        let metas: Vec<TensorMeta> = inputs
            .iter()
            .map(|&i| self.values[i].meta.clone())
            .collect();
        let meta = op.infer(&metas)?;
        Ok(self.push(meta, Def::Node { op, inputs }))
    }

    /// Named graph inputs, in order.
    pub fn inputs(&self) -> impl Iterator<Item = (&str, ValueId)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match &v.def {
                Def::Input { name } => Some((name.as_str(), i)),
                _ => None,
            })
    }

    pub fn input(&self, name: &str) -> Option<ValueId> {
        self.inputs().find(|(n, _)| *n == name).map(|(_, i)| i)
    }

    pub fn output(&self, name: &str) -> Option<ValueId> {
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| *i)
    }

    pub fn node_count(&self) -> usize {
        self.values
            .iter()
            .filter(|v| matches!(v.def, Def::Node { .. }))
            .count()
    }

    /// Sets `out`'s outputs, KV layers and recurrent states to `self`'s, with every value
    /// renamed through `map` (what a pass that rebuilds the value list does
    /// last).
    pub fn copy_io_to(&self, out: &mut Graph, map: &[ValueId]) {
        out.outputs = self
            .outputs
            .iter()
            .map(|(s, o)| (s.clone(), map[*o]))
            .collect();
        out.kv = self
            .kv
            .iter()
            .map(|l| KvLayer {
                layer: l.layer,
                past_key: map[l.past_key],
                past_value: map[l.past_value],
                present_key: map[l.present_key],
                present_value: map[l.present_value],
            })
            .collect();
        out.states = self
            .states
            .iter()
            .map(|s| StateLayer {
                layer: s.layer,
                inputs: s.inputs.iter().map(|&i| map[i]).collect(),
                outputs: s.outputs.iter().map(|&o| map[o]).collect(),
                tokens: s.tokens,
            })
            .collect();
    }

    /// Inputs of value `i` (empty unless it is a node).
    pub fn operands(&self, i: ValueId) -> &[ValueId] {
        match &self.values[i].def {
            Def::Node { inputs, .. } => inputs,
            _ => &[],
        }
    }

    /// For each value, the index of the last node reading it (or of itself),
    /// with graph outputs living to the end.
    pub fn last_uses(&self) -> Vec<usize> {
        let mut last: Vec<usize> = (0..self.values.len()).collect();
        for i in 0..self.values.len() {
            for &j in self.operands(i) {
                last[j] = last[j].max(i);
            }
        }
        for (_, o) in &self.outputs {
            last[*o] = usize::MAX;
        }
        last
    }

    /// Rebuilds the graph keeping only `keep[i]` values, renumbered in order;
    /// `map` redirects values (after a rewrite) before renumbering.
    pub(crate) fn rebuild(&self, keep: &[bool], redirect: &[ValueId]) -> crate::Result<Graph> {
        let mut new_id = vec![usize::MAX; self.values.len()];
        let mut g = Graph {
            context: self.context,
            ..Graph::default()
        };
        let resolve = |new_id: &[usize], mut i: ValueId| -> crate::Result<ValueId> {
            while redirect[i] != i {
                i = redirect[i];
            }
            match new_id[i] {
                usize::MAX => crate::err(format!("value %{i} is used but was removed")),
                n => Ok(n),
            }
        };
        for (i, v) in self.values.iter().enumerate() {
            if !keep[i] || redirect[i] != i {
                continue;
            }
            let def = match &v.def {
                Def::Node { op, inputs } => Def::Node {
                    op: op.clone(),
                    inputs: inputs
                        .iter()
                        .map(|&j| resolve(&new_id, j))
                        .collect::<crate::Result<_>>()?,
                },
                other => other.clone(),
            };
            new_id[i] = g.push(v.meta.clone(), def);
        }
        for (name, o) in &self.outputs {
            g.outputs.push((name.clone(), resolve(&new_id, *o)?));
        }
        for l in &self.kv {
            g.kv.push(KvLayer {
                layer: l.layer,
                past_key: resolve(&new_id, l.past_key)?,
                past_value: resolve(&new_id, l.past_value)?,
                present_key: resolve(&new_id, l.present_key)?,
                present_value: resolve(&new_id, l.present_value)?,
            });
        }
        for s in &self.states {
            let ids = |v: &[ValueId]| -> crate::Result<Vec<ValueId>> {
                v.iter().map(|&i| resolve(&new_id, i)).collect()
            };
            g.states.push(StateLayer {
                layer: s.layer,
                inputs: ids(&s.inputs)?,
                outputs: ids(&s.outputs)?,
                tokens: s.tokens,
            });
        }
        Ok(g)
    }
}
