use proptest::prelude::*;
use serde_json::json;

use super::render::conversation;
use super::*;

fn weather_and_time(choice: ToolChoice, parallel: bool) -> ToolRequest {
    let tool = |name: &str, params: Json| Tool {
        name: name.into(),
        parameters: params.clone(),
        spec: json!({"type": "function", "function": {"name": name, "description": "d", "parameters": params}}),
    };
    ToolRequest {
        tools: vec![
            tool(
                "get_weather",
                json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            ),
            tool("get_time", json!({})),
        ],
        choice,
        parallel,
    }
}

#[test]
fn formats_are_read_off_templates() {
    assert_eq!(ToolFormat::detect("{{ messages }}"), ToolFormat::Generic);
    assert_eq!(
        ToolFormat::detect("{% if tools %}<tool_call>{% endif %}"),
        ToolFormat::Hermes
    );
    assert_eq!(
        ToolFormat::detect("{% if tools %}{% elif message.role == 'ipython' %}{% endif %}"),
        ToolFormat::Llama3
    );
    assert_eq!(
        ToolFormat::detect("{% if tools %}{% endif %}"),
        ToolFormat::Generic
    );
}

#[test]
fn hermes_answers_parse_into_calls_and_text() {
    let t = weather_and_time(ToolChoice::Auto, true);
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let p = parse(ToolFormat::Hermes, text, &t).expect("calls");
    assert_eq!(p.content, "Let me check.");
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[0].name, "get_weather");
    assert_eq!(p.calls[0].arguments, r#"{"city":"Paris"}"#);
    assert_eq!(p.calls[1].arguments, "{}");
    assert_ne!(p.calls[0].id, p.calls[1].id);
    // An unknown tool, broken JSON or no call at all is text.
    for text in [
        "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}\n</tool_call>",
        "no call here",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": [1]}\n</tool_call>",
    ] {
        assert_eq!(parse(ToolFormat::Hermes, text, &t), None, "{text}");
    }
    // A named choice accepts that function only.
    let named = weather_and_time(ToolChoice::Named("get_time".into()), true);
    let w = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}</tool_call>";
    assert_eq!(parse(ToolFormat::Hermes, w, &named), None);
}

#[test]
fn json_answers_parse_for_llama3_and_generic() {
    let t = weather_and_time(ToolChoice::Auto, true);
    let l = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    let p = parse(ToolFormat::Llama3, l, &t).expect("call");
    assert_eq!(
        (p.calls[0].name.as_str(), p.content.as_str()),
        ("get_weather", "")
    );
    assert_eq!(p.calls[0].arguments, r#"{"city":"Oslo"}"#);
    let g = r#" {"tool_calls": [{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}]}"#;
    let p = parse(ToolFormat::Generic, g, &t).expect("calls");
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[1].arguments, r#"{"city": "Rome"}"#);
    // JSON that is not a call is an answer.
    assert_eq!(parse(ToolFormat::Generic, r#"{"city": "Rome"}"#, &t), None);
    assert_eq!(
        parse(ToolFormat::Generic, r#"{"tool_calls": []}"#, &t),
        None
    );
}

fn chunks(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| c % (text.len() + 1))
        .filter(|&c| text.is_char_boundary(c))
        .collect();
    at.sort();
    at.dedup();
    let mut out = vec![];
    let mut prev = 0;
    for c in at {
        out.push(text[prev..c].to_string());
        prev = c;
    }
    out.push(text[prev..].to_string());
    out
}

proptest! {
    /// However an answer is cut into streamed pieces, the text given out
    /// and the calls are those of the whole answer.
    #[test]
    fn streaming_splits_as_the_whole_answer(
        pick in 0usize..6,
        cuts in proptest::collection::vec(0usize..400, 0..12),
    ) {
        let cases = [
            (ToolFormat::Hermes, "Sure <tool_ <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> done"),
            (ToolFormat::Hermes, "plain text with < and <tool and no call"),
            (ToolFormat::Llama3, "  <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"é\"}}"),
            (ToolFormat::Llama3, "<|python is not a tag"),
            (ToolFormat::Generic, "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}"),
            (ToolFormat::Generic, "{\"answer\": 1} is JSON but not a call"),
        ];
        let (format, text) = cases[pick];
        let t = weather_and_time(ToolChoice::Auto, true);
        let mut s = ToolStream::new(format, t.clone());
        let mut shown = String::new();
        for piece in chunks(text, &cuts) {
            shown.push_str(&s.push(&piece));
        }
        let end = s.finish();
        match parse(format, text, &t) {
            Some(whole) => {
                let names: Vec<_> = whole.calls.iter().map(|c| (&c.name, &c.arguments)).collect();
                let got: Vec<_> = end.calls.iter().map(|c| (&c.name, &c.arguments)).collect();
                prop_assert_eq!(got, names);
                // The same text around the calls (whitespace aside).
                let squeeze = |s: &str| s.split_whitespace().collect::<String>();
                prop_assert_eq!(squeeze(&format!("{shown}{}", end.content)), squeeze(&whole.content));
            }
            None => {
                prop_assert!(end.calls.is_empty());
                prop_assert_eq!(format!("{shown}{}", end.content), text);
            }
        }
    }
}

#[test]
fn templates_with_tools_get_objects_and_the_tools_variable() {
    let t = weather_and_time(ToolChoice::Auto, true);
    let history = vec![
        json!({"role": "user", "content": "weather?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}),
    ];
    let (msgs, var) = conversation(ToolFormat::Hermes, &history, Some(&t));
    assert_eq!(
        msgs[1]["tool_calls"][0]["function"]["arguments"],
        json!({"city": "Paris"})
    );
    assert_eq!(msgs[2], history[2]);
    assert_eq!(var.expect("tools")[1]["function"]["name"], "get_time");
    // `none` offers nothing but keeps the history.
    let none = weather_and_time(ToolChoice::None, true);
    let (msgs, var) = conversation(ToolFormat::Hermes, &history, Some(&none));
    assert!(var.is_none());
    assert_eq!(msgs.len(), 3);

    let (msgs, var) = conversation(ToolFormat::Generic, &history, Some(&t));
    assert!(var.is_none());
    assert_eq!(msgs[0]["role"], "system");
    assert!(msgs[0]["content"]
        .as_str()
        .unwrap()
        .contains("\"get_weather\""));
    assert_eq!(msgs[2]["role"], "assistant");
    let call: Json = serde_json::from_str(msgs[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        call,
        json!({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})
    );
    assert_eq!(msgs[3]["role"], "user");
    assert!(msgs[3]["content"].as_str().unwrap().contains("sunny"));
}

#[test]
fn forced_grammars_name_the_callable_tools() {
    let named = weather_and_time(ToolChoice::Named("get_weather".into()), false);
    let crate::generation::ConstraintSpec::Lark(g) =
        grammar::forced(ToolFormat::Hermes, &named).unwrap()
    else {
        panic!("not Lark")
    };
    assert!(g.contains("get_weather") && !g.contains("get_time"), "{g}");
    assert!(!g.contains("call){"), "one call only: {g}");
    let missing = weather_and_time(ToolChoice::Named("nope".into()), false);
    let e = grammar::forced(ToolFormat::Generic, &missing).unwrap_err();
    assert!(e.contains("`nope`"), "{e}");
}
