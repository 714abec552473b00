//! What a JSON-schema mask costs per token on Qwen3's 151k vocabulary
//! (issue #28 asks: under 5% of a decode step). A measurement, not a
//! check: run it with
//!
//! ```text
//! cargo test --release -p mllm-runtime --test mask_cost -- --ignored --nocapture
//! ```
//!
//! It needs `.cache/npm/qwen3/tokenizer.json` (`bash tests/fetch_assets.sh`).
//! A walk through the schema's language: at each step the mask is computed
//! (as a constrained answer computes it), a token it allows is taken, and
//! the parser advances. Run back to back, the time per step is the whole
//! work of the mask; run with a 15 ms forward (a sleep) after each token,
//! it is what the caller still waits for while the constraint's thread
//! computes the next mask beside the forward (`generation/mask_ahead.rs`):
//! taking the token in and applying the mask to the logits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mllm_runtime::generation::{ConstraintSpec, Grammars, LogitsProcessor};
use mllm_runtime::tokenizer::Tokenizer;

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn mask_cost_per_token_on_qwen3s_vocabulary() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join(".cache/npm/qwen3/tokenizer.json");
    let tok = Arc::new(Tokenizer::from_file(&path).expect("run tests/fetch_assets.sh first"));
    let vocab = tok.vocab_size();
    let t0 = Instant::now();
    let eos = tok.token_to_id("<|im_end|>").expect("Qwen3's end of turn");
    let grammars = Grammars::new(tok.clone(), &[eos]).expect("trie");
    println!(
        "vocabulary {vocab}: trie built in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 5},
            "address": {"type": "object", "properties": {
                "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
            }, "required": ["city", "zip"]}
        },
        "required": ["name", "age", "tags", "address"]
    });
    let (steps, secs, worst) = walk(&grammars, &schema, vocab, eos, 20, Duration::ZERO);
    let mean = secs / steps as f64;
    println!(
        "{steps} steps: mean {:.1} us per token (mask + advance), worst {:.1} us; \
         Qwen3-0.6B Q8_0 decodes a token in ~15 ms at 2 threads, so the mask is {:.2}% of a step",
        mean * 1e6,
        worst * 1e6,
        mean / 0.015 * 100.0
    );
    // The same walk with a 15 ms forward (a sleep) after each token: what
    // the caller still waits for when the mask is computed beside it.
    let (steps, secs, _) = walk(&grammars, &schema, vocab, eos, 3, Duration::from_millis(15));
    println!(
        "{steps} steps beside a 15 ms forward: the caller waits {:.1} us per token ({:.2}% of a step)",
        secs / steps as f64 * 1e6,
        secs / steps as f64 / 0.015 * 100.0
    );
}

/// A random walk of `seeds` answers through `schema`'s language: (steps,
/// seconds the caller waited on the constraint, the worst step's).
fn walk(
    grammars: &Grammars,
    schema: &serde_json::Value,
    vocab: usize,
    eos: u32,
    seeds: u64,
    forward: Duration,
) -> (usize, f64, f64) {
    let mut steps = 0usize;
    let mut secs = 0.0f64;
    let mut worst = 0.0f64;
    for seed in 0..seeds {
        let t = Instant::now();
        let mut c = grammars
            .constraint(&ConstraintSpec::JsonSchema(schema.clone()))
            .expect("schema");
        let compile = t.elapsed().as_secs_f64();
        if seed == 0 {
            println!("schema compiled in {:.2} ms", compile * 1e3);
        }
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut logits = vec![0.0f32; vocab];
        for _ in 0..200 {
            logits.fill(0.0);
            let t = Instant::now();
            c.process(&mut logits, &[]).expect("mask");
            let dt = t.elapsed().as_secs_f64();
            let allowed: Vec<u32> = (0..vocab as u32)
                .filter(|&i| logits[i as usize].is_finite())
                .collect();
            if allowed.is_empty() || allowed == [eos] {
                break;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut pick = allowed[(rng % allowed.len() as u64) as usize];
            if pick == eos {
                pick = allowed[0];
            }
            let t = Instant::now();
            c.accept(pick).expect("allowed");
            let dt = dt + t.elapsed().as_secs_f64();
            // The forward of the token just taken, during which the
            // constraint's thread computes the next mask.
            std::thread::sleep(forward);
            secs += dt;
            worst = worst.max(dt);
            steps += 1;
            if c.is_complete() {
                break;
            }
        }
    }
    (steps, secs, worst)
}
