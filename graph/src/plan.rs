//! The memory planner: value lifetimes to offsets in one arena. Views
//! (reshapes, leading-row slices) share their source's storage, so a source
//! lives until its last view is read. Placement is greedy by size (largest
//! first, lowest offset that overlaps no placed buffer alive at the same
//! time), as TFLite's arena planner does.

use mllm_backends::{Op, TensorMeta};

use crate::ir::{Def, Graph, ValueId};

/// Offsets are aligned for 512-bit vector loads.
pub const ALIGN: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each value's storage in the arena (`None`: not in the
    /// arena: inputs, parameters, constants, views).
    pub offsets: Vec<Option<usize>>,
    /// Bytes the arena needs.
    pub arena_bytes: usize,
    /// Bytes of all planned values added up (what allocating each costs).
    pub total_bytes: usize,
    /// Values placed in the arena.
    pub buffers: usize,
}

/// Ops whose result shares its input's storage (no compute, no memory).
pub fn is_view(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. }
            | Op::Slice {
                dim: 0,
                step: 1,
                ..
            }
    )
}

/// Plans every op result (what `mllm graph` reports).
pub fn plan_memory(g: &Graph) -> MemoryPlan {
    plan_memory_with(g, &|_, _| true)
}

/// Plans the results `in_arena` accepts (the ones a backend can write into
/// a caller's buffer); views of them share their storage, the rest are
/// left to the backend.
pub fn plan_memory_with(g: &Graph, in_arena: &dyn Fn(&Op, &TensorMeta) -> bool) -> MemoryPlan {
    let n = g.values.len();
    // Storage root of each value: a view stores nothing of its own.
    let mut root: Vec<ValueId> = (0..n).collect();
    for i in 0..n {
        if let Def::Node { op, inputs } = &g.values[i].def {
            if is_view(op) {
                root[i] = root[inputs[0]];
            }
        }
    }
    let last = g.last_uses();
    let mut end = vec![0usize; n];
    for i in 0..n {
        let r = root[i];
        end[r] = end[r].max(last[i]).max(i);
    }
    struct Buf {
        id: ValueId,
        start: usize,
        end: usize,
        size: usize,
    }
    let mut bufs: Vec<Buf> = (0..n)
        .filter(|&i| {
            root[i] == i
                && matches!(&g.values[i].def, Def::Node { op, .. } if in_arena(op, &g.values[i].meta))
        })
        .map(|i| Buf {
            id: i,
            start: i,
            end: end[i],
            size: g.values[i].meta.bytes().div_ceil(ALIGN) * ALIGN,
        })
        .collect();
    let total_bytes = bufs.iter().map(|b| b.size).sum();
    bufs.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    let mut placed: Vec<(usize, usize, usize, usize)> = vec![]; // (offset, size, start, end)
    let mut offsets = vec![None; n];
    let mut arena_bytes = 0;
    for b in &bufs {
        // Placed buffers alive at the same time, by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= b.end && b.start <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        busy.sort();
        let mut at = 0;
        for (off, size) in busy {
            if at + b.size <= off {
                break;
            }
            at = at.max(off + size);
        }
        placed.push((at, b.size, b.start, b.end));
        offsets[b.id] = Some(at);
        arena_bytes = arena_bytes.max(at + b.size);
    }
    MemoryPlan {
        offsets,
        arena_bytes,
        total_bytes,
        buffers: bufs.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mllm_backends::{DType, TensorMeta, UnaryOp};

    /// A chain x -> a -> b -> c -> d of equal sizes needs two buffers'
    /// worth of arena; a view extends its source's life.
    #[test]
    fn a_chain_reuses_two_buffers() {
        let mut g = Graph::default();
        let m = TensorMeta::new(vec![16], DType::F32);
        let mut v = g.push(m, Def::Input { name: "x".into() });
        for _ in 0..4 {
            v = g.node(Op::Unary(UnaryOp::Exp), vec![v]).expect("exp");
        }
        g.outputs.push(("y".into(), v));
        let p = plan_memory(&g);
        assert_eq!((p.buffers, p.total_bytes, p.arena_bytes), (4, 256, 128));
        for (i, o) in p.offsets.iter().enumerate().skip(1) {
            assert!(o.is_some(), "%{i} placed");
        }
        // Live at once: %1 and %2 never share an offset, nor %2 and %3.
        assert_ne!(p.offsets[1], p.offsets[2]);
        assert_ne!(p.offsets[2], p.offsets[3]);

        let mut g = Graph::default();
        let m = TensorMeta::new(vec![16], DType::F32);
        let x = g.push(m, Def::Input { name: "x".into() });
        let a = g.node(Op::Unary(UnaryOp::Exp), vec![x]).expect("a");
        let view = g
            .node(Op::Reshape { shape: vec![4, 4] }, vec![a])
            .expect("view");
        let b = g.node(Op::Unary(UnaryOp::Exp), vec![x]).expect("b");
        let c = g.node(Op::Unary(UnaryOp::Exp), vec![b]).expect("c");
        let d = g.node(Op::Unary(UnaryOp::Exp), vec![view]).expect("d");
        g.outputs.push(("c".into(), c));
        g.outputs.push(("d".into(), d));
        let p = plan_memory(&g);
        assert_eq!(p.offsets[view], None, "views take no storage");
        // `a` lives until `d` reads its view, so `b` and `c` cannot take its place.
        assert_ne!(p.offsets[a], p.offsets[b]);
        assert_ne!(p.offsets[a], p.offsets[c]);
    }
}
