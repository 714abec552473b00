//! DeepSeek-OCR 2's text decoder from a GGUF written by llama.cpp's own
//! converter (arch `deepseek2-ocr`; tests/fixtures/gguf/make_family_ggufs.py
//! converts deepseek_ocr2/text_f32_mha from deepseek-ai's config layout)
//! against the transformers 5.24 reference of that fixture: the config built
//! from the metadata agrees with the fixture's text_config and picks the
//! script's text entry, prefill logits are within 1e-4, greedy ids are equal.

mod common;

use std::path::PathBuf;

use common::*;
use mllm_backends::weights::WeightSource;
use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights};
use mllm_runtime::model_files::{self, load_model};
use serde_json::Value;

const GGUF: &str = "deepseek2ocr_f32.gguf";
const CASE: &str = "deepseek_ocr2/text_f32_mha";

fn path() -> PathBuf {
    root().join("tests/fixtures/gguf").join(GGUF)
}

fn config() -> Value {
    let g = GgufFile::open(&path()).unwrap_or_else(|e| panic!("{GGUF}: {e}"));
    hf_config(&g).unwrap_or_else(|e| panic!("{GGUF}: {e}"))
}

fn text_config() -> Value {
    let p = fixture(CASE).join("config.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let c: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    c["text_config"].clone()
}

#[test]
fn config_agrees_with_text_config() {
    let ours = config();
    let text = text_config();
    for key in [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "max_position_embeddings",
        "tie_word_embeddings",
        "attention_bias",
        "mlp_bias",
        "hidden_act",
        "rope_parameters",
        "mlp_layer_types",
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "routed_scaling_factor",
        "topk_method",
    ] {
        let (a, b) = (&ours[key], &text[key]);
        let same = match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b && !a.is_null(),
        };
        assert!(same, "{GGUF}: `{key}` is {a}, text_config says {b}");
    }
    // Greedy routing: the fixture's config says no groups (null); ours one.
    assert_eq!(text["n_group"], Value::Null);
    assert_eq!(ours["n_group"], 1);
    assert_eq!(ours["architectures"][0], "DeepseekOcr2TextForCausalLM");
    assert_eq!(
        mllm_runtime::assets::script_for_config(&ours),
        Ok("deepseek_ocr2")
    );
}

/// llama.cpp stacked the experts and kept q/k as transformers has them
/// (its OCR graph ropes NEOX-style, so nothing was permuted): the GGUF's
/// tensors equal the fixture's.
#[test]
fn tensors_equal_the_fixtures() {
    let w = GgufWeights::open(&path()).unwrap_or_else(|e| panic!("{GGUF}: {e}"));
    let st_path = fixture(CASE).join("model.safetensors");
    let bytes = std::fs::read(&st_path).expect("fixture weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let hf = |name: &str| f32s(st.tensor(name).unwrap_or_else(|_| panic!("{name}")).data());
    let ours = |name: &str| data(&w.load(name).unwrap_or_else(|e| panic!("{name}: {e}")));
    for name in [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.2.self_attn.k_proj.weight",
        "model.layers.1.mlp.shared_experts.down_proj.weight",
        "model.layers.1.mlp.gate.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "lm_head.weight",
    ] {
        assert_eq!(ours(name), hf(name), "{name}");
    }
    // Expert 3's gate projection is row block 3 of the stack.
    let stack = ours("model.layers.2.mlp.experts.gate_proj.weight");
    let e3 = hf("model.layers.2.mlp.experts.3.gate_proj.weight");
    assert_eq!(&stack[3 * e3.len()..4 * e3.len()], &e3[..]);
}

#[test]
fn prefill_logits_match_transformers() {
    let r = reference(CASE);
    let files = model_files::open(path().to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = load_model(&files, None).unwrap_or_else(|e| panic!("{GGUF}: {}", e.render(false)));
    let got = data(&full_logits(&model, &r.input_ids));
    assert_eq!(got.len(), r.logits.len(), "logits shape");
    let err = max_abs(&got, &r.logits);
    eprintln!("{GGUF}: prefill max-abs error vs transformers ({CASE}) = {err:.3e}");
    assert!(err <= 1e-4, "{GGUF}: max-abs error {err} exceeds 1e-4");
    // The GGUF's own vocabulary comes along for `mllm run --prompt`.
    assert!(files.tokenizer().is_ok(), "{GGUF}: no tokenizer");
}

#[test]
fn greedy_generation_matches_transformers() {
    let r = reference(CASE);
    let mut m = mllm_runtime::load("deepseek_ocr2", path().to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{GGUF}: {}", e.render(false)));
    let got = greedy(&mut m, &r.input_ids, r.greedy.len());
    assert_eq!(got, r.greedy, "{GGUF}: greedy ids differ from transformers");
}
