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
static CALLS: AtomicUsize = AtomicUsize::new(0);
/// Allocations of at least `BIG` bytes: how many, and the first sizes.
const BIG: usize = 512;
static BIG_CALLS: AtomicUsize = AtomicUsize::new(0);
static BIG_SIZES: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        BYTES.fetch_add(l.size(), Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        if l.size() >= BIG {
            let i = BIG_CALLS.fetch_add(1, Ordering::Relaxed);
            if let Some(slot) = BIG_SIZES.get(i) {
                slot.store(l.size(), Ordering::Relaxed);
            }
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The counters are global: the tests take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    BIG_CALLS.store(0, Ordering::Relaxed);
    let out = c
        .run(&[("input_ids", a), ("positions", b)], &mut kv)
        .expect("step");
    let bytes = BYTES.load(Ordering::Relaxed) - before;
    let big = BIG_CALLS.load(Ordering::Relaxed);
    let sizes: Vec<usize> = BIG_SIZES[..big.min(16)]
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .collect();
    eprintln!(
        "{}: allocations of {BIG} bytes or more: {big}: {sizes:?}",
        c.backend().name()
    );
    (bytes, out[0].1.to_f32_vec().expect("logits"))
}

#[test]
fn steps_run_out_of_the_arena() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
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

/// A decode step of a quantized model (merged q/k/v and gate/up linears,
/// the KV cache appended in place) allocates no activation-sized buffer:
/// besides the logits it returns, only per-node metadata (shapes, argument
/// lists) below the size of the smallest activation. Printed: bytes and
/// allocation calls.
#[test]
fn decode_steps_allocate_no_activations() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("q8.mllm");
    mllm_converter::mllm_format::convert(
        &fixture("quant_scaled_f32"),
        &out,
        "q8_0",
        None,
        |_, _| {},
    )
    .expect("convert");
    let m = match mllm_runtime::load(&qwen3_script(), out.to_str().expect("utf-8")) {
        Ok(m) => m,
        Err(e) => panic!("{}", e.render(false)),
    };
    let model = &m.runner.model;
    let g = mllm_interpreter::compile::capture(model, &CpuBackend, 1, 64, true)
        .unwrap_or_else(|e| panic!("{e}"));
    let g = mllm_graph::passes::all(g).expect("passes");
    let weights = |name: &str| {
        model
            .weights
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    };
    let c = Compiled::new(g.clone(), CpuBackend, &weights).expect("bind");
    let mut kv = KvCache::new();
    let step = |kv: &mut KvCache, id: i32, pos: i32| {
        let ids = Tensor::from_i32(vec![id], vec![1]).expect("ids");
        let p = Tensor::from_i32(vec![pos], vec![1]).expect("pos");
        c.run(&[("input_ids", ids), ("positions", p)], kv)
            .expect("step")
    };
    // Warm up: the cache's and the kernels' scratch grow to their size.
    for pos in 0..8 {
        step(&mut kv, pos * 7 + 1, pos);
    }
    let (b0, c0) = (BYTES.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    BIG_CALLS.store(0, Ordering::Relaxed);
    let out = step(&mut kv, 5, 8);
    let big = BIG_CALLS.load(Ordering::Relaxed);
    let sizes: Vec<usize> = BIG_SIZES[..big.min(16)]
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .collect();
    eprintln!("allocations of {BIG} bytes or more: {big}: {sizes:?}");
    let (bytes, calls) = (
        BYTES.load(Ordering::Relaxed) - b0,
        CALLS.load(Ordering::Relaxed) - c0,
    );
    let logits = out[0].1.numel() * 4;
    eprintln!(
        "decode step: {bytes} bytes in {calls} allocations ({} nodes); logits {logits} bytes",
        g.node_count()
    );
    // Activations here are 512 bytes (a token's keys) and more: the one
    // allocation that large is the copy of the logits the step returns.
    assert_eq!(sizes, [logits], "allocations of {BIG} bytes or more");
}
