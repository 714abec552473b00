//! Qwen3.5 and Qwen3.5-MoE `*ForConditionalGeneration` with images against
//! transformers 5.24: two tiny random-weight checkpoints made by
//! `tests/fixtures/make_qwen3_5_vl_fixtures.py` (`dense`: mrope_section
//! [4, 2, 2], tied; `moe`: the default section, experts), each with a
//! one-image and a two-image prompt (vision features, 3D positions, prefill
//! logits and greedy ids beside them). The vision tower is Qwen3-VL's
//! without DeepStack; the hybrid decoder's full-attention layers rotate
//! their partial rotary dims by interleaved multimodal rope.

mod common;

use common::golden::load_auto;
use common::*;
use mllm_backends::Tensor;
use mllm_interpreter::mrope::mrope_positions;
use mllm_interpreter::{Eager, Value};
use mllm_runtime::images::{read_images, Images};
use mllm_runtime::Loaded;

const CASES: &[&str] = &["dense", "moe"];
const PROMPTS: &[&str] = &["one_image", "two_images"];
const IMAGE_TOKEN: i32 = 300;
const MERGE: i64 = 2;

fn cases() -> impl Iterator<Item = (&'static str, &'static str)> {
    CASES
        .iter()
        .flat_map(|c| PROMPTS.iter().map(move |p| (*c, *p)))
}

fn ref_path(case: &str, prompt: &str) -> std::path::PathBuf {
    fixture(&format!("qwen3_5_vl/{case}")).join(format!("reference_{prompt}.safetensors"))
}

