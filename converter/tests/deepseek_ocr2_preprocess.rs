//! DeepSeek-OCR 2 preprocessing against transformers 5.24's
//! `DeepseekOcr2Processor` / `DeepseekOcr2ImageProcessor` (torchvision
//! backend) on the images in tests/fixtures/deepseek_ocr2/preprocess (made
//! by tests/fixtures/make_deepseek_ocr2_fixtures.py): the global views and
//! local tiles bit for bit, the tile grids, `num_local_patches`, and the
//! expanded prompt ids.

use std::path::PathBuf;

use mllm_converter::image_preprocess::{
    expand_image_placeholders, expand_image_tokens, image_token_count, optimal_tile_grid,
    preprocess_deepseek_ocr2, preprocess_deepseek_ocr2_files, supported_tile_grids,
    DeepseekOcr2PreprocessConfig, RgbImage,
};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/deepseek_ocr2/preprocess")
}

fn doc() -> Value {
    let text = std::fs::read_to_string(dir().join("cases.json")).expect("cases.json");
    serde_json::from_str(&text).expect("cases.json is JSON")
}

fn config(doc: &Value, name: &str) -> DeepseekOcr2PreprocessConfig {
    DeepseekOcr2PreprocessConfig::from_json(&doc["configs"][name], None, name).expect("config")
}

/// The u8 levels behind normalized values, checked to be lossless (the
/// fixture stores HF's output the same way).
fn levels(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .map(|&v| {
            let l = (v * 127.5 + 127.5).round();
            assert!((0.0..=255.0).contains(&l), "value {v} is no level");
            assert_eq!(
                (l - 127.5) / 127.5,
                v,
                "value {v} is not (u8 - 127.5) / 127.5"
            );
            l as u8
        })
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("integer") as usize)
        .collect()
}

fn max_abs_levels(a: &[u8], b: &[u8]) -> u8 {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}

#[test]
fn parity_with_transformers_on_every_fixture() {
    let doc = doc();
    let cases = doc["cases"].as_object().expect("cases");
    assert!(cases.len() >= 10, "expected the fixture cases");
    let bytes = std::fs::read(dir().join("reference.safetensors")).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let image_token_id = doc["image_token_id"].as_u64().expect("id") as u32;
    for (case, c) in cases {
        let cfg = config(&doc, c["config"].as_str().expect("config name"));
        let path = dir().join(c["image"].as_str().expect("image"));
        // Two copies in one call, as the fixture's processor call.
        let out = preprocess_deepseek_ocr2_files(&[&path, &path], &cfg).expect(case);
        let n = c["num_local_patches"].as_u64().expect("n") as usize;
        assert_eq!(
            out.num_local_patches,
            vec![n, n],
            "{case}: num_local_patches"
        );
        let grid = c["grid_cols_rows"].as_array().map(|g| {
            let g = usizes(&Value::Array(g.clone()));
            (g[0], g[1])
        });
        assert_eq!(out.grids, vec![grid, grid], "{case}: tile grid");

        let gshape = usizes(&c["global_shape"]);
        let s = out.global_size;
        assert_eq!(gshape, vec![1, 3, s, s], "{case}: global shape");
        let per_global = 3 * s * s;
        assert_eq!(out.pixel_values.len(), 2 * per_global);
        let (g0, g1) = out.pixel_values.split_at(per_global);
        assert_eq!(g0, g1, "{case}: the two copies differ");
        let glob = levels(g0);
        assert_eq!(
            crc32fast::hash(&glob) as u64,
            c["global_crc32"].as_u64().expect("crc"),
            "{case}: global view differs from transformers"
        );
        if let Ok(t) = st.tensor(&format!("{case}.global")) {
            assert_eq!(max_abs_levels(&glob, t.data()), 0, "{case}: global levels");
            assert_eq!(glob, t.data(), "{case}: global levels");
        }

        let t = out.tile_size;
        assert_eq!(out.pixel_values_local.len(), 2 * n * 3 * t * t);
        if n > 0 {
            assert_eq!(
                usizes(&c["local_shape"]),
                vec![n, 3, t, t],
                "{case}: local shape"
            );
            let (l0, l1) = out.pixel_values_local.split_at(n * 3 * t * t);
            assert_eq!(l0, l1);
            let loc = levels(l0);
            assert_eq!(
                crc32fast::hash(&loc) as u64,
                c["local_crc32"].as_u64().expect("crc"),
                "{case}: local tiles differ from transformers"
            );
            if let Ok(r) = st.tensor(&format!("{case}.local")) {
                assert_eq!(loc, r.data(), "{case}: local levels");
            }
        } else {
            assert!(c.get("local_shape").is_none());
        }

        // The prompt: ids before expansion, expanded per image.
        let count = image_token_count(&cfg, n);
        assert_eq!(
            count as u64,
            c["tokens_per_image"].as_u64().expect("tokens")
        );
        let prompt: Vec<u32> = usizes(&c["prompt_ids"]).iter().map(|&x| x as u32).collect();
        let expected: Vec<u32> = usizes(&c["input_ids"]).iter().map(|&x| x as u32).collect();
        let ids = expand_image_tokens(&prompt, image_token_id, &[count, count]).expect("expand");
        assert_eq!(ids, expected, "{case}: input_ids");
        // The same through the text, tokenized with the fixture's word-level
        // vocabulary (`<image>` special, then whitespace).
        let text = expand_image_placeholders(
            doc["prompt"].as_str().expect("prompt"),
            "<image>",
            &[count, count],
        )
        .expect("expand text");
        assert_eq!(word_level_ids(&text), expected, "{case}: expanded text");
        println!("{case}: grid {grid:?}, {n} tiles, {count} tokens/image, max-abs 0 levels");
    }
}

