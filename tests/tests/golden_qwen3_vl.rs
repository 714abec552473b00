//! Qwen3-VL (dense) against Hugging Face transformers: two tiny random-weight
//! checkpoints made by `tests/fixtures/qwen3_vl/make_qwen3_vl_fixtures.py`,
//! each with a one-image and a two-image prompt (reference logits, 3D
//! positions, greedy ids and vision intermediates beside them).

mod common;

use common::*;
use mllm_backends::Tensor;
use mllm_interpreter::mrope::mrope_positions;
use mllm_interpreter::{Eager, Value};
use mllm_runtime::images::{read_images, Images};
use mllm_runtime::Loaded;

const CONFIGS: &[&str] = &["p16_m2_tied_published", "p8_m3_untied_ropeparams"];
const PROMPTS: &[&str] = &["one_image", "two_images"];
const IMAGE_TOKEN: i32 = 300;

fn cases() -> impl Iterator<Item = (&'static str, &'static str)> {
    CONFIGS
        .iter()
        .flat_map(|c| PROMPTS.iter().map(move |p| (*c, *p)))
}

fn ref_path(config: &str, prompt: &str) -> String {
    fixture(&format!("qwen3_vl/{config}"))
        .join(format!("reference_{prompt}.safetensors"))
        .display()
        .to_string()
}

/// One reference file's tensors, f32 or i32 (i64 narrowed), by name.
struct Ref {
    bytes: Vec<u8>,
}

impl Ref {
    fn open(config: &str, prompt: &str) -> Ref {
        Ref {
            bytes: std::fs::read(ref_path(config, prompt)).expect("reference file"),
        }
    }

