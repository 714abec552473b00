//! The `--no-cache` graph: a captured forward specialised to a first chunk
//! with no cache. Positions become the constant `0..N` (so the rotary
//! tables fold into constants), `past_len` becomes 0, each `cached_sdpa`
//! becomes plain causal `sdpa` over the new rows, and the past buffers and
//! present outputs disappear: `input_ids` in, `logits` out. A recurrent
//! layer's state input becomes zeros (what a first chunk starts from) and
//! its new state output goes.

use mllm_backends::{DType, Op, Tensor, TensorMeta};

use crate::ir::{Def, Graph};
use crate::{GraphError, Result};

fn const_i32(meta: &TensorMeta, values: Vec<i32>) -> Result<Def> {
    Ok(Def::Const {
        data: Tensor::from_i32(values, meta.shape.clone())?,
    })
}

pub fn without_cache(g: &Graph) -> Result<Graph> {
    let mut out = g.clone();
    for v in out.values.iter_mut() {
        match &v.def {
            Def::Input { name } if name == "positions" => {
                // [N], or [rows, N] (multimodal rotary: every row 0..N).
                let n = v.meta.shape.last().copied().unwrap_or(0);
                if v.meta.dtype != DType::I32 || v.meta.rank() > 2 {
                    return Err(GraphError(format!(
                        "positions are {}; --no-cache fixes i32 [N] or [rows, N] positions to 0..N",
                        v.meta
                    )));
                }
                let rows = v.meta.numel() / n.max(1);
                let vals = (0..rows).flat_map(|_| 0..n as i32).collect();
                v.def = const_i32(&v.meta, vals)?;
            }
            Def::Input { name } if name == "past_len" => {
                v.def = const_i32(&v.meta, vec![0; v.meta.numel()])?;
            }
            Def::Input { name } if name.starts_with("state.") => {
                if v.meta.dtype != DType::F32 {
                    return Err(GraphError(format!(
                        "recurrent state `{name}` is {}; --no-cache starts f32 states at zeros",
                        v.meta
                    )));
                }
                v.def = Def::Const {
                    data: Tensor::from_f32(vec![0.0; v.meta.numel()], v.meta.shape.clone())?,
                };
            }
            Def::Node {
                op:
                    Op::CachedSdpa {
                        causal,
                        scale,
                        window,
                    },
                inputs,
            } => {
                v.def = Def::Node {
                    op: Op::Sdpa {
                        causal: *causal,
                        scale: *scale,
                        window: *window,
                    },
                    inputs: inputs[..3].to_vec(),
                };
            }
            _ => {}
        }
    }
    let present: Vec<usize> =
        g.kv.iter()
            .flat_map(|l| [l.present_key, l.present_value])
            .collect();
    let states: Vec<usize> = g.states.iter().flat_map(|s| s.outputs.clone()).collect();
    out.outputs
        .retain(|(name, o)| (!present.contains(o) && !states.contains(o)) || name == "logits");
    out.kv.clear();
    out.states.clear();
    // Only what the outputs read stays (the past buffers go).
    let n = out.values.len();
    let mut live = vec![false; n];
    for (_, o) in &out.outputs {
        live[*o] = true;
    }
    for i in (0..n).rev() {
        if live[i] {
            for &j in out.operands(i) {
                live[j] = true;
            }
        }
    }
    let same: Vec<usize> = (0..n).collect();
    out.rebuild(&live, &same)
}
