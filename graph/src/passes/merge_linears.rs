//! Linears that read one input merge into one `merged_linear` (q/k/v,
//! gate/up), and an RMSNorm whose only readers are those linears folds into
//! it (`norm_eps`): the norm and the activation quantization then run in one
//! pass over the rows, and the normed rows never become a tensor.
//!
//! A linear qualifies when it has no bias and its weight is a checkpoint
//! parameter; quantized weights merge with quantized weights of any type,
//! float weights with weights of the same dtype. Each original result
//! becomes a view of the merged one (a dim-0 slice of the flat result, then
//! a reshape), so readers are untouched. A lone linear keeps its op unless
//! a norm folds into it (the final norm and the LM head). The merged node
//! sits where the group's first linear was; weights defined later (capture
//! defines parameters at first use) move up with it.

use std::collections::HashMap;

use mllm_backends::{DType, Op, TensorMeta};

use crate::ir::{Def, Graph, ValueId};
use crate::Result;

/// One merged node: its linears in order, the input, the folded norm.
struct Group {
    linears: Vec<ValueId>,
    /// The value the linears read, or the norm's input when it folds.
    x: ValueId,
    /// `(eps, norm weight, the norm's own value)` when the norm folds.
    norm: Option<(f32, ValueId, ValueId)>,
}

/// Weights that may share a merged node: any quantized ones together,
/// float ones by dtype.
fn weight_class(dtype: DType) -> Option<String> {
    match dtype {
        DType::Quant(_) => Some("quant".into()),
        d if d.is_float() => Some(d.to_string()),
        _ => None,
    }
}

fn groups(g: &Graph) -> Vec<Group> {
    let n = g.values.len();
    let mut readers: Vec<Vec<ValueId>> = vec![Vec::new(); n];
    for i in 0..n {
        for &j in g.operands(i) {
            readers[j].push(i);
        }
    }
    let is_output = |i: ValueId| g.outputs.iter().any(|(_, o)| *o == i);
    // Qualifying linears by (input, weight class), in graph order.
    let mut order: Vec<(ValueId, String)> = Vec::new();
    let mut by_key: HashMap<(ValueId, String), Vec<ValueId>> = HashMap::new();
    for (i, v) in g.values.iter().enumerate() {
        let Def::Node {
            op: Op::Linear,
            inputs,
        } = &v.def
        else {
            continue;
        };
        let [x, w] = inputs[..] else { continue };
        let wv = &g.values[w];
        let Some(class) = weight_class(wv.meta.dtype) else {
            continue;
        };
        if !matches!(wv.def, Def::Param { .. }) || wv.meta.shape.len() != 2 {
            continue;
        }
        let key = (x, class);
        if !by_key.contains_key(&key) {
            order.push(key.clone());
        }
        by_key.entry(key).or_default().push(i);
    }
    let mut out = Vec::new();
    for key in order {
        let linears = by_key.remove(&key).unwrap_or_default();
        let x = key.0;
        // The norm folds when these linears are its only readers.
        let norm = match &g.values[x].def {
            Def::Node {
                op: Op::RmsNorm { eps },
                inputs,
            } if !is_output(x)
                && readers[x].iter().all(|r| linears.contains(r))
                && g.values[inputs[0]].meta.dtype == DType::F32 =>
            {
                Some((*eps, inputs[1], x))
            }
            _ => None,
        };
        if linears.len() < 2 && norm.is_none() {
            continue;
        }
        let x = match &g.values[x].def {
            Def::Node { inputs, .. } if norm.is_some() => inputs[0],
            _ => x,
        };
        out.push(Group { linears, x, norm });
    }
    out
}

