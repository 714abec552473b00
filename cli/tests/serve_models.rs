//! `mllm serve` on the tiny Qwen3-VL fixture (tokenizer, chat template and
//! vision tower of a random 2-layer model): images in requests, a small
//! load test, and several models in one server.

mod common;

use common::http::{get, post, Server};
use common::{mllm, text};
use serde_json::{json, Value};

/// A vision-language model: an image as a data URI or a local path gives
/// `mllm run --image`'s answer; the same image again (keyed by its pixels)
/// and the conversation's next turn with it compute only their new text; a
/// broken image is a 400.
#[test]
fn serve_takes_images_as_data_uris_and_paths() {
    use base64::Engine as _;
    let f = common::root().join("tests/fixtures/qwen3_vl");
    let model = f.join("p16_m2_tied_published");
    let model = model.to_str().expect("utf-8");
    let img = f.join("run_images/a_160x120.png");
    let img = img.to_str().expect("utf-8");
    let out = mllm(&[
        "run",
        "--model",
        model,
        "--image",
        img,
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = text(&out.stdout);
    let want = want.strip_suffix('\n').unwrap_or(&want).to_string();

    let images_dir = f.join("run_images");
    let srv = Server::start(&[
        "--model",
        model,
        "--parallel",
        "2",
        "-t",
        "2",
        "--allowed-local-media-path",
        images_dir.to_str().expect("utf-8"),
    ]);
    let addr = srv.addr.as_str();
    let png = std::fs::read(img).expect("png");
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let ask = |url: &str, extra: Vec<Value>| {
        let mut messages = vec![json!({ "role": "user", "content": [
            { "type": "image_url", "image_url": { "url": url } },
            { "type": "text", "text": "Describe this image." },
        ] })];
        messages.extend(extra);
        post(
            addr,
            "/v1/chat/completions",
            &json!({ "messages": messages, "temperature": 0, "max_tokens": 6 }).to_string(),
        )
    };
    for (k, url) in [uri.as_str(), img].into_iter().enumerate() {
        let r = ask(url, vec![]);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(
            v["choices"][0]["message"]["content"],
            want.as_str(),
            "image from {}",
            &url[..url.len().min(30)]
        );
        // The same pixels again (from a path this time): the prompt, image
        // included, comes from the cache but for its last token.
        let u = &v["usage"];
        let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64();
        let total = u["prompt_tokens"].as_u64().unwrap_or(0);
        if k == 1 {
            assert_eq!(cached, Some(total - 1), "the same image again: of {total}");
        }
    }
    // The next turn of that conversation: the image and the first turn
    // come from the slot's cache.
    let r = ask(
        &uri,
        vec![
            json!({ "role": "assistant", "content": want }),
            json!({ "role": "user", "content": "And the colors?" }),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let u = &r.json()["usage"];
    let (cached, total) = (
        u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        u["prompt_tokens"].as_u64().unwrap_or(0),
    );
    assert!(
        cached > 0 && cached < total,
        "next turn with the image: {cached} of {total} cached"
    );
    // The tiny model under load: 16 requests over 2 slots, with and without
    // the image, each equal to its answer alone.
    let out = mllm(&[
        "run",
        "--model",
        model,
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want_text = text(&out.stdout);
    let want_text = want_text
        .strip_suffix('\n')
        .unwrap_or(&want_text)
        .to_string();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|i| {
                let (uri, ask) = (&uri, &ask);
                s.spawn(move || {
                    let r =
                        if i % 2 == 0 {
                            ask(uri, vec![])
                        } else {
                            post(addr, "/v1/chat/completions", &json!({
                            "messages": [{ "role": "user", "content": "Describe this image." }],
                            "temperature": 0, "max_tokens": 6,
                        }).to_string())
                        };
                    assert_eq!(r.status, 200, "{}", r.body);
                    (
                        i,
                        r.json()["choices"][0]["message"]["content"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                    )
                })
            })
            .collect();
        for h in hs {
            let (i, got) = h.join().expect("client");
            let want = if i % 2 == 0 { &want } else { &want_text };
            assert_eq!(&got, want, "request {i} under load");
        }
    });
    let bad = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(b"not a png")
    );
    let r = ask(&bad, vec![]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("image"),
        "{}",
        r.body
    );
}

/// Several models in one server: each under its name, routed by `model`,
/// each with its own slots and metrics.
#[test]
fn serve_routes_requests_between_several_models() {
    let f = common::root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let model = f.to_str().expect("utf-8");
    let srv = Server::start(&[
        "--model",
        &format!("first={model}"),
        "--model",
        model,
        "-p",
        "1",
    ]);
    let addr = srv.addr.as_str();
    let ids: Vec<String> = get(addr, "/v1/models").json()["data"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(ids, ["first", "p16_m2_tied_published"]);
    let ask = |model: Option<&str>| {
        let mut b = json!({ "messages": [{ "role": "user", "content": "Hi" }], "temperature": 0, "max_tokens": 3 });
        if let Some(m) = model {
            b["model"] = json!(m);
        }
        post(addr, "/v1/chat/completions", &b.to_string())
    };
    let a = ask(Some("first"));
    let b = ask(Some("p16_m2_tied_published"));
    assert_eq!((a.status, b.status), (200, 200), "{} {}", a.body, b.body);
    assert_eq!(a.json()["model"], "first");
    assert_eq!(b.json()["model"], "p16_m2_tied_published");
    // The same weights answer the same.
    assert_eq!(
        a.json()["choices"][0]["message"],
        b.json()["choices"][0]["message"]
    );
    let r = ask(None);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("first, p16_m2_tied_published"),
        "{}",
        r.body
    );
    let r = ask(Some("third"));
    assert_eq!(r.status, 404, "{}", r.body);
    let m = get(addr, "/metrics").body;
    for name in ["first", "p16_m2_tied_published"] {
        assert!(
            m.contains(&format!("mllm_requests_total{{model=\"{name}\"}} 1")),
            "{m}"
        );
    }
    // Two models may not share a name.
    let out = mllm(&["serve", "--model", model, "--model", model, "--port", "0"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("NAME=PATH"),
        "{}",
        text(&out.stderr)
    );
}
