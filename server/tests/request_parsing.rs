//! The request parsers' answers to bodies a client gets wrong: each is a
//! 400 that names the field at fault (the fuzz target `server_request`
//! checks that no body panics; these check what the errors say).

use mllm_server::api::error::ApiError;
use mllm_server::api::request::{
    parse_body, parse_chat, parse_completion, DetokenizeRequest, ImageSource, Prompt,
    TemplateRequest, TokenizeRequest,
};
use mllm_server::ModelSpec;

/// The error's message and param, after checking it is a 400.
fn bad(e: ApiError) -> (String, Option<String>) {
    assert_eq!(e.status.as_u16(), 400, "{e:?}");
    assert_eq!(e.body()["error"]["code"], 400);
    (e.message, e.param)
}

fn chat_err(body: &str) -> (String, Option<String>) {
    bad(parse_chat(body.as_bytes()).expect_err(body))
}

const USER: &str = r#"[{"role":"user","content":"Hi"}]"#;

#[test]
fn wrong_type_names_the_field() {
    let (msg, param) = chat_err(&format!(r#"{{"messages":{USER},"max_tokens":"x"}}"#));
    assert!(msg.contains("max_tokens"), "{msg}");
    assert_eq!(param.as_deref(), Some("max_tokens"));

    let (msg, _) = bad(parse_completion(br#"{"prompt":"a","temperature":"hot"}"#).unwrap_err());
    assert!(msg.contains("temperature"), "{msg}");

    let (msg, _) = bad(parse_body::<DetokenizeRequest>(br#"{"tokens":[1,"two"]}"#).unwrap_err());
    assert!(msg.contains("tokens"), "{msg}");
}

#[test]
fn not_json_is_a_400() {
    let (msg, param) = chat_err("{\"messages\": [");
    assert!(msg.contains("not valid JSON"), "{msg}");
    assert_eq!(param, None);
    bad(parse_body::<TokenizeRequest>(b"").unwrap_err());
}

#[test]
fn missing_and_empty_messages() {
    let (msg, _) = chat_err(r#"{"model":"m"}"#);
    assert!(msg.contains("messages"), "{msg}");
    let (msg, param) = chat_err(r#"{"messages":[]}"#);
    assert!(msg.contains("empty"), "{msg}");
    assert_eq!(param.as_deref(), Some("messages"));
}

#[test]
fn several_choices_are_refused() {
    let r = parse_chat(format!(r#"{{"messages":{USER},"n":2}}"#).as_bytes()).unwrap();
    let (msg, param) = bad(r.params().unwrap_err());
    assert!(msg.contains("`n` = 2"), "{msg}");
    assert_eq!(param.as_deref(), Some("n"));
    let r = parse_chat(format!(r#"{{"messages":{USER},"n":1}}"#).as_bytes()).unwrap();
    assert!(r.params().is_ok());
}

#[test]
fn top_logprobs_needs_logprobs() {
    let r = parse_chat(format!(r#"{{"messages":{USER},"top_logprobs":3}}"#).as_bytes()).unwrap();
    let (msg, param) = bad(r.params().unwrap_err());
    assert!(msg.contains("logprobs: true"), "{msg}");
    assert_eq!(param.as_deref(), Some("top_logprobs"));

    let body = format!(r#"{{"messages":{USER},"logprobs":true,"top_logprobs":3}}"#);
    let p = parse_chat(body.as_bytes()).unwrap().params().unwrap();
    assert_eq!(p.logprobs, Some(3));

    let body = format!(r#"{{"messages":{USER},"logprobs":true,"top_logprobs":21}}"#);
    let r = parse_chat(body.as_bytes()).unwrap();
    assert!(bad(r.params().unwrap_err()).0.contains("at most 20"));
}

fn image(url: &str) -> Result<Vec<ImageSource>, ApiError> {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]}]
    });
    let r = parse_chat(body.to_string().as_bytes()).unwrap();
    r.messages().map(|mut m| m.remove(0).images)
}

#[test]
fn data_uris_must_be_base64() {
    let (msg, param) = bad(image("data:image/png,rawbytes").unwrap_err());
    assert!(msg.contains("base64"), "{msg}");
    assert_eq!(param.as_deref(), Some("messages[0].content"));
    let (msg, _) = bad(image("data:image/png;base64").unwrap_err());
    assert!(msg.contains("`,`"), "{msg}");
    let (msg, _) = bad(image("data:image/png;base64,!!!").unwrap_err());
    assert!(msg.contains("not valid base64"), "{msg}");

    match image("data:image/png;base64,aGVsbG8=").unwrap().as_slice() {
        [ImageSource::Bytes(b)] => assert_eq!(b, b"hello"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn network_image_urls_are_refused() {
    for url in ["http://example.com/a.png", "https://example.com/a.png"] {
        let (msg, _) = bad(image(url).unwrap_err());
        assert!(msg.contains("data URI"), "{msg}");
    }
    // A file URL stays a URL here: the server's LocalMedia policy decides
    // (and percent-decodes) when the image is read.
    match image("file:///tmp/a.png").unwrap().as_slice() {
        [ImageSource::File(p)] => assert_eq!(p, "file:///tmp/a.png"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_roles_are_refused() {
    let r = parse_chat(br#"{"messages":[{"role":"wizard","content":"x"}]}"#).unwrap();
    let (msg, param) = bad(r.messages().unwrap_err());
    assert!(msg.contains("wizard"), "{msg}");
    assert_eq!(param.as_deref(), Some("messages[0].role"));
}

#[test]
fn enable_thinking_must_be_a_bool() {
    let body =
        format!(r#"{{"messages":{USER},"chat_template_kwargs":{{"enable_thinking":false}}}}"#);
    assert_eq!(
        parse_chat(body.as_bytes())
            .unwrap()
            .enable_thinking()
            .unwrap(),
        Some(false)
    );
    let body =
        format!(r#"{{"messages":{USER},"chat_template_kwargs":{{"enable_thinking":"no"}}}}"#);
    let r = parse_chat(body.as_bytes()).unwrap();
    assert!(bad(r.enable_thinking().unwrap_err())
        .0
        .contains("enable_thinking"));
}

#[test]
fn stop_is_a_string_or_a_list() {
    let body = format!(r#"{{"messages":{USER},"stop":"\n"}}"#);
    assert_eq!(
        parse_chat(body.as_bytes()).unwrap().params().unwrap().stops,
        ["\n"]
    );
    let p = parse_completion(br#"{"prompt":"a","stop":["x","y"]}"#)
        .unwrap()
        .params()
        .unwrap();
    assert_eq!(p.stops, ["x", "y"]);
    let stops: Vec<String> = (0..17).map(|i| i.to_string()).collect();
    let body = serde_json::json!({"prompt": "a", "stop": stops}).to_string();
    let r = parse_completion(body.as_bytes()).unwrap();
    assert_eq!(bad(r.params().unwrap_err()).1.as_deref(), Some("stop"));
    bad(parse_completion(br#"{"prompt":"a","stop":[1]}"#).unwrap_err());
}

#[test]
fn completion_prompts() {
    let p = |body: &[u8]| parse_completion(body).unwrap().prompt();
    assert!(matches!(p(br#"{"prompt":"hi"}"#), Ok(Prompt::Text(t)) if t == "hi"));
    assert!(matches!(p(br#"{"prompt":["hi"]}"#), Ok(Prompt::Text(t)) if t == "hi"));
    assert!(matches!(p(br#"{"prompt":[1,2]}"#), Ok(Prompt::Ids(ids)) if ids == [1, 2]));
    let (msg, _) = bad(p(br#"{"prompt":["a","b"]}"#).unwrap_err());
    assert!(msg.contains("2 prompts"), "{msg}");
    let r = parse_completion(br#"{"prompt":"a","echo":true}"#).unwrap();
    assert_eq!(bad(r.params().unwrap_err()).1.as_deref(), Some("echo"));
    let r = parse_completion(br#"{"prompt":"a","max_tokens":0}"#).unwrap();
    assert_eq!(
        bad(r.params().unwrap_err()).1.as_deref(),
        Some("max_tokens")
    );
}

#[test]
fn template_requests_check_messages_as_chat_does() {
    let r: TemplateRequest =
        parse_body(br#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x"}]}]}"#)
            .unwrap();
    bad(r.as_chat().messages().unwrap_err());
}

#[test]
fn model_specs() {
    let s = ModelSpec::parse("qwen=/models/q.gguf");
    assert_eq!(
        (s.name.as_str(), s.path.as_str()),
        ("qwen", "/models/q.gguf")
    );
    // A `=` inside a path is not a name.
    let s = ModelSpec::parse("/models/a=b/");
    assert_eq!((s.name.as_str(), s.path.as_str()), ("a=b", "/models/a=b/"));
    assert_eq!(ModelSpec::parse("/").name, "/");
    assert_eq!(ModelSpec::parse("").name, "");
}
