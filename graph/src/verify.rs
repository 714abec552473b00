//! The verifier: every pass's result is checked before the next runs.
//! SSA order (operands defined earlier), types agree with `Op::infer`,
//! outputs, KV-cache and recurrent-state I/O name existing values of the
//! right kind.

use mllm_backends::TensorMeta;

use crate::ir::{Def, Graph};
use crate::{err, Result};

pub fn verify(g: &Graph) -> Result<()> {
    let mut names = std::collections::HashSet::new();
    for (i, v) in g.values.iter().enumerate() {
        match &v.def {
            Def::Node { op, inputs } => {
                if let Some(&j) = inputs.iter().find(|&&j| j >= i) {
                    return err(format!("%{i} ({}) reads %{j}, defined later", op.name()));
                }
                let metas: Vec<TensorMeta> =
                    inputs.iter().map(|&j| g.values[j].meta.clone()).collect();
                let meta = op
                    .infer(&metas)
                    .map_err(|e| crate::GraphError(format!("%{i} ({}): {e}", op.name())))?;
                if meta != v.meta {
                    return err(format!(
                        "%{i} ({}) is typed {} but its op gives {meta}",
                        op.name(),
                        v.meta
                    ));
                }
            }
            Def::Input { name } | Def::Param { name } => {
                if !names.insert(name.clone()) {
                    return err(format!("%{i}: `{name}` is defined twice"));
                }
            }
            Def::Const { data } => {
                if TensorMeta::of(data) != v.meta {
                    return err(format!("%{i}: constant data does not match {}", v.meta));
                }
            }
        }
    }
    let n = g.values.len();
    for (name, o) in &g.outputs {
        if *o >= n {
            return err(format!("output `{name}` names %{o}, outside the graph"));
        }
    }
    for l in &g.kv {
        for (what, id) in [("past_key", l.past_key), ("past_value", l.past_value)] {
            let ok = matches!(g.values.get(id).map(|v| &v.def), Some(Def::Input { name }) if *name == format!("{what}.{}", l.layer));
            if !ok {
                return err(format!(
                    "layer {}: {what} is not the input `{what}.{}`",
                    l.layer, l.layer
                ));
            }
        }
        if l.present_key >= n || l.present_value >= n {
            return err(format!("layer {}: present rows outside the graph", l.layer));
        }
    }
    for s in &g.states {
        for (k, &id) in s.inputs.iter().enumerate() {
            let want = format!("state.{}.{k}", s.layer);
            let ok = matches!(g.values.get(id).map(|v| &v.def), Some(Def::Input { name }) if *name == want);
            if !ok {
                return err(format!(
                    "layer {}: state {k} is not the input `{want}`",
                    s.layer
                ));
            }
        }
        if s.outputs.is_empty() {
            continue;
        }
        if s.outputs.len() != s.inputs.len() {
            return err(format!(
                "layer {}: {} state inputs but {} new states",
                s.layer,
                s.inputs.len(),
                s.outputs.len()
            ));
        }
        for (k, (&i, &o)) in s.inputs.iter().zip(&s.outputs).enumerate() {
            if o >= n {
                return err(format!(
                    "layer {}: new state {k} outside the graph",
                    s.layer
                ));
            }
            if g.values[i].meta != g.values[o].meta {
                return err(format!(
                    "layer {}: state {k} comes in as {} but leaves as {}",
                    s.layer, g.values[i].meta, g.values[o].meta
                ));
            }
        }
    }
    Ok(())
}
