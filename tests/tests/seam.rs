//! The executor seam is whole: an auditing executor that knows only the
//! tensors it was handed (inputs, constants, weights) or produced (ops, KV
//! appends) sees every tensor the interpreter computes with during a
//! Qwen3-VL forward with images and a decode step after it. A tensor made
//! behind the executor's back (a view, a literal, a cache read) would reach
//! an op as a stranger and fail the test.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::*;
use mllm_backends::{BackendError, CpuBackend, KvCache, Op, Tensor};
use mllm_interpreter::{Eager, Executor};
use mllm_runtime::images::read_images;
use mllm_runtime::images::{run_forward_images, ImageTokens};

type Key = (usize, usize, Vec<usize>);

fn key(t: &Tensor) -> Key {
    (
        Arc::as_ptr(t.buffer()) as *const u8 as usize,
        t.offset(),
        t.shape().to_vec(),
    )
}

#[derive(Default)]
struct Counts {
    ops: usize,
    constants: usize,
    inputs: usize,
    weights: usize,
    reads: usize,
    kv_appends: usize,
}

struct Audit {
    inner: Eager<CpuBackend>,
    known: HashSet<Key>,
    keep: Vec<Tensor>,
    strangers: Vec<String>,
    n: Counts,
}

impl Audit {
    fn new() -> Audit {
        Audit {
            inner: Eager::new(CpuBackend),
            known: HashSet::new(),
            keep: vec![],
            strangers: vec![],
            n: Counts::default(),
        }
    }

    fn know(&mut self, t: &Tensor) {
        self.known.insert(key(t));
        self.keep.push(t.clone());
    }

    fn check(&mut self, what: &str, t: &Tensor) {
        if !self.known.contains(&key(t)) {
            self.strangers.push(format!(
                "{what} got an unknown {}{:?}",
                t.dtype(),
                t.shape()
            ));
        }
    }
}

impl Executor for Audit {
    fn run(&mut self, op: &Op, inputs: &[&Tensor]) -> Result<Tensor, BackendError> {
        for t in inputs {
            self.check(op.name(), t);
        }
        let out = self.inner.run(op, inputs)?;
        self.n.ops += 1;
        self.know(&out);
        Ok(out)
    }
    fn constant(&mut self, t: Tensor) -> Result<Tensor, BackendError> {
        self.n.constants += 1;
        let t = self.inner.constant(t)?;
        self.know(&t);
        Ok(t)
    }
    fn input(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        self.n.inputs += 1;
        let t = self.inner.input(name, t)?;
        self.know(&t);
        Ok(t)
    }
    fn weight(&mut self, name: &str, t: Tensor) -> Result<Tensor, BackendError> {
        self.n.weights += 1;
        let t = self.inner.weight(name, t)?;
        self.know(&t);
        Ok(t)
    }
    fn read(&mut self, t: &Tensor) -> Result<Tensor, BackendError> {
        self.n.reads += 1;
        self.check("read", t);
        self.inner.read(t)
    }
    fn kv_append(
        &mut self,
        cache: &mut KvCache,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), BackendError> {
        self.n.kv_appends += 1;
        self.check("kv_append", k);
        self.check("kv_append", v);
        let (ks, vs) = self.inner.kv_append(cache, layer, k, v)?;
        self.know(&ks);
        self.know(&vs);
        Ok((ks, vs))
    }
}

#[test]
fn every_tensor_of_a_qwen3_vl_forward_with_images_passes_the_executor() {
    let case = fixture("qwen3_vl/p16_m2_tied_published");
    let files = mllm_runtime::model_files::open(case.to_str().expect("utf-8")).expect("open");
    let mut audit = Audit::new();
    let model =
        mllm_runtime::model_files::load_model_with(&files, Some(&script("qwen3_vl")), &mut audit)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert_eq!(
        audit.n.weights,
        model.weights.len(),
        "every weight went through `weight`"
    );
    let path = case.join("reference_two_images.safetensors");
    let ids = ref_i32s(&path, "input_ids");
    let images = read_images(path.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let spec = ImageTokens::from_config(&files.config).expect("image tokens");
    let cache = new_cache();
    let (logits, delta) =
        run_forward_images(&model, &mut audit, &cache, &ids, &images, &spec, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    audit.check("output", &logits);
    let pos = (ids.len() as i64 + delta) as usize;
    let step = mllm_runtime::engine::run_forward(&model, &mut audit, &cache, &[5], pos, true)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    audit.check("output", &step);
    assert!(
        audit.strangers.is_empty(),
        "tensors bypassed the executor: {:?}",
        audit.strangers
    );
    let n = &audit.n;
    eprintln!(
        "seam: {} ops, {} constants, {} inputs, {} weights, {} reads, {} kv appends",
        n.ops, n.constants, n.inputs, n.weights, n.reads, n.kv_appends
    );
    assert!(n.ops > 100 && n.inputs >= 4 && n.constants > 0);
    assert!(
        n.reads > 0,
        "image placement reads ids and grids through the executor"
    );
    let layers = files.config["text_config"]["num_hidden_layers"]
        .as_u64()
        .expect("layers") as usize;
    assert_eq!(
        n.kv_appends,
        2 * layers,
        "every layer, prefill and one decode step"
    );
}

/// The audit itself notices a tensor it was not handed.
#[test]
fn the_audit_catches_a_stranger() {
    let mut audit = Audit::new();
    let t = Tensor::from_f32(vec![1.0, 2.0], vec![2]).expect("t");
    audit
        .run(&Op::Unary(mllm_backends::UnaryOp::Exp), &[&t])
        .expect("exp");
    assert_eq!(audit.strangers.len(), 1);
    let view = t.reshaped(vec![1, 2]).expect("view");
    let known = audit.constant(t).expect("constant");
    audit
        .run(&Op::Unary(mllm_backends::UnaryOp::Exp), &[&known])
        .expect("exp");
    audit
        .run(&Op::Unary(mllm_backends::UnaryOp::Exp), &[&view])
        .expect("exp");
    assert_eq!(
        audit.strangers.len(),
        2,
        "a view made outside the executor is a stranger"
    );
}
