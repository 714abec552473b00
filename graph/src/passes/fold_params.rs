//! Folding over parameters: a node whose operands are all constants or
//! small float parameters is computed once when the graph is bound to a
//! model's weights, and becomes a constant. What this removes is work a
//! script does on weights at every step, such as Gemma's and Qwen3.5's
//! norm gains `1 + w` (one add per norm per step; ~156 per Gemma-3-1B
//! token), a transposed or reshaped small table, or a scale folded into a
//! bias. It cannot run with the other passes: they see the graph before
//! any checkpoint is bound, when a parameter is only a name.
//!
//! Only host, non-quantized parameters of at most `MAX_PARAM_ELEMENTS`
//! values take part, and only results of at most `fold::MAX_FOLDED_ELEMENTS`
//! (a large matrix is not copied to fold a cheap op over it; quantized
//! weights stay in their blocks for the kernels). The result is computed
//! by the CPU backend's own op, so it is bit for bit what the step computed.

use mllm_backends::{Backend, CpuBackend, Tensor};

use crate::ir::{Def, Graph};
use crate::passes::fold::MAX_FOLDED_ELEMENTS;
use crate::Result;

/// Parameters above this many values are never read by the pass.
pub const MAX_PARAM_ELEMENTS: usize = 1 << 16;

/// Folds nodes over constants and small parameters (`params` gives a
/// parameter's tensor by checkpoint name). Parameters nothing reads any
/// more stay in the graph; `dce` removes them.
pub fn fold_params(g: &Graph, params: &dyn Fn(&str) -> Option<Tensor>) -> Result<Graph> {
    let mut out = g.clone();
    for i in 0..out.values.len() {
        let Def::Node { op, inputs } = &out.values[i].def else {
            continue;
        };
        if out.values[i].meta.numel() > MAX_FOLDED_ELEMENTS {
            continue;
        }
        let mut saw_param = false;
        let operands: Option<Vec<Tensor>> = inputs
            .iter()
            .map(|&j| match &out.values[j].def {
                Def::Const { data } => Some(data.clone()),
                Def::Param { name } => {
                    let t = params(name)?;
                    let small = t.numel() <= MAX_PARAM_ELEMENTS;
                    let plain = t.device().is_none() && !t.dtype().is_quantized();
                    saw_param = true;
                    (small && plain).then_some(t)
                }
                _ => None,
            })
            .collect();
        // All-constant nodes are `fold`'s; this pass adds the parameters.
        let (Some(operands), true) = (operands, saw_param) else {
            continue;
        };
        let refs: Vec<&Tensor> = operands.iter().collect();
        let data = CpuBackend.run(op, &refs)?;
        out.values[i].def = Def::Const { data };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use mllm_backends::{BinaryOp, DType, Op, TensorMeta};

    use super::*;
    use crate::passes::dce::dce;
    use crate::text::to_text;

    /// out = x * (w + 1) with w a parameter: the gain becomes a constant.
    fn gain_graph(shape: Vec<usize>) -> Graph {
        let mut g = Graph::default();
        let m = TensorMeta::new(shape.clone(), DType::F32);
        let x = g.push(m.clone(), Def::Input { name: "x".into() });
        let w = g.push(m.clone(), Def::Param { name: "w".into() });
        let one = Tensor::from_f32(vec![1.0], vec![1]).expect("one");
        let c = g.push(
            TensorMeta::new(vec![1], DType::F32),
            Def::Const { data: one },
        );
        let gain = g.node(Op::Binary(BinaryOp::Add), vec![w, c]).expect("add");
        let y = g
            .node(Op::Binary(BinaryOp::Mul), vec![x, gain])
            .expect("mul");
        g.outputs.push(("y".into(), y));
        g
    }

    #[test]
    fn a_gain_over_a_parameter_becomes_data() {
        let g = gain_graph(vec![3]);
        let w = Tensor::from_f32(vec![0.5, -1.0, 2.0], vec![3]).expect("w");
        let folded = fold_params(&g, &|n| (n == "w").then(|| w.clone())).expect("fold");
        let after = dce(&folded).expect("dce");
        let text = to_text(&after);
        assert!(!text.contains("param"), "{text}");
        let consts: Vec<Vec<f32>> = after
            .values
            .iter()
            .filter_map(|v| match &v.def {
                Def::Const { data } => Some(data.f32s().expect("f32").to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(consts, vec![vec![1.5, 0.0, 3.0]], "{text}");
    }

    #[test]
    fn large_quantized_or_missing_parameters_stay_nodes() {
        let big = MAX_PARAM_ELEMENTS + 1;
        let g = gain_graph(vec![big]);
        let w = Tensor::from_f32(vec![0.0; big], vec![big]).expect("w");
        let folded = fold_params(&g, &|_| Some(w.clone())).expect("fold");
        assert_eq!(folded.node_count(), g.node_count(), "a large parameter");
        let folded = fold_params(&g, &|_| None).expect("fold");
        assert_eq!(folded.node_count(), g.node_count(), "an unknown parameter");
        let g = gain_graph(vec![32]);
        let q = Tensor::from_quant(vec![0; 34], mllm_backends::quant::QuantType::Q8_0, vec![32])
            .expect("q8_0");
        let folded = fold_params(&g, &|_| Some(q.clone())).expect("fold");
        assert_eq!(folded.node_count(), g.node_count(), "a quantized parameter");
    }
}
