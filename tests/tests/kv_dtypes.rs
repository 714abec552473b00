//! KV caches stored as f16 and q8_0 (`--kv-type`): decoding through them
//! stays close to the f32 cache (per-step logits cosine), compiled steps
//! equal eager steps on the same cache dtype, and a head that is not whole
//! q8_0 blocks is a clear error.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use mllm_backends::quant::QuantType;
use mllm_backends::{CpuBackend, DType, KvCache};
use mllm_interpreter::CompiledModel;

fn cache(dtype: DType) -> Rc<RefCell<KvCache>> {
    Rc::new(RefCell::new(KvCache::with_dtype(dtype).expect("kv dtype")))
}

/// Logits of the prompt's last position and of `steps` teacher-forced
/// decode steps (the reference's greedy ids).
fn decode_rows(
    m: &mut mllm_runtime::Loaded,
    dtype: DType,
    ids: &[i32],
    steps: &[i32],
) -> Vec<Vec<f32>> {
    let c = cache(dtype);
    let mut rows = vec![data(&m.step(&c, ids, 0, true).expect("prefill"))];
    for (j, &t) in steps.iter().enumerate() {
        rows.push(data(
            &m.step(&c, &[t], ids.len() + j, true).expect("decode"),
        ));
    }
    rows
}

#[test]
fn f16_and_q8_0_caches_stay_close_to_f32() {
    // head_dim 64: whole q8_0 blocks.
    let case = "quant_scaled_f32";
    let mut m = load_case(case);
    let ids: Vec<i32> = (0..24).map(|i| (i * 37 + 5) % 200).collect();
    let steps: Vec<i32> = (0..8).map(|i| (i * 11 + 3) % 200).collect();
    let f32_rows = decode_rows(&mut m, DType::F32, &ids, &steps);
    for (dtype, min_cos) in [
        (DType::F16, 0.99999),
        (DType::Quant(QuantType::Q8_0), 0.999),
    ] {
        let rows = decode_rows(&mut m, dtype, &ids, &steps);
        let worst = rows
            .iter()
            .zip(&f32_rows)
            .map(|(a, b)| cosine(a, b))
            .fold(1.0, f64::min);
        eprintln!("{case}: {dtype} KV cache, worst per-step logits cosine vs f32 = {worst:.7}");
        assert!(worst >= min_cos, "{dtype}: cosine {worst}");
    }
}

#[test]
fn compiled_steps_equal_eager_steps_on_every_cache_dtype() {
    let mut m = load_case("quant_scaled_f32");
    let ids: Vec<i32> = (0..5).collect();
    for dtype in [DType::F16, DType::Quant(QuantType::Q8_0)] {
        let eager = decode_rows(&mut m, dtype, &ids, &[7, 9, 11]);
        let mut c = CompiledModel::new(CpuBackend, 64, 4);
        let kv = cache(dtype);
        let mut rows = vec![data(
            &c.forward(&m.runner.model, &ids, 0, &mut kv.borrow_mut(), true)
                .unwrap_or_else(|e| panic!("{e}")),
        )];
        for (j, &t) in [7, 9, 11].iter().enumerate() {
            rows.push(data(
                &c.forward(
                    &m.runner.model,
                    &[t],
                    ids.len() + j,
                    &mut kv.borrow_mut(),
                    true,
                )
                .unwrap_or_else(|e| panic!("{e}")),
            ));
        }
        for (a, b) in rows.iter().zip(&eager) {
            assert!(
                max_abs(a, b) <= 1e-5,
                "{dtype}: compiled differs by {}",
                max_abs(a, b)
            );
        }
        assert_eq!(kv.borrow().dtype(), dtype);
    }
}

#[test]
fn heads_that_are_not_whole_blocks_are_a_clear_error() {
    let mut m = load_case("gqa_tied_f32"); // head_dim 16
    let c = cache(DType::Quant(QuantType::Q8_0));
    let err = m
        .step(&c, &[1, 2], 0, true)
        .expect_err("q8_0 needs 32-value heads");
    assert!(
        err.render(false).contains("--kv-type f16"),
        "{}",
        err.render(false)
    );
}
