//! A forced tool call (`tool_choice` required or named) always parses:
//! random walks through each format's grammar (`tool_calls::grammar`), a
//! token the mask allows taken at random each step as random weights would,
//! end in text that `tool_calls::parse` reads as calls of the callable tools
//! with arguments that follow their schemas. Uses the tiny Qwen3-VL
//! fixture's byte-level BPE tokenizer (320 tokens: every byte is a token).

use std::sync::Arc;

use mllm_runtime::generation::{Grammars, LogitsProcessor};
use mllm_runtime::tokenizer::Tokenizer;
use mllm_runtime::tool_calls::{grammar, parse, Tool, ToolChoice, ToolFormat, ToolRequest};
use serde_json::{json, Value};

fn tools(choice: ToolChoice, parallel: bool) -> ToolRequest {
    let tool = |name: &str, params: Value| Tool {
        name: name.into(),
        parameters: params.clone(),
        spec: json!({"type": "function", "function": {"name": name, "parameters": params}}),
    };
    ToolRequest {
        tools: vec![
            tool(
                "get_weather",
                json!({"type": "object", "properties": {
                    "city": {"type": "string", "maxLength": 6},
                    "unit": {"enum": ["c", "f"]}
                }, "required": ["city"], "additionalProperties": false}),
            ),
            tool("get_time", json!({})),
        ],
        choice,
        parallel,
    }
}

#[test]
fn forced_calls_parse_whatever_the_weights() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("tests/fixtures/qwen3_vl/p16_m2_tied_published/tokenizer.json");
    let tok = Arc::new(Tokenizer::from_file(&path).expect("the fixture tokenizer"));
    let eos = tok.token_to_id("<|im_end|>").expect("an end of turn");
    let grammars = Grammars::new(tok.clone(), &[eos]).expect("trie");
    let vocab = tok.vocab_size();
    let mut counts = vec![];
    for format in [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Generic] {
        for (choice, parallel) in [
            (ToolChoice::Required, true),
            (ToolChoice::Required, false),
            (ToolChoice::Named("get_weather".into()), false),
        ] {
            let req = tools(choice.clone(), parallel);
            let spec = grammar::forced(format, &req).expect("grammar");
            let mut parsed = 0;
            for seed in 0..25u64 {
                let mut c = grammars.constraint(&spec).expect("compiles");
                let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut ids = vec![];
                for _ in 0..4000 {
                    if c.is_complete() {
                        break;
                    }
                    let mut logits = vec![0.0f32; vocab];
                    c.process(&mut logits, &ids).expect("mask");
                    let allowed: Vec<u32> = (0..vocab as u32)
                        .filter(|&i| logits[i as usize].is_finite())
                        .collect();
                    assert!(!allowed.is_empty(), "{format:?}: a dead end");
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let t = allowed[(rng % allowed.len() as u64) as usize];
                    if t == eos {
                        break;
                    }
                    c.accept(t).expect("an allowed token");
                    ids.push(t);
                }
                let text = tok.decode(&ids, false).expect("decode");
                let p = parse(format, &text, &req)
                    .unwrap_or_else(|| panic!("{format:?} {choice:?}: no call in {text:?}"));
                assert!(parallel || p.calls.len() == 1, "{text}");
                assert!(p.calls.len() <= grammar::MAX_PARALLEL_CALLS, "{text}");
                for call in &p.calls {
                    let args: Value = serde_json::from_str(&call.arguments).expect("object");
                    if let ToolChoice::Named(n) = &choice {
                        assert_eq!(&call.name, n);
                    }
                    if call.name == "get_weather" {
                        let city = args["city"].as_str().expect("city is required");
                        assert!(city.chars().count() <= 6, "{text}");
                        assert!(args.get("unit").is_none_or(|u| u == "c" || u == "f"));
                    }
                }
                parsed += 1;
            }
            counts.push(format!(
                "{format:?} {choice:?} parallel={parallel}: {parsed}/25"
            ));
        }
    }
    println!("{}", counts.join("\n"));
}
