//! A forced tool call (`tool_choice` required or named) always parses:
//! random walks through each format's grammar (`tool_calls::grammar`), a
//! token the mask allows taken at random each step as random weights would,
//! end in text that `tool_calls::parse` reads as calls of the callable tools
//! with arguments that follow their schemas. Uses the tiny Qwen3-VL
//! fixture's byte-level BPE tokenizer (320 tokens: every byte is a token).
//! And a JSON answer cannot be padded with whitespace until its token
//! limit cuts it.

use std::sync::Arc;

use mllm_runtime::generation::{ConstraintSpec, Grammars, LogitsProcessor};
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

fn fixture() -> (Arc<Tokenizer>, u32, Grammars) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("tests/fixtures/qwen3_vl/p16_m2_tied_published/tokenizer.json");
    let tok = Arc::new(Tokenizer::from_file(&path).expect("the fixture tokenizer"));
    let eos = tok.token_to_id("<|im_end|>").expect("an end of turn");
    let grammars = Grammars::new(tok.clone(), &[eos]).expect("trie");
    (tok, eos, grammars)
}

/// Between JSON tokens: a space, or one or two newlines and at most 20
/// spaces or tabs (llama.cpp's bound); no more. Integers without bounds
/// stay within +-(2^53 - 1); a schema's own bounds win.
#[test]
fn json_answers_cannot_run_away() {
    let (tok, _, grammars) = fixture();
    let vocab = tok.vocab_size();
    let accepts = |schema: &Value, prefix: &str, next: &str| {
        let spec = ConstraintSpec::JsonSchema(schema.clone());
        let mut c = grammars.constraint(&spec).expect("compiles");
        let mut ids = vec![];
        for t in tok.encode(prefix, false).expect("encode") {
            let mut logits = vec![0.0f32; vocab];
            c.process(&mut logits, &ids).expect("mask");
            assert!(logits[t as usize].is_finite(), "{prefix:?} is refused");
            c.accept(t).expect("an allowed token");
            ids.push(t);
        }
        let next = tok.encode(next, false).expect("encode");
        assert_eq!(next.len(), 1, "one byte, one token");
        let mut logits = vec![0.0f32; vocab];
        c.process(&mut logits, &ids).expect("mask");
        logits[next[0] as usize].is_finite()
    };
    let object = json!({"type": "object"});
    let allows = |prefix: &str, next: &str| accepts(&object, prefix, next);
    assert!(allows("{", " "));
    assert!(allows("{", "\n"));
    assert!(allows("{\n", "\n"));
    assert!(!allows("{\n\n", "\n"), "a third newline");
    assert!(!allows("{ ", " "), "two spaces without a newline");
    let indent = format!("{{\n{}", " ".repeat(20));
    assert!(allows(&indent, "\""));
    assert!(!allows(&indent, " "), "a 21st space of indent");
    assert!(allows("{\n  \"a\":", " "));
    assert!(!allows("{\n  \"a\": ", "\n"), "a newline after a space");

    let nested = json!({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}});
    for schema in [json!({"type": "integer"}), nested] {
        let lead = if schema["type"] == "object" {
            "{\"n\":"
        } else {
            ""
        };
        for sign in ["", "-"] {
            let max = format!("{lead}{sign}{}", (1u64 << 53) - 1);
            assert!(accepts(&schema, &max[..max.len() - 1], "1"), "{max}");
            assert!(!accepts(&schema, &max, "0"), "{max}0 is past 2^53");
            let over = format!("{lead}{sign}{}", 1u64 << 53);
            assert!(!accepts(&schema, &over[..over.len() - 1], "2"), "{over}");
        }
    }
    // A schema's own bound is kept.
    let big = json!({"type": "integer", "maximum": 1e20});
    assert!(accepts(&big, "90071992547409910", "0"));
}

#[test]
fn forced_calls_parse_whatever_the_weights() {
    let (tok, eos, grammars) = fixture();
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
