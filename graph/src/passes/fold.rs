//! Constant folding: a node whose operands are all constants is computed
//! once, on the CPU, at compile time (rope inverse frequencies, masks and
//! other values that depend only on shapes and script constants).

use mllm_backends::{Backend, CpuBackend, Tensor};

use crate::ir::{Def, Graph};
use crate::Result;

/// Results above this many elements stay nodes (folding must not bloat the
/// graph with data recomputed cheaply).
pub const MAX_FOLDED_ELEMENTS: usize = 1 << 20;

pub fn fold(g: &Graph) -> Result<Graph> {
    let mut out = g.clone();
    for i in 0..out.values.len() {
        let Def::Node { op, inputs } = &out.values[i].def else {
            continue;
        };
        if out.values[i].meta.numel() > MAX_FOLDED_ELEMENTS {
            continue;
        }
        let consts: Option<Vec<Tensor>> = inputs
            .iter()
            .map(|&j| match &out.values[j].def {
                Def::Const { data } => Some(data.clone()),
                _ => None,
            })
            .collect();
        let Some(consts) = consts else { continue };
        let refs: Vec<&Tensor> = consts.iter().collect();
        let data = CpuBackend.run(op, &refs)?;
        out.values[i].def = Def::Const { data };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::{parse_ops, small_graph};
    use crate::text::to_text;

    #[test]
    fn constant_subgraphs_become_data() {
        let g = small_graph();
        let after = fold(&g).expect("fold");
        let text = to_text(&after);
        // %3 = 2 * 3 over two constants is folded; the input-fed ops stay.
        assert!(text.contains("%3 = const : f32[2]"), "{text}");
        assert_eq!(
            parse_ops(&text),
            ["unary", "binary", "binary", "binary", "unary"]
        );
        let Def::Const { data } = &after.values[3].def else {
            panic!("not folded")
        };
        assert_eq!(data.f32s().expect("f32"), &[6.0, 6.0]);
    }
}
