//! Gated-activation fusion: `mul(act(gate), up)` (either operand order),
//! where the activation's result has no other reader, becomes one
//! `gated_act{act}(gate, up)`: the gated MLP's middle without its
//! intermediate tensor. The unary node is left dead for `dce`.

use mllm_backends::{BinaryOp, Op, UnaryOp};

use crate::ir::{Def, Graph, ValueId};
use crate::Result;

fn fusable(act: UnaryOp) -> bool {
    matches!(
        act,
        UnaryOp::Silu | UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Relu | UnaryOp::Sigmoid
    )
}

/// Readers of each value (graph outputs count as readers).
pub(crate) fn use_counts(g: &Graph) -> Vec<usize> {
    let mut uses = vec![0; g.values.len()];
    for i in 0..g.values.len() {
        for &j in g.operands(i) {
            uses[j] += 1;
        }
    }
    for (_, o) in &g.outputs {
        uses[*o] += 1;
    }
    for l in &g.kv {
        uses[l.present_key] += 1;
        uses[l.present_value] += 1;
    }
    uses
}

pub fn fuse_gated_act(g: &Graph) -> Result<Graph> {
    let uses = use_counts(g);
    let mut out = g.clone();
    for i in 0..g.values.len() {
        let Def::Node {
            op: Op::Binary(BinaryOp::Mul),
            inputs,
        } = &g.values[i].def
        else {
            continue;
        };
        let (a, b) = (inputs[0], inputs[1]);
        let act_of = |v: ValueId| match &g.values[v].def {
            Def::Node {
                op: Op::Unary(u),
                inputs,
            } if fusable(*u) && uses[v] == 1 => Some((*u, inputs[0])),
            _ => None,
        };
        let (act, gate, up) = match (act_of(a), act_of(b)) {
            (Some((u, gate)), _) => (u, gate, b),
            (None, Some((u, gate))) => (u, gate, a),
            _ => continue,
        };
        let (gm, um) = (&g.values[gate].meta, &g.values[up].meta);
        if gm.shape != um.shape || gm.shape != g.values[i].meta.shape {
            continue; // broadcasting products stay as they are
        }
        out.values[i].def = Def::Node {
            op: Op::GatedAct { act },
            inputs: vec![gate, up],
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::parse_ops;
    use crate::text::to_text;
    use mllm_backends::{DType, TensorMeta};

    #[test]
    fn silu_times_up_fuses_and_shared_activations_do_not() {
        let mut g = Graph::default();
        let m = TensorMeta::new(vec![2, 8], DType::F32);
        let x = g.push(
            m.clone(),
            Def::Input {
                name: "gate".into(),
            },
        );
        let u = g.push(m, Def::Input { name: "up".into() });
        let s = g.node(Op::Unary(UnaryOp::Silu), vec![x]).expect("silu");
        let y = g.node(Op::Binary(BinaryOp::Mul), vec![u, s]).expect("mul");
        // An activation read twice must stay.
        let t = g.node(Op::Unary(UnaryOp::Gelu), vec![x]).expect("gelu");
        let z = g.node(Op::Binary(BinaryOp::Mul), vec![t, u]).expect("mul");
        let w = g.node(Op::Binary(BinaryOp::Add), vec![z, t]).expect("add");
        g.outputs.push(("y".into(), y));
        g.outputs.push(("w".into(), w));
        let before = to_text(&g);
        let after =
            to_text(&crate::passes::dce::dce(&fuse_gated_act(&g).expect("fuse")).expect("dce"));
        assert_eq!(
            parse_ops(&before),
            ["unary", "binary", "unary", "binary", "binary"]
        );
        assert_eq!(
            parse_ops(&after),
            ["gated_act", "unary", "binary", "binary"],
            "{after}"
        );
        assert!(after.contains("gated_act{act: Silu}(%0, %1)"), "{after}");
    }
}
