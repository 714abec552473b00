//! The graph as readable text: one value a line (id, definition, operands,
//! type), parameters by checkpoint name, then the outputs. What `mllm graph`
//! prints, and what the pass tests compare before and after.

use std::fmt::Write;

use mllm_backends::Op;

use crate::ir::{Def, Graph};

/// `rms_norm{eps: 1e-6}`: the op's name and its attributes.
pub fn op_label(op: &Op) -> String {
    let dbg = format!("{op:?}");
    match dbg.find(['{', '(']) {
        Some(at) => {
            let attrs = dbg[at..].trim_matches(|c| c == '{' || c == '}' || c == '(' || c == ')');
            format!("{}{{{}}}", op.name(), attrs.trim())
        }
        None => op.name().to_string(),
    }
}

pub fn to_text(g: &Graph) -> String {
    let mut s = String::new();
    for (i, v) in g.values.iter().enumerate() {
        let def = match &v.def {
            Def::Input { name } => format!("input \"{name}\""),
            Def::Param { name } => format!("param \"{name}\""),
            Def::Const { .. } => "const".to_string(),
            Def::Node { op, inputs } => {
                let args: Vec<String> = inputs.iter().map(|j| format!("%{j}")).collect();
                format!("{}({})", op_label(op), args.join(", "))
            }
        };
        let _ = writeln!(s, "%{i} = {def} : {}", v.meta);
    }
    for (name, o) in &g.outputs {
        let _ = writeln!(s, "output \"{name}\" = %{o}");
    }
    s
}

/// Counts for a summary line: nodes (and how many are zero-copy views),
/// values, params, consts, inputs.
pub fn summary(g: &Graph) -> String {
    let count = |f: fn(&Def) -> bool| g.values.iter().filter(|v| f(&v.def)).count();
    let views = count(|d| matches!(d, Def::Node { op, .. } if crate::plan::is_view(op)));
    format!(
        "{} nodes ({} compute, {views} views), {} values ({} inputs, {} params, {} consts), {} outputs, context {}",
        g.node_count(),
        g.node_count() - views,
        g.values.len(),
        count(|d| matches!(d, Def::Input { .. })),
        count(|d| matches!(d, Def::Param { .. })),
        count(|d| matches!(d, Def::Const { .. })),
        g.outputs.len(),
        g.context
    )
}
