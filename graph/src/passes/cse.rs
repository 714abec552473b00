//! Common-subexpression elimination: two nodes with the same op and the same
//! operands compute the same value; later readers use the first.

use std::collections::HashMap;

use crate::ir::{Def, Graph};
use crate::Result;

pub fn cse(g: &Graph) -> Result<Graph> {
    let n = g.values.len();
    let mut redirect: Vec<usize> = (0..n).collect();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let find = |redirect: &[usize], mut i: usize| {
        while redirect[i] != i {
            i = redirect[i];
        }
        i
    };
    for i in 0..n {
        if let Def::Node { op, inputs } = &g.values[i].def {
            let ins: Vec<usize> = inputs.iter().map(|&j| find(&redirect, j)).collect();
            // Ops carry f32 attributes (no Hash): their Debug text is the key.
            let key = format!("{op:?}{ins:?}");
            match seen.get(&key) {
                Some(&first) => redirect[i] = first,
                None => {
                    seen.insert(key, i);
                }
            }
        }
    }
    g.rebuild(&vec![true; n], &redirect)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::{parse_ops, small_graph};
    use crate::text::to_text;

    #[test]
    fn repeated_nodes_merge() {
        let g = small_graph();
        let before = parse_ops(&to_text(&g));
        let after = parse_ops(&to_text(&cse(&g).expect("cse")));
        assert_eq!(before.iter().filter(|o| *o == "binary").count(), 4);
        assert_eq!(
            after.iter().filter(|o| *o == "binary").count(),
            3,
            "{after:?}"
        );
    }
}
