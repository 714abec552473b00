//! Dead-value elimination: keeps what the outputs read, plus every graph
//! input (they are the graph's interface, read or not).

use crate::ir::{Def, Graph};
use crate::Result;

pub fn dce(g: &Graph) -> Result<Graph> {
    let n = g.values.len();
    let mut live = vec![false; n];
    for (_, o) in &g.outputs {
        live[*o] = true;
    }
    for i in (0..n).rev() {
        if matches!(g.values[i].def, Def::Input { .. }) {
            live[i] = true;
        }
        if live[i] {
            for &j in g.operands(i) {
                live[j] = true;
            }
        }
    }
    let same: Vec<usize> = (0..n).collect();
    g.rebuild(&live, &same)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::{parse_ops, small_graph};
    use crate::text::to_text;

    #[test]
    fn unread_values_go_inputs_stay() {
        let g = small_graph();
        let before = to_text(&g);
        let after = to_text(&dce(&g).expect("dce"));
        assert!(before.contains("unary{Exp}(%0)"), "{before}");
        assert!(!after.contains("unary{Exp}"), "{after}");
        assert!(after.contains("input \"unused\""), "{after}");
        assert_eq!(
            parse_ops(&after),
            ["binary", "binary", "binary", "binary", "unary"]
        );
    }
}
