//! DeepSeek-OCR 2's text decoder (models/deepseek_ocr2.mdl: dense and sparse
//! layers, greedy and group-limited routing, routed scaling, shared experts,
//! biased attention, GQA/MQA) against transformers 5.24, text prompts only:
//! fixtures by `tests/fixtures/make_deepseek_ocr2_text_fixtures.py`, stored
//! with the names save_pretrained writes (per-expert tensors, vision weights
//! bound but not run).

mod common;

use common::golden::*;

const CASES: &[&str] = &[
    "text_f32_greedy",
    "text_f32_group",
    "text_bf16",
    "text_quant_scaled",
];

/// MHA, greedy, unbiased: the source of the deepseek2-ocr GGUF
/// (gguf_deepseek_ocr2.rs), checked here from its safetensors too.
/// (Its cached decode differs from the full forward by 1.5e-5, f32
/// summation order on logits up to 7, over the 1e-5 the others keep.)
const WITH_MHA: &[&str] = &[
    "text_f32_greedy",
    "text_f32_group",
    "text_bf16",
    "text_quant_scaled",
    "text_f32_mha",
];

#[test]
fn prefill_logits_match_transformers() {
    prefill_matches("deepseek_ocr2", WITH_MHA);
}

#[test]
fn cached_decode_equals_full_forward() {
    cached_decode_matches("deepseek_ocr2", CASES);
}

#[test]
fn greedy_generation_matches_transformers() {
    greedy_matches("deepseek_ocr2", WITH_MHA);
}

#[test]
fn conversion_keeps_logits_close() {
    conversion_keeps_cosine("deepseek_ocr2", "text_quant_scaled");
}

/// `mllm run` decodes through captured graphs: the router's group mask
/// (amax, topk, `==` against an arange) must capture too. Compiled decode
/// steps give transformers' greedy ids and the eager full forward's logits.
#[test]
fn compiled_decode_matches() {
    for name in CASES {
        let c = format!("deepseek_ocr2/{name}");
        let r = common::reference(&c);
        let mut m = load_auto(&c);
        let full = common::data(
            &m.step(&common::new_cache(), &r.input_ids, 0, false)
                .expect("full"),
        );
        m.runner.compile_default(256);
        let cache = common::new_cache();
        let mut rows = common::data(
            &m.step(&cache, &r.input_ids[..3], 0, false)
                .expect("prefill"),
        );
        for (i, &id) in r.input_ids.iter().enumerate().skip(3) {
            rows.extend(common::data(
                &m.step(&cache, &[id], i, false).expect("decode"),
            ));
        }
        let err = common::max_abs(&rows, &full);
        eprintln!("{c}: compiled decode vs eager full forward max-abs = {err:.3e}");
        assert!(err <= 1e-5, "{c}: compiled decode differs by {err}");
        let got = common::greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(
            got, r.greedy,
            "{c}: compiled greedy ids differ from transformers"
        );
    }
}

/// Original DeepSeek configs say `first_k_dense_replace` where transformers
/// writes `mlp_layer_types` (which it requires): text_f32_group's layers
/// [dense, sparse, sparse] rebuilt from `first_k_dense_replace: 1` give the
/// same logits, and `0` (every layer sparse) cannot bind the dense layer.
#[test]
fn first_k_dense_replace_stands_in_for_mlp_layer_types() {
    let case = "deepseek_ocr2/text_f32_group";
    let r = common::reference(case);
    let src = common::fixture(case);
    for (k, binds) in [(1, true), (0, false)] {
        let dir = tempfile::tempdir().expect("tmp");
        for f in ["model.safetensors", "generation_config.json"] {
            std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
        }
        let text = std::fs::read_to_string(src.join("config.json")).expect("config");
        let mut config: serde_json::Value = serde_json::from_str(&text).expect("json");
        let t = config["text_config"].as_object_mut().expect("text_config");
        assert!(t.remove("mlp_layer_types").is_some());
        t.insert("first_k_dense_replace".into(), k.into());
        std::fs::write(dir.path().join("config.json"), config.to_string()).expect("write");
        let loaded = mllm_runtime::load(
            &common::script("deepseek_ocr2"),
            dir.path().to_str().expect("utf-8"),
        );
        let mut m = match (loaded, binds) {
            (Ok(m), true) => m,
            (Err(_), false) => continue,
            (Ok(_), false) => panic!("first_k_dense_replace 0 bound a dense layer as sparse"),
            (Err(e), true) => panic!("{}", e.render(false)),
        };
        let got = common::data(
            &m.step(&common::new_cache(), &r.input_ids, 0, false)
                .expect("run"),
        );
        let err = common::max_abs(&got, &r.logits);
        assert!(err <= 1e-4, "first_k_dense_replace 1: max-abs error {err}");
    }
}