fn word_level_ids(text: &str) -> Vec<u32> {
    let vocab = ["<unk>", "<image>", "Free", "OCR", ".", "describe", "<eos>"];
    let id = |w: &str| vocab.iter().position(|v| *v == w).unwrap_or(0) as u32;
    let mut out = Vec::new();
    for (i, part) in text.split("<image>").enumerate() {
        if i > 0 {
            out.push(1);
        }
        out.extend(part.split_whitespace().map(id));
    }
    out
}

#[test]
fn tile_grid_matches_the_python_table() {
    let doc = doc();
    let rows = doc["tiling_table"].as_array().expect("table");
    assert!(rows.len() >= 100);
    for r in rows {
        let g = |k: &str| r[k].as_u64().expect(k) as usize;
        let want = usizes(&r["out"]);
        let got = optimal_tile_grid(g("h"), g("w"), g("tile"), g("min"), g("max"));
        assert_eq!(vec![got.0, got.1], want, "{r}");
    }
    assert_eq!(
        supported_tile_grids(1, 4),
        vec![
            (1, 1),
            (1, 2),
            (2, 1),
            (1, 3),
            (3, 1),
            (1, 4),
            (2, 2),
            (4, 1)
        ]
    );
}

#[test]
fn defaults_and_token_counts() {
    let cfg = DeepseekOcr2PreprocessConfig::default();
    assert_eq!(image_token_count(&cfg, 0), 257);
    assert_eq!(image_token_count(&cfg, 6), 256 + 6 * 144 + 1);
    let json: Value = serde_json::json!({
        "size": {"height": 1024, "width": 1024},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "crop_to_patches": true,
        "image_processor_type": "DeepseekOcr2ImageProcessor"
    });
    let parsed = DeepseekOcr2PreprocessConfig::from_json(&json, None, "t").expect("parse");
    assert_eq!(parsed, cfg);
}

#[test]
fn bad_inputs_are_errors() {
    let cfg = DeepseekOcr2PreprocessConfig::default();
    // A 1 x 5000 image: the global view's short side would round to 0.
    let thin = RgbImage {
        height: 1,
        width: 5000,
        data: vec![0; 15000],
    };
    assert!(preprocess_deepseek_ocr2(&[thin], &cfg).is_err());
    let short = RgbImage {
        height: 4,
        width: 4,
        data: vec![0; 10],
    };
    assert!(preprocess_deepseek_ocr2(&[short], &cfg).is_err());
    assert!(expand_image_tokens(&[1, 2, 1], 1, &[3]).is_err());
    assert!(expand_image_placeholders("<image>", "<image>", &[]).is_err());
    for bad in [
        serde_json::json!({"size": {"width": 10}}),
        serde_json::json!({"tile_size": 0}),
        serde_json::json!({"max_patches": 100000}),
        serde_json::json!({"background_color": [1, 2, 300]}),
        serde_json::json!({"crop_to_patches": "yes"}),
        serde_json::json!([1]),
    ] {
        assert!(
            DeepseekOcr2PreprocessConfig::from_json(&bad, None, "t").is_err(),
            "{bad}"
        );
    }
}