pub fn merge_linears(g: &Graph) -> Result<Graph> {
    let n = g.values.len();
    let groups = groups(g);
    // The group each linear belongs to; folded norms vanish.
    let mut group_of: Vec<Option<usize>> = vec![None; n];
    let mut folded = vec![false; n];
    for (gi, grp) in groups.iter().enumerate() {
        for &l in &grp.linears {
            group_of[l] = Some(gi);
        }
        if let Some((_, _, nv)) = grp.norm {
            folded[nv] = true;
        }
    }
    let mut out = Graph {
        context: g.context,
        ..Graph::default()
    };
    let mut map: Vec<ValueId> = vec![usize::MAX; n];
    let copy = |out: &mut Graph, map: &mut [ValueId], i: ValueId| {
        let v = &g.values[i];
        let def = match &v.def {
            Def::Node { op, inputs } => Def::Node {
                op: op.clone(),
                inputs: inputs.iter().map(|&j| map[j]).collect(),
            },
            other => other.clone(),
        };
        map[i] = out.push(TensorMeta::clone(&v.meta), def);
    };
    for i in 0..n {
        if map[i] != usize::MAX || folded[i] {
            continue; // emitted early (a weight, a merged linear) or folded
        }
        let Some(gi) = group_of[i] else {
            copy(&mut out, &mut map, i);
            continue;
        };
        let grp = &groups[gi];
        let weight = |l: ValueId| g.operands(l)[1];
        for &l in &grp.linears {
            if map[weight(l)] == usize::MAX {
                copy(&mut out, &mut map, weight(l));
            }
        }
        let mut inputs = vec![map[grp.x]];
        if let Some((_, w, _)) = grp.norm {
            inputs.push(map[w]);
        }
        inputs.extend(grp.linears.iter().map(|&l| map[weight(l)]));
        let op = Op::MergedLinear {
            parts: grp.linears.len(),
            norm_eps: grp.norm.map(|(eps, _, _)| eps),
        };
        let merged = out.node(op, inputs)?;
        let mut start = 0;
        for &l in &grp.linears {
            let meta = &g.values[l].meta;
            let len = meta.numel();
            let part = out.node(
                Op::Slice {
                    dim: 0,
                    start,
                    end: start + len,
                    step: 1,
                },
                vec![merged],
            )?;
            map[l] = out.node(
                Op::Reshape {
                    shape: meta.shape.clone(),
                },
                vec![part],
            )?;
            start += len;
        }
    }
    g.copy_io_to(&mut out, &map);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::parse_ops;
    use crate::text::to_text;
    use mllm_backends::quant::{self, QuantType};
    use mllm_backends::{BinaryOp, KvCache, Tensor};

    fn param(g: &mut Graph, name: &str, t: &Tensor) -> ValueId {
        g.push(TensorMeta::of(t), Def::Param { name: name.into() })
    }

    fn q4(n: usize, k: usize, seed: f32) -> Tensor {
        let v: Vec<f32> = (0..n * k).map(|i| (i as f32 * seed).sin()).collect();
        let b = quant::quantize(QuantType::Q4_0, &v).expect("quantize");
        Tensor::from_quant(b, QuantType::Q4_0, vec![n, k]).expect("q4")
    }

    /// n = rms_norm(x); q, k, v = linear(n, .) with weights defined at first
    /// use; out = q + k (concat with v); a second linear of x (float) alone.
    #[test]
    fn qkv_merge_and_their_norm_folds() {
        let (k, rows) = (64, 3);
        let ws = [q4(64, k, 0.37), q4(32, k, 0.11), q4(32, k, 0.53)];
        let wf = Tensor::from_f32((0..8 * k).map(|i| (i as f32).cos()).collect(), vec![8, k])
            .expect("wf");
        let gain =
            Tensor::from_f32((0..k).map(|i| 1.0 + i as f32 / 64.0).collect(), vec![k]).expect("g");
        let mut g = Graph::default();
        let x = g.push(
            TensorMeta::new(vec![rows, k], DType::F32),
            Def::Input { name: "x".into() },
        );
        let gw = param(&mut g, "norm.weight", &gain);
        let nrm = g
            .node(Op::RmsNorm { eps: 1e-6 }, vec![x, gw])
            .expect("norm");
        let names = ["q.weight", "k.weight", "v.weight"];
        let mut outs = Vec::new();
        for (name, w) in names.iter().zip(&ws) {
            let p = param(&mut g, name, w);
            outs.push(g.node(Op::Linear, vec![nrm, p]).expect("linear"));
        }
        let kk = g
            .node(Op::Concat { dim: 1 }, vec![outs[1], outs[2]])
            .expect("cat");
        let s = g
            .node(Op::Binary(BinaryOp::Add), vec![outs[0], kk])
            .expect("add");
        let pf = param(&mut g, "f.weight", &wf);
        let lone = g.node(Op::Linear, vec![x, pf]).expect("linear");
        g.outputs.push(("s".into(), s));
        g.outputs.push(("lone".into(), lone));
        let merged = crate::passes::dce::dce(&merge_linears(&g).expect("merge")).expect("dce");
        crate::verify::verify(&merged).expect("valid");
        let text = to_text(&merged);
        assert_eq!(
            parse_ops(&text),
            [
                "merged_linear",
                "slice",
                "reshape",
                "slice",
                "reshape",
                "slice",
                "reshape",
                "concat",
                "binary",
                "linear"
            ],
            "{text}"
        );
        assert!(text.contains("norm_eps: Some(1e-6)"), "{text}");
        // Same numbers as the unmerged graph, bit for bit.
        let params = |name: &str| match name {
            "norm.weight" => Some(gain.clone()),
            "f.weight" => Some(wf.clone()),
            _ => names.iter().position(|n| *n == name).map(|i| ws[i].clone()),
        };
        let run = |g: &Graph| {
            let c =
                crate::Compiled::new(g.clone(), mllm_backends::CpuBackend, &params).expect("bind");
            let xs = Tensor::from_f32(
                (0..rows * k).map(|i| (i as f32 * 0.7).sin()).collect(),
                vec![rows, k],
            )
            .expect("x");
            let outs = c.run(&[("x", xs)], &mut KvCache::new()).expect("run");
            outs.iter()
                .map(|(_, t)| t.to_f32_vec().expect("f32"))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&g), run(&merged));
    }

    #[test]
    fn a_norm_read_elsewhere_stays_and_biased_linears_stay_alone() {
        let k = 32;
        let w = q4(16, k, 0.2);
        let gain = Tensor::from_f32(vec![1.0; k], vec![k]).expect("g");
        let bias = Tensor::from_f32(vec![0.5; 16], vec![16]).expect("b");
        let mut g = Graph::default();
        let x = g.push(
            TensorMeta::new(vec![2, k], DType::F32),
            Def::Input { name: "x".into() },
        );
        let gw = param(&mut g, "g", &gain);
        let nrm = g
            .node(Op::RmsNorm { eps: 1e-5 }, vec![x, gw])
            .expect("norm");
        let p = param(&mut g, "w", &w);
        let pb = param(&mut g, "b", &bias);
        let a = g.node(Op::Linear, vec![nrm, p]).expect("linear");
        let b = g.node(Op::Linear, vec![nrm, p, pb]).expect("linear");
        g.outputs.push(("a".into(), a));
        g.outputs.push(("b".into(), b));
        g.outputs.push(("n".into(), nrm));
        let merged = merge_linears(&g).expect("merge");
        let ops = parse_ops(&to_text(&merged));
        assert_eq!(ops, ["rms_norm", "linear", "linear"]);
    }
}