    fn st(&self) -> safetensors::SafeTensors<'_> {
        safetensors::SafeTensors::deserialize(&self.bytes).expect("valid safetensors")
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn i32s(&self, name: &str) -> Vec<i32> {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
        t.data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn images(&self, config: &str, prompt: &str) -> Images {
        read_images(&ref_path(config, prompt)).unwrap_or_else(|e| panic!("{}", e.render(false)))
    }
}

fn merge_of(config: &str) -> i64 {
    let text = std::fs::read_to_string(fixture(&format!("qwen3_vl/{config}")).join("config.json"))
        .expect("config.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["vision_config"]["spatial_merge_size"]
        .as_i64()
        .expect("merge size")
}

fn load_vl(config: &str) -> Loaded {
    load_with(&script("qwen3_vl"), &format!("qwen3_vl/{config}"))
}

#[test]
fn positions_match_get_rope_index() {
    for (config, prompt) in cases() {
        let r = Ref::open(config, prompt);
        let ids = r.i32s("input_ids");
        let images = r.images(config, prompt);
        let p = mrope_positions(&ids, IMAGE_TOKEN, &images.grid_thw, merge_of(config))
            .expect("positions");
        assert_eq!(
            p.rows.concat(),
            r.i32s("positions"),
            "{config}/{prompt}: positions"
        );
        assert_eq!(
            p.delta,
            r.i32s("rope_delta")[0] as i64,
            "{config}/{prompt}: delta"
        );
    }
}

#[test]
fn vision_tower_matches_transformers() {
    for (config, prompt) in cases() {
        let r = Ref::open(config, prompt);
        let images = r.images(config, prompt);
        let m = load_vl(config);
        let grids: Vec<i32> = images
            .grid_thw
            .iter()
            .flatten()
            .map(|&v| v as i32)
            .collect();
        let k = images.grid_thw.len();
        let out = m
            .runner
            .model
            .call(
                "image_features",
                &mut Eager::new(mllm_backends::CpuBackend),
                vec![
                    ("pixel_values", Value::Tensor(images.pixel_values.clone())),
                    (
                        "image_grid_thw",
                        Value::Tensor(Tensor::from_i32(grids, vec![k, 3]).expect("grid")),
                    ),
                ],
            )
            .unwrap_or_else(|e| panic!("{}", e.render(&m.runner.model.program.sources, false)));
        let Value::Tuple(parts) = out else {
            panic!("image_features returns (features, deepstack)")
        };
        let Value::Tensor(merged) = &parts[0] else {
            panic!("features tensor")
        };
        let err = max_abs(&data(merged), &r.f32s("vision_merged"));
        eprintln!("{config}/{prompt}: vision merger output max-abs = {err:.3e}");
        assert!(
            err <= 1e-4,
            "{config}/{prompt}: merger output differs by {err}"
        );
        let Value::List(deep) = &parts[1] else {
            panic!("deepstack list")
        };
        assert!(!deep.is_empty(), "{config}: DeepStack is on");
        for (i, d) in deep.iter().enumerate() {
            let Value::Tensor(d) = d else {
                panic!("deepstack tensor")
            };
            let err = max_abs(&data(d), &r.f32s(&format!("deepstack_{i}")));
            eprintln!("{config}/{prompt}: deepstack {i} max-abs = {err:.3e}");
            assert!(
                err <= 1e-4,
                "{config}/{prompt}: deepstack {i} differs by {err}"
            );
        }
    }
}

#[test]
fn prefill_logits_match_transformers() {
    for (config, prompt) in cases() {
        let r = Ref::open(config, prompt);
        let ids = r.i32s("input_ids");
        let want = r.f32s("logits");
        let mut m = load_vl(config);
        let (logits, _) = m
            .prefill_images(&new_cache(), &ids, &r.images(config, prompt), false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        assert_eq!(logits.shape()[0], ids.len(), "{config}/{prompt}: rows");
        let err = max_abs(&data(&logits), &want);
        eprintln!("{config}/{prompt}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(
            err <= 1e-4,
            "{config}/{prompt}: max-abs error {err} exceeds 1e-4"
        );
    }
}

/// Greedy decoding through the KV cache after the image prompt.
fn greedy_after_images(m: &mut Loaded, ids: &[i32], images: &Images, n: usize) -> Vec<i32> {
    let cache = new_cache();
    let (mut logits, delta) = m
        .prefill_images(&cache, ids, images, true)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut got = vec![];
    for i in ids.len().. {
        let next = m.argmax_last(&logits).expect("argmax");
        got.push(next);
        if got.len() == n {
            break;
        }
        let pos = (i as i64 + delta) as usize;
        logits = m.step(&cache, &[next], pos, true).expect("decode");
    }
    got
}

#[test]
fn greedy_generation_after_images_matches_transformers() {
    for (config, prompt) in cases() {
        let r = Ref::open(config, prompt);
        let want = r.i32s("greedy_ids");
        let mut m = load_vl(config);
        let got = greedy_after_images(
            &mut m,
            &r.i32s("input_ids"),
            &r.images(config, prompt),
            want.len(),
        );
        assert_eq!(
            got, want,
            "{config}/{prompt}: greedy ids differ from transformers"
        );
    }
}

#[test]
fn cached_decode_after_images_equals_full_forward() {
    for (config, prompt) in cases() {
        let r = Ref::open(config, prompt);
        let images = r.images(config, prompt);
        let mut m = load_vl(config);
        let ids = r.i32s("input_ids");
        let extra = r.i32s("greedy_ids");
        let all: Vec<i32> = ids.iter().chain(&extra).copied().collect();
        // One forward over prompt + continuation, positions from scratch.
        let (full, _) = m
            .prefill_images(&new_cache(), &all, &images, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let full = data(&full);
        let vocab = full.len() / all.len();
        // The prompt, then the continuation one token at a time.
        let cache = new_cache();
        let (_, delta) = m
            .prefill_images(&cache, &ids, &images, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut rows = vec![];
        for (j, &id) in extra.iter().enumerate() {
            let pos = ((ids.len() + j) as i64 + delta) as usize;
            rows.extend(data(
                &m.step(&cache, &[id], pos, false).expect("decode step"),
            ));
        }
        let want = &full[ids.len() * vocab..];
        let err = max_abs(&rows, want);
        // The two attention paths (per-row decode, GEMM prefill) sum in
        // different orders: agreement to f32 rounding, relative to the
        // logits' scale (values up to ~10 here).
        let scale = want.iter().fold(1.0f32, |a, v| a.max(v.abs()));
        eprintln!("{config}/{prompt}: cached decode vs full forward max-abs = {err:.3e} (max |logit| {scale:.2})");
        assert!(
            err <= 2e-6 * scale,
            "{config}/{prompt}: cached decode differs by {err} (max |logit| {scale})"
        );
    }
}

#[test]
fn mismatched_images_are_clear_errors() {
    let (config, prompt) = ("p16_m2_tied_published", "two_images");
    let r = Ref::open(config, prompt);
    let mut m = load_vl(config);
    let mut images = r.images(config, prompt);
    images.grid_thw.pop();
    let err = match m.prefill_images(&new_cache(), &r.i32s("input_ids"), &images, true) {
        Ok(_) => panic!("a missing grid must be refused"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("image_grid_thw"), "{err}");
}

/// Without images the script runs through the text-only path every other
/// command uses (1-D positions, no pixel values), as transformers does.
#[test]
fn text_only_prompt_matches_transformers() {
    for config in CONFIGS {
        let r = Ref::open(config, "text_only");
        let ids = r.i32s("input_ids");
        let mut m = load_vl(config);
        let logits = m.step(&new_cache(), &ids, 0, false).expect("forward");
        let err = max_abs(&data(&logits), &r.f32s("logits"));
        eprintln!("{config}/text_only: prefill max-abs error vs transformers = {err:.3e}");
        assert!(
            err <= 1e-4,
            "{config}/text_only: max-abs error {err} exceeds 1e-4"
        );
        let want = r.i32s("greedy_ids");
        assert_eq!(
            greedy(&mut m, &ids, want.len()),
            want,
            "{config}/text_only: greedy ids"
        );
    }
}

/// `mllm convert` handles the vision tower too (the 5-D patch kernel keeps
/// a float type when its rows are not whole blocks): the converted file
/// runs the two-image prompt alone, with logits close to the f32 reference.
#[test]
fn converted_checkpoint_runs_images() {
    let (config, prompt) = ("p16_m2_tied_published", "two_images");
    let r = Ref::open(config, prompt);
    let want = r.f32s("logits");
    let ids = r.i32s("input_ids");
    let dir = tempfile::tempdir().expect("tmp");
    for (ty, bound) in [("f16", 0.9999), ("q8_0", 0.997)] {
        let out = dir.path().join(format!("vl-{ty}.mllm"));
        mllm_converter::mllm_format::convert(
            &fixture(&format!("qwen3_vl/{config}")),
            &out,
            ty,
            None,
            |_, _| {},
        )
        .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let mut m = match mllm_runtime::load(&script("qwen3_vl"), out.to_str().expect("utf-8")) {
            Ok(m) => m,
            Err(e) => panic!("{ty}: {}", e.render(false)),
        };
        let (logits, _) = m
            .prefill_images(&new_cache(), &ids, &r.images(config, prompt), false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let got = data(&logits);
        let vocab = got.len() / ids.len();
        // The shared helper: NaN/Inf or a zero row fails.
        let worst = worst_cosine(&got, &want, vocab);
        eprintln!("{config} {ty}: worst per-position cosine vs f32 reference = {worst:.6}");
        assert!(worst >= bound, "{ty}: cosine {worst} < {bound}");
    }
}
