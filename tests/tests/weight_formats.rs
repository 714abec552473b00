//! Checkpoint layouts and dtypes: a sharded checkpoint (index + shards) and a
//! single safetensors file load to the same model; f16 weights stay f16 in
//! memory and give logits within f16 rounding of the f32 model.

mod common;

use std::path::Path;

use common::*;
use mllm_backends::weights::WeightSource;
use mllm_backends::DType;
use mllm_converter::SafetensorsDir;

type Raw = Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>;

fn read_fixture(case: &str) -> Raw {
    let bytes = std::fs::read(fixture(case).join("model.safetensors")).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut v: Raw = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn write(path: &Path, tensors: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write");
}

fn logits_of(dir: &Path, ids: &[i32]) -> Vec<f32> {
    let mut m = mllm_runtime::load(&qwen3_script(), dir.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    data(&m.step(&new_cache(), ids, 0, false).expect("forward"))
}

#[test]
fn sharded_checkpoint_equals_single_file() {
    let case = "mha_odd_f32";
    let r = reference(case);
    let tensors = read_fixture(case);
    let dir = tempfile::tempdir().expect("tmp");
    let (a, b) = tensors.split_at(tensors.len() / 2);
    write(&dir.path().join("model-00001-of-00002.safetensors"), a);
    write(&dir.path().join("model-00002-of-00002.safetensors"), b);
    let mut map = serde_json::Map::new();
    for (n, ..) in a {
        map.insert(n.clone(), "model-00001-of-00002.safetensors".into());
    }
    for (n, ..) in b {
        map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
    }
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .expect("index");
    std::fs::copy(
        fixture(case).join("config.json"),
        dir.path().join("config.json"),
    )
    .expect("config");
    let src = SafetensorsDir::open(dir.path()).expect("open shards");
    assert_eq!(src.names().len(), tensors.len());
    assert!(src.describe().contains("2 shards"), "{}", src.describe());
    let err = max_abs(&logits_of(dir.path(), &r.input_ids), &r.logits);
    assert!(err <= 1e-4, "sharded checkpoint logits differ by {err}");
}

#[test]
fn f16_weights_stay_f16_and_match_within_rounding() {
    let case = "gqa_tied_f32";
    let r = reference(case);
    let tensors: Raw = read_fixture(case)
        .into_iter()
        .map(|(n, _, s, b)| {
            let h: Vec<u8> = b
                .chunks_exact(4)
                .flat_map(|c| {
                    half::f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()
                })
                .collect();
            (n, safetensors::Dtype::F16, s, h)
        })
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    write(&dir.path().join("model.safetensors"), &tensors);
    std::fs::copy(
        fixture(case).join("config.json"),
        dir.path().join("config.json"),
    )
    .expect("config");
    let src = SafetensorsDir::open(dir.path()).expect("open");
    let t = src
        .load("model.layers.0.self_attn.q_proj.weight")
        .expect("load");
    assert_eq!(t.dtype(), DType::F16, "weights are not widened on load");
    let got = logits_of(dir.path(), &r.input_ids);
    // f16 weights move logits of magnitude ~7 by a few 1e-3; a wrong kernel moves them by > 1.
    let err = max_abs(&got, &r.logits);
    assert!(err < 0.05, "f16 logits differ by {err}");
    assert!(err > 0.0, "f16 rounding should change something");
}

#[test]
fn corrupt_safetensors_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::copy(
        fixture("gqa_tied_f32").join("config.json"),
        dir.path().join("config.json"),
    )
    .expect("config");
    let good = std::fs::read(fixture("gqa_tied_f32").join("model.safetensors")).expect("read");
    for (i, bad) in [
        good[..good.len() / 2].to_vec(),
        b"not a safetensors file at all".to_vec(),
        {
            let mut b = good.clone();
            b[0] = 0xff;
            b[1] = 0xff;
            b
        },
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(dir.path().join("model.safetensors"), &bad).expect("write");
        match SafetensorsDir::open(dir.path()) {
            Ok(_) => panic!("case {i}: a corrupt file was accepted"),
            Err(e) => assert!(e.to_string().contains("model.safetensors"), "case {i}: {e}"),
        }
    }
}
