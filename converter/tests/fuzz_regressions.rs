//! Inputs that coverage-guided fuzzing (tests/fuzz, `bash tests/fuzz.sh`)
//! found to panic a reader, reduced to their essence: each must now be
//! refused (or handled) with an error, so `cargo test` keeps them fixed
//! without the fuzzer. The fuzz target that found each is named.

use mllm_converter::chat_template::{ChatMessage, ChatTemplate};
use mllm_converter::tokenizer::Tokenizer;

/// A tokenizer.json around `decoder` and `normalizer` values given as JSON
/// text.
fn tokenizer_doc(normalizer: &str, decoder: &str) -> String {
    format!(
        r#"{{"version":"1.0","added_tokens":[],"normalizer":{normalizer},"pre_tokenizer":null,"post_processor":null,"decoder":{decoder},"model":{{"type":"BPE","vocab":{{"a":0,"b":1}},"merges":[]}}}}"#
    )
}

fn load_error(json: &str) -> String {
    match Tokenizer::from_json_str(json, "fuzz.json") {
        Ok(_) => panic!("a broken tokenizer.json loaded: {json}"),
        Err(e) => e.to_string(),
    }
}

/// `tokenizer_json`: a syntax error inside `decoder` reached an `expect` in
/// the tokenizers crate's decoder deserializer.
#[test]
fn tokenizer_json_syntax_error_in_decoder_is_an_error() {
    let json = tokenizer_doc("null", r#"{"type":"ByteLevel",]"#);
    let e = load_error(&json);
    assert!(
        e.contains("fuzz.json") && e.contains("not valid JSON"),
        "{e}"
    );
    // Truncation anywhere is the same kind of damage.
    let whole = tokenizer_doc("null", r#"{"type":"ByteLevel"}"#);
    for cut in [whole.len() / 3, whole.len() - 2] {
        let e = load_error(&whole[..cut]);
        assert!(e.contains("not valid JSON"), "{e}");
    }
}

/// `tokenizer_json`: a `Precompiled` normalizer whose charsmap does not
/// parse reached an `expect` in the normalizer deserializer.
#[test]
fn tokenizer_json_bad_precompiled_normalizer_is_an_error() {
    for normalizer in [
        r#"{"type":"Precompiled","precompiled_charsmap":"AAAA"}"#,
        r#"{"type":"Precompiled","precompiled_charsmap":"not base64!"}"#,
        r#"{"type":"Precompiled"}"#,
        r#"{"type":"Sequence","normalizers":[{"type":"Precompiled","precompiled_charsmap":7}]}"#,
    ] {
        let e = load_error(&tokenizer_doc(normalizer, "null"));
        assert!(e.contains("Precompiled"), "{normalizer}: {e}");
    }
    // The well-formed document around them loads.
    let ok = tokenizer_doc("null", r#"{"type":"Fuse"}"#);
    let tok = Tokenizer::from_json_str(&ok, "fuzz.json").expect("valid tokenizer.json");
    assert_eq!(tok.token_to_id("b"), Some(1));
}

/// `tokenizer_json`: the tokenizers crate reads a `TemplateProcessing`
/// post-processor without the checks its builder makes, and `encode` then
/// panicked in `apply_template`: `no entry found for key` for a special
/// token its `special_tokens` lacks, an index out of bounds for `$B` in
/// `single`, `todo!()` for a template handed three encodings by the
/// template before it. Such a file is refused when it loads.
#[test]
fn tokenizer_json_broken_template_post_processor_is_an_error() {
    let with_post_processor = |pp: &str| {
        tokenizer_doc("null", "null").replace(
            r#""post_processor":null"#,
            &format!(r#""post_processor":{pp}"#),
        )
    };
    let template = |single: &str, special_tokens: &str| {
        format!(
            r#"{{"type":"TemplateProcessing","single":[{single}],"pair":[{{"Sequence":{{"id":"A","type_id":0}}}},{{"Sequence":{{"id":"B","type_id":1}}}}],"special_tokens":{special_tokens}}}"#
        )
    };
    let sequence =
        |pps: &[&str]| format!(r#"{{"type":"Sequence","processors":[{}]}}"#, pps.join(","));
    let (bos, a, b) = (
        r#"{"SpecialToken":{"id":"<s>","type_id":0}}"#,
        r#"{"Sequence":{"id":"A","type_id":0}}"#,
        r#"{"Sequence":{"id":"B","type_id":0}}"#,
    );
    let bos_token = r#"{"<s>":{"id":"<s>","ids":[0],"tokens":["a"]}}"#;
    let good = template(&format!("{bos},{a}"), bos_token);
    let broken = [
        // What the fuzzer found: `<s>` is used, only `<t>` is defined.
        template(
            &format!("{bos},{a}"),
            r#"{"<t>":{"id":"<t>","ids":[0],"tokens":["a"]}}"#,
        ),
        template(b, "{}"),
        sequence(&[&template(&format!("{bos},{a},{bos}"), bos_token), &good]),
    ];
    for pp in &broken {
        let e = load_error(&with_post_processor(pp));
        assert!(
            e.contains("fuzz.json") && e.contains("post_processor"),
            "{pp}: {e}"
        );
    }
    // Well-formed templates load and add their BOS, alone or in a Sequence
    // (a template after one that hands on two encodings takes them as a pair).
    for pp in [good.clone(), sequence(&[&good]), sequence(&[&good, &good])] {
        let tok = Tokenizer::from_json_str(&with_post_processor(&pp), "fuzz.json")
            .expect("valid tokenizer.json");
        assert_eq!(tok.encode("ab", false).expect("encode"), [0, 1], "{pp}");
        assert_eq!(tok.encode("ab", true).expect("encode"), [0, 0, 1], "{pp}");
    }
}

/// `chat_template`: `{%}` made the `{% generation %}` rewriter slice a tag
/// from inside its own opening `{%`.
#[test]
fn chat_template_unclosed_block_opener_is_an_error() {
    for source in ["{%}", "a{%}b", "{%}%}", "{%-}", "{% generation %}{%}"] {
        // Either an error from the template engine or a render; never a panic.
        if let Ok(t) = ChatTemplate::new(source, "fuzz template") {
            let _ = t.render(&[ChatMessage::new("user", "hi")], true, &[]);
        }
    }
    // `{%}%}` is a block whose body is `}`: the engine refuses it by name.
    let e = match ChatTemplate::new("x{%}%}", "fuzz template") {
        Ok(_) => panic!("`{{%}}%}}` compiled"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("fuzz template"), "{e}");
}

/// `safetensors`: the in-memory entry the fuzzer drives reads a file as
/// `open` does, and refuses what `open` refuses.
#[test]
fn safetensors_from_bytes_matches_open() {
    use mllm_backends::weights::WeightSource;
    use mllm_converter::SafetensorsDir;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pytorch/tiny.safetensors");
    let bytes = std::fs::read(&path).expect("fixture");
    let from_file = SafetensorsDir::open(&path).expect("open");
    let from_bytes = SafetensorsDir::from_bytes("tiny.safetensors", bytes.clone()).expect("parse");
    assert!(!from_file.names().is_empty());
    assert_eq!(from_file.names(), from_bytes.names());
    for name in from_file.names() {
        let (a, b) = (from_file.load(&name), from_bytes.load(&name));
        let (a, b) = (a.expect("load"), b.expect("load"));
        assert_eq!(a.shape(), b.shape(), "{name}");
        assert_eq!(a.to_f32_vec().ok(), b.to_f32_vec().ok(), "{name}");
    }
    let e = SafetensorsDir::from_bytes("cut.safetensors", bytes[..bytes.len() - 1].to_vec())
        .err()
        .expect("a truncated file is refused")
        .to_string();
    assert!(e.contains("cut.safetensors"), "{e}");
}

/// `gguf`: a tensor with a zero dimension behind two huge ones (ggml order
/// `[0, 2^33, 2^33]`: the reader's product meets the 0 first, but in
/// PyTorch order the element count overflowed before reaching it). Its
/// count is 0, and loading it, as blocks or dequantized, never panics.
#[test]
fn gguf_zero_dimension_behind_huge_ones_has_no_elements() {
    use mllm_backends::weights::WeightSource;
    use mllm_converter::gguf::{GgufFile, GgufWeights};
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes()); // version
    f.extend(1u64.to_le_bytes()); // tensors
    f.extend(0u64.to_le_bytes()); // metadata entries
    let name = b"blk.0.attn_q.weight";
    f.extend((name.len() as u64).to_le_bytes());
    f.extend(name);
    f.extend(3u32.to_le_bytes()); // dimensions
    for d in [0u64, 1 << 33, 1 << 33] {
        f.extend(d.to_le_bytes());
    }
    f.extend(2u32.to_le_bytes()); // Q4_0
    f.extend(0u64.to_le_bytes()); // offset
    f.resize(f.len().div_ceil(32) * 32, 0);
    let file = GgufFile::from_bytes("zero.gguf", f).expect("a valid header");
    assert_eq!(file.tensor_infos()[0].numel(), 0);
    let mut w = GgufWeights::new(file).expect("weights");
    for dequantize in [false, true] {
        w.set_dequantize(dequantize);
        for n in w.names() {
            if let Ok(t) = w.load(&n) {
                let _ = t.to_f32_vec();
            }
        }
    }
}

/// `tokenizer_json` (a 20-minute campaign): a tokenizer whose decoded text
/// never settled made the stream decoder's window grow with every id, and
/// each step decodes the whole window: quadratic, 16 s under the fuzzer for
/// the ~2,000 ids of this input. The window is now flushed past 256 held
/// ids. The input is the fuzzer's own (committed as a corpus file).
#[test]
fn tokenizer_json_stream_window_stays_bounded() {
    let data = include_bytes!(
        "../../tests/fuzz/corpus/tokenizer_json/regression-stream-window-never-settles"
    );
    let sep = b"\n%%part%%\n";
    let at = data
        .windows(sep.len())
        .position(|w| w == sep)
        .expect("two parts");
    let json = std::str::from_utf8(&data[..at]).expect("utf-8 json");
    // Six copies of the fuzzer's text: quadratic work then shows as ~36x
    // (seconds), linear as 6x (a fraction of one).
    let text = String::from_utf8_lossy(&data[at + sep.len()..]).repeat(6);
    let tok = Tokenizer::from_json_str(json, "fuzz.json").expect("it loads");
    let raw: Vec<u32> = text.bytes().map(u32::from).collect();
    let mut streams = vec![raw];
    for special in [false, true] {
        streams.push(tok.encode(&text, special).expect("it encodes"));
    }
    let t0 = std::time::Instant::now();
    for ids in &streams {
        let mut stream = tok.stream_decoder(false);
        for &id in ids {
            let _ = stream.step(id);
        }
        let _ = stream.flush();
    }
    let secs = t0.elapsed().as_secs_f64();
    // Linear decoding takes well under 0.5 s even in a debug build.
    assert!(
        secs < 2.0,
        "streaming {} ids took {secs:.2} s",
        streams.iter().map(Vec::len).sum::<usize>()
    );
}
