//! Chat-template parity with transformers' apply_chat_template(...,
//! tokenize=False): every case in tests/fixtures/tokenizer/chat_templates.json
//! (Qwen3's template from its tokenizer_config.json, SmolLM2's from its GGUF,
//! and small templates that pin down Jinja behaviour) must render
//! byte-identically, or fail with the same message.
//!
//! The templates come from the assets tests/fetch_assets.sh puts in .cache/;
//! without them these tests fail, never skip.

use std::path::PathBuf;

use mllm_converter::chat_template::{ChatMessage, ChatTemplate};
use mllm_converter::gguf::GgufFile;
use mllm_converter::tokenizer::{GgufVocab, Tokenizer};
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn asset(rel: &str) -> PathBuf {
    let p = root().join(".cache").join(rel);
    assert!(
        p.is_file(),
        "missing test asset {}: run tests/fetch_assets.sh (from the repository root) to fetch it",
        p.display()
    );
    p
}

fn fixture() -> Value {
    let p = root().join("tests/fixtures/tokenizer/chat_templates.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// SmolLM2's template and tokenizer, both from its GGUF.
fn smollm2() -> (String, Tokenizer) {
    let g = GgufFile::open(&asset("gguf/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let source = g
        .meta("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .expect("template")
        .to_string();
    let tok = Tokenizer::from_gguf_vocab(&GgufVocab::from_gguf(&g).unwrap()).unwrap();
    (source, tok)
}

#[test]
fn renders_match_transformers() {
    let fx = fixture();
    let qwen3 =
        ChatTemplate::from_tokenizer_config(&asset("npm/qwen3/tokenizer_config.json")).unwrap();
    let (smol_source, smol_tok) = smollm2();
    let smol = ChatTemplate::new(&smol_source, "SmolLM2 GGUF")
        .unwrap()
        .with_tokenizer(&smol_tok);
    let mut custom = std::collections::BTreeMap::new();
    for (name, source) in fx["custom_templates"].as_object().unwrap() {
        let t = ChatTemplate::new(source.as_str().unwrap(), name)
            .unwrap()
            .with_tokenizer(&smol_tok);
        custom.insert(format!("custom:{name}"), t);
    }

    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 50, "fixture has {} cases", cases.len());
    let mut bad = Vec::new();
    for case in cases {
        let id = case["template"].as_str().unwrap();
        let template = match id {
            "qwen3" => &qwen3,
            "smollm2" => &smol,
            other => custom
                .get(other)
                .unwrap_or_else(|| panic!("unknown template {other}")),
        };
        let messages: Vec<ChatMessage> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let extra: Vec<(&str, Value)> = case["kwargs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let gen = case["add_generation_prompt"].as_bool().unwrap();
        let label = format!(
            "{id} / {} / gen={gen} / {}",
            case["conversation"], case["kwargs"]
        );
        let got = template.render(&messages, gen, &extra);
        match (&got, case.get("rendered"), case.get("error")) {
            (Ok(got), Some(want), _) if got == want.as_str().unwrap() => {}
            (Err(e), None, Some(want)) if e.to_string().contains(want.as_str().unwrap()) => {}
            _ => bad.push(format!(
                "{label}\n   got  {got:?}\n   want {:?}",
                case.get("rendered").or(case.get("error")).unwrap()
            )),
        }
        // The JSON entry point renders the same for plain messages.
        if let (Ok(got), Some(msgs)) = (&got, case.get("messages")) {
            let again = template.render_json(msgs, gen, &extra).unwrap();
            assert_eq!(&again, got, "{label}: render_json differs from render");
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} renders differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}

#[test]
fn config_special_tokens_are_what_transformers_passes() {
    // transformers passes the special tokens that are set; for Qwen3 that is
    // eos and pad, so `bos_token` is undefined in the template.
    let probe = |t: &ChatTemplate| t.render(&[], false, &[]).unwrap();
    let source =
        "{{ bos_token is defined }} {{ eos_token }} {{ pad_token }} {{ unk_token is defined }}";
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tokenizer_config.json");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(asset("npm/qwen3/tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    config["chat_template"] = json!(source);
    std::fs::write(&config_path, config.to_string()).unwrap();
    let t = ChatTemplate::from_tokenizer_config(&config_path).unwrap();
    assert_eq!(probe(&t), "False <|im_end|> <|endoftext|> False");
}

#[test]
fn template_lists_pick_default_and_extras_apply() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer_config.json");
    let config = json!({
        "bos_token": {"content": "<s>", "special": true},
        "chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ flag }}"}
        ]
    });
    std::fs::write(&path, config.to_string()).unwrap();
    let t = ChatTemplate::from_tokenizer_config(&path).unwrap();
    let out = t
        .render(
            &[ChatMessage::new("user", "hi")],
            false,
            &[("flag", json!(true))],
        )
        .unwrap();
    assert_eq!(out, "<s>user:hi|True");

    std::fs::write(
        &path,
        json!({"chat_template": [{"name": "rag", "template": "x"}]}).to_string(),
    )
    .unwrap();
    let e = ChatTemplate::from_tokenizer_config(&path)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("default") && e.contains("rag"), "{e}");
    std::fs::write(&path, json!({"eos_token": "</s>"}).to_string()).unwrap();
    let e = ChatTemplate::from_tokenizer_config(&path)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no chat_template"), "{e}");
}

#[test]
fn errors_are_clear_and_never_panic() {
    let e = ChatTemplate::new("{% if %}", "broken.json")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("broken.json") && e.contains("does not compile"),
        "{e}"
    );
    let t = ChatTemplate::new("{{ messages[0].content | tojson(indent=[]) }}", "t").unwrap();
    let e = t
        .render(&[ChatMessage::new("user", "x")], false, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("failed to render") && e.contains("indent"),
        "{e}"
    );
    let t = ChatTemplate::new("{{ undefined_thing.attr }}", "t").unwrap();
    assert!(t.render(&[], false, &[]).is_err());
    let t = ChatTemplate::new("{{ messages }}", "t").unwrap();
    let e = t
        .render_json(&json!({"role": "user"}), false, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("array"), "{e}");
}

#[test]
fn render_json_aliases_reasoning_and_drops_nulls() {
    let t = ChatTemplate::new(
        "{% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}/{{ m.tool_calls is defined }}{% endfor %}",
        "t",
    )
    .unwrap();
    let msgs =
        json!([{"role": "assistant", "content": "a", "reasoning": "why", "tool_calls": null}]);
    assert_eq!(t.render_json(&msgs, false, &[]).unwrap(), "why/why/False");
}

/// A directory's template: chat_template.jinja, then tokenizer_config.json's,
/// then a processor's chat_template.json (Qwen-VL repositories ship one).
#[test]
fn templates_are_found_in_transformers_order() {
    use mllm_converter::chat_template::find_in_dir;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(find_in_dir(d, None).unwrap().is_none());
    std::fs::write(
        d.join("chat_template.json"),
        r#"{"chat_template": "from json"}"#,
    )
    .unwrap();
    assert_eq!(find_in_dir(d, None).unwrap().unwrap().0, "from json");
    let tc = serde_json::json!({"chat_template": "from tokenizer_config"});
    assert_eq!(
        find_in_dir(d, Some(&tc)).unwrap().unwrap().0,
        "from tokenizer_config"
    );
    std::fs::write(d.join("chat_template.jinja"), "from jinja").unwrap();
    let (s, file) = find_in_dir(d, Some(&tc)).unwrap().unwrap();
    assert_eq!(
        (s.as_str(), file),
        ("from jinja", d.join("chat_template.jinja"))
    );
    std::fs::remove_file(d.join("chat_template.jinja")).unwrap();
    std::fs::write(d.join("chat_template.json"), "{not json").unwrap();
    assert!(
        find_in_dir(d, None).is_err(),
        "a corrupt chat_template.json is an error"
    );
}
