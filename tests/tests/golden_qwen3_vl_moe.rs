//! Qwen3-VL-MoE against transformers 5.24: a tiny random-weight checkpoint in
//! the published layout (experts fused and transposed, `num_experts`,
//! `rope_scaling`) made by
//! `tests/fixtures/qwen3_vl_moe/make_qwen3_vl_moe_fixtures.py`, with a
//! one-image prompt (reference logits, 3D positions and greedy ids beside it).

mod common;

use common::golden::load_auto;
use common::*;
use mllm_interpreter::mrope::mrope_positions;
use mllm_runtime::images::{read_images, Images};
use mllm_runtime::Loaded;

const CASE: &str = "qwen3_vl_moe/p8_m2_moe_published";
const IMAGE_TOKEN: i32 = 300;
const MERGE: i64 = 2;

fn ref_path() -> std::path::PathBuf {
    fixture(CASE).join("reference_one_image.safetensors")
}

fn f32s(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(ref_path()).expect("reference file");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn images() -> Images {
    read_images(ref_path().to_str().expect("utf-8")).unwrap_or_else(|e| panic!("{}", e.0))
}

/// Loaded by the built-in script its architecture picks (`qwen3_vl_moe`).
fn load() -> Loaded {
    load_auto(CASE)
}

#[test]
fn experts_are_stored_transposed() {
    let bytes = std::fs::read(fixture(CASE).join("model.safetensors")).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let shape = |n: &str| st.tensor(n).expect(n).shape().to_vec();
    let p = "model.language_model.layers.0.mlp.experts";
    // [E, H, 2I] and [E, I, H]; the script declares [E, 2I, H] and [E, H, I].
    assert_eq!(shape(&format!("{p}.gate_up_proj")), [8, 32, 24]);
    assert_eq!(shape(&format!("{p}.down_proj")), [8, 12, 32]);
}

#[test]
fn positions_match_get_rope_index() {
    let ids = ref_i32s(&ref_path(), "input_ids");
    let p = mrope_positions(&ids, IMAGE_TOKEN, &images().grid_thw, MERGE).expect("positions");
    assert_eq!(p.rows.concat(), ref_i32s(&ref_path(), "positions"));
    assert_eq!(p.delta, ref_i32s(&ref_path(), "rope_delta")[0] as i64);
}

#[test]
fn prefill_logits_with_image_match_transformers() {
    let ids = ref_i32s(&ref_path(), "input_ids");
    let mut m = load();
    let (logits, _) = m
        .prefill_images(&new_cache(), &ids, &images(), false)
        .unwrap_or_else(|e| panic!("{}", e.0));
    assert_eq!(logits.shape()[0], ids.len());
    let err = max_abs(&data(&logits), &f32s("logits"));
    eprintln!("qwen3_vl_moe/one_image: prefill max-abs error vs transformers = {err:.3e}");
    assert!(err <= 1e-4, "max-abs error {err} exceeds 1e-4");
}

#[test]
fn greedy_generation_after_image_matches_transformers() {
    let ids = ref_i32s(&ref_path(), "input_ids");
    let want = ref_i32s(&ref_path(), "greedy_ids");
    let mut m = load();
    let cache = new_cache();
    let (mut logits, delta) = m
        .prefill_images(&cache, &ids, &images(), true)
        .unwrap_or_else(|e| panic!("{}", e.0));
    let mut got = vec![];
    for i in ids.len().. {
        got.push(m.argmax_last(&logits).expect("argmax"));
        if got.len() == want.len() {
            break;
        }
        let pos = (i as i64 + delta) as usize;
        logits = m
            .step(&cache, &got[got.len() - 1..], pos, true)
            .expect("decode");
    }
    assert_eq!(got, want, "greedy ids differ from transformers");
}

#[test]
fn cached_decode_after_image_equals_full_forward() {
    let ids = ref_i32s(&ref_path(), "input_ids");
    let extra = ref_i32s(&ref_path(), "greedy_ids");
    let all: Vec<i32> = ids.iter().chain(&extra).copied().collect();
    let mut m = load();
    let (full, _) = m
        .prefill_images(&new_cache(), &all, &images(), false)
        .unwrap_or_else(|e| panic!("{}", e.0));
    let full = data(&full);
    let vocab = full.len() / all.len();
    let cache = new_cache();
    let (_, delta) = m
        .prefill_images(&cache, &ids, &images(), true)
        .unwrap_or_else(|e| panic!("{}", e.0));
    let mut rows = vec![];
    for (j, &id) in extra.iter().enumerate() {
        let pos = ((ids.len() + j) as i64 + delta) as usize;
        rows.extend(data(
            &m.step(&cache, &[id], pos, false).expect("decode step"),
        ));
    }
    let want = &full[ids.len() * vocab..];
    let err = max_abs(&rows, want);
    let scale = want.iter().fold(1.0f32, |a, v| a.max(v.abs()));
    eprintln!(
        "qwen3_vl_moe: cached decode vs full forward max-abs = {err:.3e} (max |logit| {scale:.2})"
    );
    assert!(
        err <= 2e-6 * scale,
        "cached decode differs by {err} (max |logit| {scale})"
    );
}
