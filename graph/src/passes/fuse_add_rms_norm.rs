//! Residual add + RMSNorm fusion: `n = rms_norm(x + y, w)` where the sum
//! `h` is read only after the norm (the residual stream of a pre-norm
//! decoder) becomes `f = add_rms_norm(x, y, w)` of shape `[2, ..]`, with `h`
//! and `n` as views of its two halves (a leading-row slice and a reshape,
//! neither of which copies). Sums read before the norm stay unfused.

use mllm_backends::{BinaryOp, Op, TensorMeta};

use crate::ir::{Def, Graph, ValueId};
use crate::Result;

pub fn fuse_add_rms_norm(g: &Graph) -> Result<Graph> {
    let n = g.values.len();
    // First reader of each value, to refuse sums read before their norm.
    let mut first_use = vec![usize::MAX; n];
    for i in 0..n {
        for &j in g.operands(i) {
            first_use[j] = first_use[j].min(i);
        }
    }
    let mut out = Graph {
        context: g.context,
        ..Graph::default()
    };
    let mut map: Vec<ValueId> = vec![usize::MAX; n];
    for (i, v) in g.values.iter().enumerate() {
        let fused = match &v.def {
            Def::Node {
                op: Op::RmsNorm { eps },
                inputs,
            } => {
                let (h, w) = (inputs[0], inputs[1]);
                match &g.values[h].def {
                    Def::Node {
                        op: Op::Binary(BinaryOp::Add),
                        inputs: xy,
                    } if first_use[h] == i
                        && g.values[xy[0]].meta == g.values[h].meta
                        && g.values[xy[1]].meta == g.values[h].meta =>
                    {
                        Some((*eps, xy[0], xy[1], w, h))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((eps, x, y, w, h)) = fused {
            let f = out.node(Op::AddRmsNorm { eps }, vec![map[x], map[y], map[w]])?;
            let half = |out: &mut Graph, k: usize| -> Result<ValueId> {
                let row = out.node(
                    Op::Slice {
                        dim: 0,
                        start: k,
                        end: k + 1,
                        step: 1,
                    },
                    vec![f],
                )?;
                out.node(
                    Op::Reshape {
                        shape: g.values[h].meta.shape.clone(),
                    },
                    vec![row],
                )
            };
            map[h] = half(&mut out, 0)?;
            map[i] = half(&mut out, 1)?;
            continue;
        }
        let def = match &v.def {
            Def::Node { op, inputs } => Def::Node {
                op: op.clone(),
                inputs: inputs.iter().map(|&j| map[j]).collect(),
            },
            other => other.clone(),
        };
        map[i] = out.push(TensorMeta::clone(&v.meta), def);
    }
    g.copy_io_to(&mut out, &map);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::parse_ops;
    use crate::text::to_text;
    use mllm_backends::{DType, Tensor};

    /// A two-block residual stream: h1 = x + a; n1 = norm(h1); h2 = h1 + n1;
    /// n2 = norm(h2); out = h2 + n2.
    #[test]
    fn residual_adds_before_norms_fuse() {
        let mut g = Graph::default();
        let m = TensorMeta::new(vec![3, 4], DType::F32);
        let x = g.push(m.clone(), Def::Input { name: "x".into() });
        let a = g.push(m, Def::Input { name: "a".into() });
        let wt = Tensor::from_f32(vec![1.0; 4], vec![4]).expect("w");
        let w = g.push(TensorMeta::of(&wt), Def::Const { data: wt });
        let h1 = g.node(Op::Binary(BinaryOp::Add), vec![x, a]).expect("add");
        let n1 = g
            .node(Op::RmsNorm { eps: 1e-6 }, vec![h1, w])
            .expect("norm");
        let h2 = g
            .node(Op::Binary(BinaryOp::Add), vec![h1, n1])
            .expect("add");
        let n2 = g
            .node(Op::RmsNorm { eps: 1e-6 }, vec![h2, w])
            .expect("norm");
        let o = g
            .node(Op::Binary(BinaryOp::Add), vec![h2, n2])
            .expect("add");
        g.outputs.push(("out".into(), o));
        let fused = crate::passes::dce::dce(&fuse_add_rms_norm(&g).expect("fuse")).expect("dce");
        crate::verify::verify(&fused).expect("valid");
        let ops = parse_ops(&to_text(&fused));
        assert_eq!(
            ops,
            [
                "add_rms_norm",
                "slice",
                "reshape",
                "slice",
                "reshape",
                "add_rms_norm",
                "slice",
                "reshape",
                "slice",
                "reshape",
                "binary"
            ],
            "{}",
            to_text(&fused)
        );
        // Same numbers as the unfused graph.
        let run = |g: &Graph| {
            let c = crate::Compiled::new(g.clone(), mllm_backends::CpuBackend, &|_| None)
                .expect("bind");
            let xs = Tensor::from_f32((0..12).map(|i| i as f32 * 0.3 - 1.0).collect(), vec![3, 4])
                .expect("x");
            let as_ = Tensor::from_f32((0..12).map(|i| (i as f32).sin()).collect(), vec![3, 4])
                .expect("a");
            let mut kv = mllm_backends::KvCache::new();
            let outs = c.run(&[("x", xs), ("a", as_)], &mut kv).expect("run");
            outs[0].1.to_f32_vec().expect("f32")
        };
        assert_eq!(run(&g), run(&fused));
    }

    #[test]
    fn a_sum_read_before_its_norm_is_left_alone() {
        let mut g = Graph::default();
        let m = TensorMeta::new(vec![2, 4], DType::F32);
        let x = g.push(m.clone(), Def::Input { name: "x".into() });
        let wt = Tensor::from_f32(vec![1.0; 4], vec![4]).expect("w");
        let w = g.push(TensorMeta::of(&wt), Def::Const { data: wt });
        let h = g.node(Op::Binary(BinaryOp::Add), vec![x, x]).expect("add");
        let e = g
            .node(Op::Unary(mllm_backends::UnaryOp::Exp), vec![h])
            .expect("exp");
        let n = g.node(Op::RmsNorm { eps: 1e-6 }, vec![h, w]).expect("norm");
        let o = g.node(Op::Binary(BinaryOp::Add), vec![e, n]).expect("add");
        g.outputs.push(("out".into(), o));
        let fused = fuse_add_rms_norm(&g).expect("fuse");
        assert!(!to_text(&fused).contains("add_rms_norm"));
    }
}