fn f32s(case: &str, prompt: &str, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(ref_path(case, prompt)).expect("reference file");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i32s(case: &str, prompt: &str, name: &str) -> Vec<i32> {
    ref_i32s(&ref_path(case, prompt), name)
}

fn images(case: &str, prompt: &str) -> Images {
    read_images(ref_path(case, prompt).to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

/// The script chosen by config.json's `architectures` (models/qwen3_5.mdl or
/// models/qwen3_5_moe.mdl).
fn load(case: &str) -> Loaded {
    load_auto(&format!("qwen3_5_vl/{case}"))
}

#[test]
fn positions_match_get_rope_index() {
    for (case, prompt) in cases() {
        let ids = i32s(case, prompt, "input_ids");
        let p = mrope_positions(&ids, IMAGE_TOKEN, &images(case, prompt).grid_thw, MERGE)
            .expect("positions");
        assert_eq!(
            p.rows.concat(),
            i32s(case, prompt, "positions"),
            "{case}/{prompt}"
        );
        assert_eq!(
            p.delta,
            i32s(case, prompt, "rope_delta")[0] as i64,
            "{case}/{prompt}"
        );
    }
}

#[test]
fn vision_tower_matches_transformers() {
    for (case, prompt) in cases() {
        let imgs = images(case, prompt);
        let m = load(case);
        let grids: Vec<i32> = imgs.grid_thw.iter().flatten().map(|&v| v as i32).collect();
        let k = imgs.grid_thw.len();
        let out = m
            .runner
            .model
            .call(
                "image_features",
                &mut Eager::new(mllm_backends::CpuBackend),
                vec![
                    ("pixel_values", Value::Tensor(imgs.pixel_values.clone())),
                    (
                        "image_grid_thw",
                        Value::Tensor(Tensor::from_i32(grids, vec![k, 3]).expect("grid")),
                    ),
                ],
            )
            .unwrap_or_else(|e| panic!("{}", e.render(&m.runner.model.program.sources, false)));
        let Value::Tensor(feats) = out else {
            panic!("image_features returns the features tensor")
        };
        let err = max_abs(&data(&feats), &f32s(case, prompt, "vision_merged"));
        eprintln!("{case}/{prompt}: vision features max-abs = {err:.3e}");
        assert!(
            err <= 1e-4,
            "{case}/{prompt}: vision features differ by {err}"
        );
    }
}

#[test]
fn prefill_logits_match_transformers() {
    for (case, prompt) in cases() {
        let ids = i32s(case, prompt, "input_ids");
        let mut m = load(case);
        let (logits, _) = m
            .prefill_images(&new_cache(), &ids, &images(case, prompt), false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        assert_eq!(logits.shape()[0], ids.len(), "{case}/{prompt}: rows");
        let err = max_abs(&data(&logits), &f32s(case, prompt, "logits"));
        eprintln!("{case}/{prompt}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(
            err <= 1e-4,
            "{case}/{prompt}: max-abs error {err} exceeds 1e-4"
        );
    }
}

/// Greedy decoding through the cache (KV and DeltaNet states) after the
/// image prompt: each step at position `i + delta` on all three rope rows.
#[test]
fn greedy_generation_after_images_matches_transformers() {
    for (case, prompt) in cases() {
        let ids = i32s(case, prompt, "input_ids");
        let want = i32s(case, prompt, "greedy_ids");
        let mut m = load(case);
        let cache = new_cache();
        let (mut logits, delta) = m
            .prefill_images(&cache, &ids, &images(case, prompt), true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut got = vec![];
        for i in ids.len().. {
            let next = m.argmax_last(&logits).expect("argmax");
            got.push(next);
            if got.len() == want.len() {
                break;
            }
            let pos = (i as i64 + delta) as usize;
            logits = m.step(&cache, &[next], pos, true).expect("decode");
        }
        assert_eq!(
            got, want,
            "{case}/{prompt}: greedy ids differ from transformers"
        );
    }
}

/// The continuation decoded token by token after the image prompt equals
/// one forward over prompt + continuation (positions from scratch): the
/// rope delta and the DeltaNet states carry over.
#[test]
fn cached_decode_after_images_equals_full_forward() {
    for (case, prompt) in cases() {
        let imgs = images(case, prompt);
        let ids = i32s(case, prompt, "input_ids");
        let extra = i32s(case, prompt, "greedy_ids");
        let all: Vec<i32> = ids.iter().chain(&extra).copied().collect();
        let mut m = load(case);
        let (full, _) = m
            .prefill_images(&new_cache(), &all, &imgs, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let full = data(&full);
        let vocab = full.len() / all.len();
        let cache = new_cache();
        let (_, delta) = m
            .prefill_images(&cache, &ids, &imgs, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut rows = vec![];
        for (j, &id) in extra.iter().enumerate() {
            let pos = ((ids.len() + j) as i64 + delta) as usize;
            rows.extend(data(&m.step(&cache, &[id], pos, false).expect("decode")));
        }
        let err = max_abs(&rows, &full[ids.len() * vocab..]);
        // The DeltaNet prefill is the chunked form, decode the recurrence
        // (golden_qwen3_5*.rs: 3e-5 to 5e-5 on text prompts).
        eprintln!("{case}/{prompt}: cached decode vs full forward max-abs = {err:.3e}");
        assert!(
            err <= 5e-5,
            "{case}/{prompt}: cached decode differs by {err}"
        );
    }
}

/// A prompt whose image tokens disagree with the grids is a clear error.
#[test]
fn mismatched_images_are_clear_errors() {
    let (case, prompt) = ("dense", "two_images");
    let mut m = load(case);
    let mut imgs = images(case, prompt);
    imgs.grid_thw.pop();
    let err = match m.prefill_images(&new_cache(), &i32s(case, prompt, "input_ids"), &imgs, true) {
        Ok(_) => panic!("a missing grid must be refused"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("image_grid_thw"), "{err}");
}

/// What `mllm run --model tests/fixtures/qwen3_5_vl/dense --image ...` does
/// (as run_images.rs for Qwen3-VL): image files preprocessed in Rust with the
/// folder's preprocessor_config.json, the chat template given image parts,
/// placeholders expanded per merged patch, greedy decoding through the
/// engine; ids and greedy ids equal transformers' Qwen3VLProcessor +
/// Qwen3_5ForConditionalGeneration.generate (run_reference.json, made by
/// make_qwen3_5_vl_run_fixture.py).
#[test]
fn chat_prompts_with_image_files_match_transformers() {
    use mllm_runtime::engine::Engine;
    use mllm_runtime::images;
    use mllm_runtime::model_files::{self, load_model};
    let dir = root().join("tests/fixtures/qwen3_5_vl");
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run_reference.json")).expect("run_reference.json"),
    )
    .expect("json");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        let a = v.as_array().expect("ids");
        a.iter().map(|x| x.as_u64().expect("id") as u32).collect()
    };
    let files = model_files::open(dir.join("dense").to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    for case in ["one_image", "two_images"] {
        let c = &r["cases"][case];
        let paths: Vec<String> = c["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|p| dir.join(p.as_str().expect("path")).display().to_string())
            .collect();
        let (imgs, spec) =
            images::from_files(&files, &paths).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let grids: Vec<Vec<i64>> = imgs.grid_thw.iter().map(|g| g.to_vec()).collect();
        let want_grids: Vec<Vec<i64>> =
            serde_json::from_value(c["image_grid_thw"].clone()).expect("grids");
        assert_eq!(grids, want_grids, "{case}: image_grid_thw");
        let prompt = c["prompt"].as_str().expect("prompt");
        let text = images::prompt_text(&files, None, prompt, &imgs, &spec, false, None)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let got = tok.encode(&text, false).expect("encode");
        assert_eq!(got, ids(&c["input_ids"]), "{case}: prompt ids");
        let model = load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut engine = Engine::new(model, files.max_context());
        let mut logits = engine
            .feed_images(&got, &imgs, &spec)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let want = ids(&c["generated_ids"]);
        let mut gen = vec![];
        while gen.len() < want.len() {
            let t = mllm_runtime::generation::argmax(&logits) as u32;
            gen.push(t);
            logits = engine
                .step(t)
                .unwrap_or_else(|e| panic!("{}", e.render(false)));
        }
        assert_eq!(gen, want, "{case}: greedy ids after the images");
    }
}
