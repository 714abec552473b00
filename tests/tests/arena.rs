//! Compiled steps keep their activations in the planned arena: bound once,
//! reused every step. A counting allocator shows a step allocates a small
//! fraction of what the same graph allocates without the arena (what is
//! left: kernels' scratch and tensor metadata), and the logits are the same.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use mllm_backends::{Backend, BackendError, CpuBackend, KvCache, Op, Tensor, TensorMeta};
use mllm_graph::Compiled;

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        BYTES.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The CPU backend without `run_into`: every result is a new allocation.
#[derive(Clone)]
struct NoArena;

impl Backend for NoArena {
    fn name(&self) -> &'static str {
        "cpu-no-arena"
    }
    fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        CpuBackend.run(op, inputs)
    }
    fn writes_into(&self, _: &Op, _: &TensorMeta) -> bool {
        false
    }
}

fn step_bytes<B: Backend>(c: &mut Compiled<B>, ids: &[i32]) -> (usize, Vec<f32>) {
    let n = ids.len();
    let input = || Tensor::from_i32(ids.to_vec(), vec![n]).expect("ids");
    let pos = || Tensor::from_i32((0..n as i32).collect(), vec![n]).expect("pos");
    // A first step binds everything; the second is measured.
    let mut kv = KvCache::new();
    c.run(&[("input_ids", input()), ("positions", pos())], &mut kv)
        .expect("step");
    let mut kv = KvCache::new();
    let (a, b) = (input(), pos());
    let before = BYTES.load(Ordering::Relaxed);
    let out = c
        .run(&[("input_ids", a), ("positions", b)], &mut kv)
        .expect("step");
    let bytes = BYTES.load(Ordering::Relaxed) - before;
    (bytes, out[0].1.to_f32_vec().expect("logits"))
}

#[test]
fn steps_run_out_of_the_arena() {
    let m = load_case("quant_scaled_f32");
    let model = &m.runner.model;
    let seq = 32;
    let g = mllm_interpreter::compile::capture(model, &CpuBackend, seq, 64, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let g = mllm_graph::passes::all(g).expect("passes");
    let weights = |name: &str| {
        model
            .weights
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    };
    let mut with = Compiled::new(g.clone(), CpuBackend, &weights).expect("bind");
    let mut without = Compiled::new(g, NoArena, &weights).expect("bind");
    let (placed, nodes) = with.arena_coverage();
    let ids: Vec<i32> = (0..seq as i32).map(|i| (i * 13 + 1) % 200).collect();
    let (a, la) = step_bytes(&mut with, &ids);
    let (b, lb) = step_bytes(&mut without, &ids);
    eprintln!(
        "prefill {seq}: {placed} of {nodes} results in a {} KiB arena; a step allocates {} KiB with it, {} KiB without",
        with.plan.arena_bytes / 1024,
        a / 1024,
        b / 1024
    );
    assert_eq!(la, lb, "same logits with and without the arena");
    assert!(placed * 2 > nodes, "{placed} of {nodes} placed");
    assert!(a * 3 < b, "{a} bytes with the arena, {b} without");
}
