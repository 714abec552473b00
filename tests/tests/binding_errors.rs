//! A checkpoint that does not fit the script is refused with errors that
//! name every offending tensor and point at the declaring script line.

mod common;

use std::path::Path;

use common::*;

/// Copies the `gqa_tied_f32` fixture into `dir`, letting `edit` change the
/// tensor list and `config` the config.json text.
fn variant(
    dir: &Path,
    edit: impl Fn(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>),
    config: impl Fn(String) -> String,
) {
    let src = fixture("gqa_tied_f32");
    let bytes = std::fs::read(src.join("model.safetensors")).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut tensors);
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).expect("write");
    let cfg = std::fs::read_to_string(src.join("config.json")).expect("config");
    std::fs::write(dir.join("config.json"), config(cfg)).expect("write config");
}

fn load_err(dir: &Path) -> String {
    match mllm_runtime::load(&qwen3_script(), dir.to_str().expect("utf-8")) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.render(false),
    }
}

#[test]
fn missing_tensor_is_named_with_its_declaration() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |t| t.retain(|(n, ..)| n != "model.layers.1.self_attn.k_norm.weight"),
        |c| c,
    );
    let err = load_err(dir.path());
    assert!(err.contains("mdl::bind::missing"), "{err}");
    assert!(
        err.contains("model.layers.1.self_attn.k_norm.weight"),
        "{err}"
    );
    assert!(
        err.contains("param weight[dim]"),
        "the declaring line is shown: {err}"
    );
    assert!(
        err.contains("qwen3.mdl"),
        "the model script's member is named: {err}"
    );
}

#[test]
fn misshaped_tensor_reports_both_shapes() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |t| {
            for (n, _, shape, bytes) in t.iter_mut() {
                if n == "model.norm.weight" {
                    *shape = vec![32];
                    bytes.truncate(32 * 4);
                }
            }
        },
        |c| c,
    );
    let err = load_err(dir.path());
    assert!(err.contains("mdl::bind::shape"), "{err}");
    assert!(err.contains("`model.norm.weight` has shape [32]"), "{err}");
    assert!(err.contains("declares [64]"), "{err}");
}

#[test]
fn extra_tensors_are_reported() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |t| {
            t.push((
                "model.layers.0.mystery.weight".into(),
                safetensors::Dtype::F32,
                vec![2],
                vec![0; 8],
            ))
        },
        |c| c,
    );
    let err = load_err(dir.path());
    assert!(err.contains("mdl::bind::unused"), "{err}");
    assert!(err.contains("model.layers.0.mystery.weight"), "{err}");
}

#[test]
fn all_binding_problems_are_reported_at_once() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |t| t.retain(|(n, ..)| !n.ends_with("q_norm.weight")),
        |c| c,
    );
    let err = load_err(dir.path());
    assert_eq!(
        err.matches("mdl::bind::missing").count(),
        2,
        "one error per layer: {err}"
    );
}

#[test]
fn missing_config_field_names_the_field_and_file() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |_| {},
        |c| c.replace("\"num_hidden_layers\"", "\"renamed_layers\""),
    );
    let err = load_err(dir.path());
    assert!(err.contains("mdl::config::missing"), "{err}");
    assert!(err.contains("num_hidden_layers"), "{err}");
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn wrong_config_type_is_explained() {
    let dir = tempfile::tempdir().expect("tmp");
    variant(
        dir.path(),
        |_| {},
        |c| c.replace("\"hidden_size\": 64", "\"hidden_size\": \"sixty-four\""),
    );
    let err = load_err(dir.path());
    assert!(err.contains("mdl::config::type"), "{err}");
    assert!(err.contains("hidden_size"), "{err}");
}
