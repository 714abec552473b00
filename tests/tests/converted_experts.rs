//! `mllm convert` of a checkpoint whose fused expert stacks are stored
//! transposed (published Qwen3-VL-MoE: `gate_up_proj` [E, H, 2I],
//! `down_proj` [E, I, H]): the .mllm holds them in the layout the script
//! declares ([E, 2I, H], [E, H, I]), so quantized blocks run along the rows
//! the expert kernel reads and the file loads (before, a quantized stack
//! failed at load with "use a float checkpoint"). Checked on the one-image
//! prompt of the fixture against transformers 5.24: f32 as close as the
//! float checkpoint itself; the experts alone at q8_0 (the rest f32, so the
//! cosine measures the stacks, not this tiny model's q8_0 router) within
//! 0.999 cosine.

mod common;

use common::golden::worst_cosine;
use common::*;
use mllm_converter::mllm_format::{MllmFile, StoredType};
use mllm_runtime::images::read_images;

const CASE: &str = "qwen3_vl_moe/p8_m2_moe_published";
const LAYER: &str = "model.language_model.layers.0.mlp.experts";

fn reference_f32s(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixture(CASE).join("reference_one_image.safetensors")).expect("ref");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Prefill logits of the image prompt from `path` (a .mllm).
fn image_logits(path: &std::path::Path) -> Vec<f32> {
    let r = fixture(CASE).join("reference_one_image.safetensors");
    let ids = ref_i32s(&r, "input_ids");
    let images =
        read_images(r.to_str().expect("utf-8")).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut m = mllm_runtime::load("qwen3_vl_moe", path.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}: {}", path.display(), e.render(false)));
    let (logits, _) = m
        .prefill_images(&new_cache(), &ids, &images, false)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    data(&logits)
}

fn convert(
    ty: &str,
    recipe: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let out = dir.join(format!("vl_moe.{ty}.mllm"));
    mllm_converter::mllm_format::convert(&fixture(CASE), &out, ty, recipe, |_, _| {})
        .unwrap_or_else(|e| panic!("{ty}: {e}"));
    out
}

#[test]
fn transposed_expert_stacks_are_written_as_declared() {
    let dir = tempfile::tempdir().expect("tmp");
    let want = reference_f32s("logits");
    let vocab = 312;

    let f32_file = convert("f32", None, dir.path());
    let f = MllmFile::open(&f32_file).expect("open");
    let shape = |f: &MllmFile, p: &str| f.tensor(&format!("{LAYER}.{p}")).expect(p).shape.clone();
    assert_eq!(shape(&f, "gate_up_proj"), [8, 24, 32]);
    assert_eq!(shape(&f, "down_proj"), [8, 32, 12]);
    let err = max_abs(&image_logits(&f32_file), &want);
    eprintln!("{CASE} -> f32 .mllm: prefill max-abs vs transformers = {err:.3e}");
    assert!(err <= 1e-4, "f32: max-abs {err}");

    let recipe = dir.path().join("experts.recipe");
    std::fs::write(
        &recipe,
        "*.experts.gate_up_proj q8_0\n*.experts.down_proj q8_0\n",
    )
    .expect("recipe");
    let q8 = convert("f32", Some(&recipe), dir.path());
    let f = MllmFile::open(&q8).expect("open");
    let gate_up = f.tensor(&format!("{LAYER}.gate_up_proj")).expect("gate_up");
    // Rows of H = 32: one Q8_0 block each. (down_proj's rows of I = 12 are
    // no whole block: the recipe keeps it in a float type.)
    assert_eq!(gate_up.shape, [8, 24, 32]);
    assert_eq!(gate_up.ty, StoredType::parse("q8_0").expect("type"));
    let cos = worst_cosine(&image_logits(&q8), &want, vocab);
    eprintln!("{CASE} -> q8_0 experts: worst per-position cosine vs transformers = {cos:.6}");
    assert!(cos >= 0.999, "q8_0: cosine {cos}");
}
