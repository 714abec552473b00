//! Rotary tables as graph inputs. A captured step computes its `cos`/`sin`
//! tables from the `positions` input (cast, scale by the inverse
//! frequencies, Cos, Sin). An NPU wants neither that arithmetic on large
//! angles (it quantizes badly and HTP has no accurate wide-range Cos) nor
//! a gather of positions, so the tables of the step become inputs
//! (`rope_cos`, `rope_sin`, `[N, rotary_dim / 2]`) and the host feeds rows
//! of a table computed once at export: rows `0..context` of every table,
//! evaluated by the CPU backend on exactly the graph's own arithmetic, so
//! a host that feeds row `p` for position `p` feeds what eager computes.

use std::collections::HashMap;

use mllm_backends::{Backend, CpuBackend, DType, Op, Tensor};

use crate::ir::{Def, Graph, ValueId};
use crate::{GraphError, Result};

/// One pair of rotary tables turned into inputs.
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub cos_input: String,
    pub sin_input: String,
    /// Values per row (`rotary_dim / 2`).
    pub width: usize,
    /// Rows: one per position `0..rows` (the graph's context).
    pub rows: usize,
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    /// Rows of the positions input (3 for multimodal rotary): the table
    /// holds text positions (every row equal); image tokens' tables the
    /// host computes itself.
    pub position_rows: usize,
}

/// Which values depend on value `from`.
fn dependents(g: &Graph, from: ValueId) -> Vec<bool> {
    let mut dep = vec![false; g.values.len()];
    dep[from] = true;
    for i in from + 1..g.values.len() {
        dep[i] = g.operands(i).iter().any(|&j| dep[j]);
    }
    dep
}

/// Evaluates `wanted` values for one `positions` tensor with the CPU
/// backend (the values reachable from them: positions and constants only).
fn evaluate(
    g: &Graph,
    pos: ValueId,
    positions: &Tensor,
    wanted: &[ValueId],
) -> Result<Vec<Vec<f32>>> {
    let mut done: HashMap<ValueId, Tensor> = HashMap::new();
    let mut stack: Vec<ValueId> = wanted.to_vec();
    // Topological order is the value order: evaluate the cone ascending.
    let mut cone = vec![false; g.values.len()];
    while let Some(i) = stack.pop() {
        if !cone[i] {
            cone[i] = true;
            stack.extend_from_slice(g.operands(i));
        }
    }
    for (i, &inside) in cone.iter().enumerate() {
        if !inside {
            continue;
        }
        let t = match &g.values[i].def {
            _ if i == pos => positions.clone(),
            Def::Const { data } => data.clone(),
            Def::Node { op, inputs } => {
                let ins: Vec<&Tensor> = inputs.iter().map(|j| &done[j]).collect();
                CpuBackend.run(op, &ins)?
            }
            Def::Input { name } | Def::Param { name } => {
                return Err(GraphError(format!(
                    "the rotary tables read `{name}` besides positions; --target qnn can only turn tables computed from positions into inputs"
                )))
            }
        };
        done.insert(i, t);
    }
    wanted.iter().map(|w| Ok(done[w].to_f32_vec()?)).collect()
}

/// Replaces the rotary tables computed from `positions` with graph inputs
/// and drops what only they read (`positions` too, when nothing else does).
/// A graph without a `positions` input (`--no-cache`: constant tables) is
/// returned as it is.
pub fn tables_as_inputs(g: Graph) -> Result<(Graph, Vec<RopeTable>)> {
    let Some(pos) = g.input("positions") else {
        return Ok((g, vec![]));
    };
    let pm = g.values[pos].meta.clone();
    if pm.dtype != DType::I32 || pm.rank() == 0 || pm.rank() > 2 {
        return Err(GraphError(format!(
            "positions are {pm}; --target qnn takes i32 [N] (or [rows, N]) positions"
        )));
    }
    let dep = dependents(&g, pos);
    let mut pairs: Vec<(ValueId, ValueId)> = vec![];
    for v in &g.values {
        if let Def::Node {
            op: Op::ApplyRope,
            inputs,
        } = &v.def
        {
            let (c, s) = (inputs[1], inputs[2]);
            if (dep[c] || dep[s]) && !pairs.contains(&(c, s)) {
                pairs.push((c, s));
            }
        }
    }
    let n = *pm.shape.last().unwrap_or(&0);
    let context = g.context.max(n);
    let mut tables = vec![];
    for (k, &(c, s)) in pairs.iter().enumerate() {
        let (cm, sm) = (&g.values[c].meta, &g.values[s].meta);
        if cm.shape != sm.shape || cm.rank() != 2 || cm.shape[0] != n {
            return Err(GraphError(format!(
                "rotary tables {cm} and {sm}; --target qnn feeds [N, width] tables for N = {n} positions"
            )));
        }
        let width = cm.shape[1];
        let (mut cos, mut sin) = (vec![], vec![]);
        // Rows 0..context, N positions at a time (the graph's own shapes);
        // every row of multimodal positions gets the same (text) positions.
        let mut start = 0;
        while start < context {
            let one: Vec<i32> = (start..start + n).map(|p| p as i32).collect();
            let rows = pm.numel() / n.max(1);
            let vals = (0..rows).flat_map(|_| one.iter().copied()).collect();
            let t = Tensor::from_i32(vals, pm.shape.clone())?;
            let out = evaluate(&g, pos, &t, &[c, s])?;
            let take = n.min(context - start) * width;
            cos.extend_from_slice(&out[0][..take]);
            sin.extend_from_slice(&out[1][..take]);
            start += n;
        }
        let suffix = if pairs.len() > 1 {
            format!(".{k}")
        } else {
            String::new()
        };
        tables.push(RopeTable {
            cos_input: format!("rope_cos{suffix}"),
            sin_input: format!("rope_sin{suffix}"),
            width,
            rows: context,
            cos,
            sin,
            position_rows: pm.numel() / n.max(1),
        });
    }
    let mut out = g.clone();
    for (&(c, s), t) in pairs.iter().zip(&tables) {
        out.values[c].def = Def::Input {
            name: t.cos_input.clone(),
        };
        out.values[s].def = Def::Input {
            name: t.sin_input.clone(),
        };
    }
    // Keep what the outputs read and every input still read (or untouched).
    let nv = out.values.len();
    let mut live = vec![false; nv];
    for (_, o) in &out.outputs {
        live[*o] = true;
    }
    for i in (0..nv).rev() {
        if live[i] {
            for &j in out.operands(i) {
                live[j] = true;
            }
        }
    }
    for (i, v) in out.values.iter().enumerate() {
        if matches!(v.def, Def::Input { .. }) && !dep[i] {
            live[i] = true;
        }
    }
    let same: Vec<usize> = (0..nv).collect();
    let out = out.rebuild(&live, &same)?;
    Ok((out, tables))
}
