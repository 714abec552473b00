//! Graph -> Graph passes, one file each, chained here; the verifier runs
//! after every pass so a broken rewrite names itself.

pub mod cse;
pub mod dce;
pub mod fold;
pub mod fold_params;
pub mod fuse_add_rms_norm;
pub mod fuse_gated_act;
pub mod merge_linears;

use crate::ir::Graph;
use crate::verify::verify;
use crate::Result;

/// A pass: a pure function of the graph.
pub type Pass = fn(&Graph) -> Result<Graph>;

/// The passes `--passes all` runs, in order.
pub const ALL: &[(&str, Pass)] = &[
    ("fold", fold::fold),
    ("cse", cse::cse),
    ("fuse_gated_act", fuse_gated_act::fuse_gated_act),
    // Before the add + norm fusion: a norm read only by linears folds into
    // them (norm and activation quantization in one pass); the others fuse
    // with their residual add.
    ("merge_linears", merge_linears::merge_linears),
    ("fuse_add_rms_norm", fuse_add_rms_norm::fuse_add_rms_norm),
    ("dce", dce::dce),
];

/// Runs `passes` in order, verifying after each.
pub fn run(g: Graph, passes: &[(&str, Pass)]) -> Result<Graph> {
    verify(&g).map_err(|e| crate::GraphError(format!("captured graph: {e}")))?;
    let mut g = g;
    for (name, p) in passes {
        g = p(&g)?;
        verify(&g).map_err(|e| crate::GraphError(format!("after `{name}`: {e}")))?;
    }
    Ok(g)
}

/// Every pass (what compiled execution uses).
pub fn all(g: Graph) -> Result<Graph> {
    run(g, ALL)
}

#[cfg(test)]
pub(crate) mod tests {
    use mllm_backends::{BinaryOp, DType, Op, Tensor, TensorMeta, UnaryOp};

    use crate::ir::{Def, Graph};

    /// x -> exp(x) (dead); c = 2 * 3 (constant); y = x + c; z = x + c
    /// (repeat); out = y * z -> tanh.
    pub fn small_graph() -> Graph {
        let mut g = Graph::default();
        let m = TensorMeta::new(vec![2], DType::F32);
        let x = g.push(m.clone(), Def::Input { name: "x".into() });
        let c2 = Tensor::from_f32(vec![2.0; 2], vec![2]).expect("c");
        let c3 = Tensor::from_f32(vec![3.0; 2], vec![2]).expect("c");
        let a = g.push(m.clone(), Def::Const { data: c2 });
        let b = g.push(m.clone(), Def::Const { data: c3 });
        let c = g.node(Op::Binary(BinaryOp::Mul), vec![a, b]).expect("mul");
        let _dead = g.node(Op::Unary(UnaryOp::Exp), vec![x]).expect("exp");
        g.push(
            m,
            Def::Input {
                name: "unused".into(),
            },
        );
        let y = g.node(Op::Binary(BinaryOp::Add), vec![x, c]).expect("add");
        let z = g.node(Op::Binary(BinaryOp::Add), vec![x, c]).expect("add");
        let p = g.node(Op::Binary(BinaryOp::Mul), vec![y, z]).expect("mul");
        let o = g.node(Op::Unary(UnaryOp::Tanh), vec![p]).expect("tanh");
        g.outputs.push(("out".into(), o));
        g
    }

    /// The op names of a graph's text, in order.
    pub fn parse_ops(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split(" = ").nth(1))
            .filter(|d| {
                !d.starts_with("input")
                    && !d.starts_with("param")
                    && !d.starts_with("const")
                    && !d.starts_with('%')
            })
            .map(|d| d.split(['{', '(']).next().unwrap_or("").to_string())
            .collect()
    }

    #[test]
    fn the_pipeline_verifies_and_shrinks() {
        let g = small_graph();
        let after = super::all(g.clone()).expect("passes");
        assert!(after.node_count() < g.node_count());
        assert_eq!(
            parse_ops(&crate::text::to_text(&after)),
            ["binary", "binary", "unary"]
        );
    }
}
