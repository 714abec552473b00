//! DeepSeek-OCR 2's vision tower (stdlib/deepseek_ocr2_vision.mdl) against
//! transformers 5.24 on a tiny random checkpoint made by
//! tests/fixtures/make_deepseek_ocr2_vision_fixtures.py: one 208 px global
//! view (the config's image size: pos_embed as stored, 169 SAM tokens, the
//! 256 `query_1024` rows) and two 136 px tiles (pos_embed resized by
//! antialiased bicubic, global layers' rel_pos interpolated, an odd grid
//! after the first stride-2 conv, 81 tokens, the 144 `query_768` rows).
//! The test script tests/lang/deepseek_ocr2_vision_tiny.mdl mounts the
//! modules at the checkpoint's own paths (`model.sam_model`,
//! `model.qwen2_model`).

mod common;

use common::*;
use mllm_backends::{CpuBackend, Tensor};
use mllm_interpreter::{Eager, Value};
use mllm_runtime::Loaded;

const CASE: &str = "deepseek_ocr2/vision_tiny";
const TOL: f32 = 1e-4;

/// (view set, batch, side, SAM tokens per view, query rows per view)
const VIEWS: &[(&str, usize, usize, usize, usize)] =
    &[("global", 1, 208, 169, 256), ("tiles", 2, 136, 81, 144)];
const SAM_OUT: usize = 40;

struct Ref {
    bytes: Vec<u8>,
}

impl Ref {
    fn open() -> Ref {
        Ref {
            bytes: std::fs::read(fixture(CASE).join("reference.safetensors"))
                .expect("reference.safetensors"),
        }
    }

    fn raw(&self, name: &str) -> Vec<u8> {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).expect("valid safetensors");
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
        t.data().to_vec()
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        self.raw(name)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// pixel_values as the processor computes them from u8 levels, in f32.
    fn pixels(&self, view: &str, batch: usize, side: usize) -> Tensor {
        let px: Vec<f32> = self
            .raw(&format!("{view}.levels"))
            .iter()
            .map(|&l| (l as f32 - 127.5) / 127.5)
            .collect();
        Tensor::from_f32(px, vec![batch, 3, side, side]).expect("pixels")
    }
}

fn load_tower() -> Loaded {
    let script = root().join("tests/lang/deepseek_ocr2_vision_tiny.mdl");
    load_with(script.to_str().expect("utf-8"), CASE)
}

/// Calls a function of the test script; returns its tuple's tensors.
fn call(m: &Loaded, func: &str, pixels: Tensor) -> Vec<Tensor> {
    let out = m
        .runner
        .model
        .call(
            func,
            &mut Eager::new(CpuBackend),
            vec![("pixel_values", Value::Tensor(pixels))],
        )
        .unwrap_or_else(|e| panic!("{}", e.render(&m.runner.model.program.sources, false)));
    let Value::Tuple(parts) = out else {
        panic!("{func} returns a tuple")
    };
    parts
        .iter()
        .map(|p| match p {
            Value::Tensor(t) => t.clone(),
            other => panic!("{func}: expected tensors, got {other:?}"),
        })
        .collect()
}

/// Max-abs difference, after checking the shape and that the reference is
/// far from zero (a test that cannot fail on an all-zero output).
fn compare(what: &str, got: &Tensor, shape: &[usize], want: &[f32]) -> f32 {
    assert_eq!(got.shape(), shape, "{what}: shape");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        scale > 0.5,
        "{what}: the reference is nearly zero ({scale})"
    );
    let err = max_abs(&data(got), want);
    eprintln!("{what}: max-abs {err:.3e} (reference max |.| {scale:.3})");
    err
}

#[test]
fn sam_and_encoder_outputs_match_transformers() {
    let r = Ref::open();
    let m = load_tower();
    for &(view, batch, side, tokens, queries) in VIEWS {
        let parts = call(&m, "image_features", r.pixels(view, batch, side));
        let sam = compare(
            &format!("{view} SAM tokens"),
            &parts[0],
            &[batch, tokens, SAM_OUT],
            &r.f32s(&format!("{view}.sam")),
        );
        let feats = compare(
            &format!("{view} encoder features"),
            &parts[1],
            &[batch, queries, SAM_OUT],
            &r.f32s(&format!("{view}.features")),
        );
        assert!(sam <= TOL, "{view}: SAM output differs by {sam}");
        assert!(feats <= TOL, "{view}: encoder output differs by {feats}");
    }
}

/// The tiles' stages before the strided convs: the bicubic-resized
/// pos_embed (52 -> 34 per axis) and the neck's output.
#[test]
fn tile_positions_and_neck_match_transformers() {
    let r = Ref::open();
    let m = load_tower();
    let parts = call(&m, "sam_stages", r.pixels("tiles", 2, 136));
    let pos = compare(
        "tiles pos_embed",
        &parts[0],
        &[34, 34, 32],
        &r.f32s("tiles.pos"),
    );
    // The matrices replay torch's f32 weight arithmetic: far below the
    // model tolerance (f64 weights would be off by ~1e-5 here).
    assert!(pos <= 2e-6, "resized pos_embed differs by {pos}");
    let neck = compare(
        "tiles neck",
        &parts[1],
        &[2, 34, 34, 16],
        &r.f32s("tiles.neck"),
    );
    assert!(neck <= TOL, "neck output differs by {neck}");
}

/// SAM computes attention scores in blocks of query rows when a head's
/// scores exceed `attention_chunk` (every global layer of a real 1024 px
/// view): with a chunk of 1000 floats every attention here is cut into
/// row blocks (1 to 3 rows of a 13 x 13 grid) and the outputs still match.
#[test]
fn attention_in_row_blocks_matches_transformers() {
    let r = Ref::open();
    let tmp = tempfile::tempdir().expect("tmp");
    for entry in std::fs::read_dir(fixture(CASE)).expect("fixture dir") {
        let p = entry.expect("entry").path();
        std::fs::copy(&p, tmp.path().join(p.file_name().expect("name"))).expect("copy");
    }
    let cfg_path = tmp.path().join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).expect("config")).expect("json");
    cfg["vision_config"]["sam_config"]["attention_chunk"] = 1000.into();
    std::fs::write(&cfg_path, cfg.to_string()).expect("write config");
    let script = root().join("tests/lang/deepseek_ocr2_vision_tiny.mdl");
    let m = mllm_runtime::load(
        script.to_str().expect("utf-8"),
        tmp.path().to_str().expect("utf-8"),
    )
    .unwrap_or_else(|e| panic!("{}", e.render(false)));
    for &(view, batch, side, tokens, _) in VIEWS {
        let parts = call(&m, "image_features", r.pixels(view, batch, side));
        let sam = compare(
            &format!("{view} SAM tokens, row blocks"),
            &parts[0],
            &[batch, tokens, SAM_OUT],
            &r.f32s(&format!("{view}.sam")),
        );
        assert!(
            sam <= TOL,
            "{view}: SAM output in row blocks differs by {sam}"
        );
    }
}
