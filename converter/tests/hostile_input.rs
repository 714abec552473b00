//! Bounded work on hostile input: chat templates that loop, recurse or
//! grow without end are stopped by fuel, depth and output limits with a
//! message naming the limit; real templates render far inside them. Images
//! that claim more pixels than the limit (decompression bombs) are refused
//! from their header, before a pixel is decoded. Megabytes of adversarial
//! text tokenize in bounded time, and text over the limit is refused.
//!
//! The Qwen3 tokenizer and template are fetched assets
//! (tests/fetch_assets.sh); without them those tests fail, never skip.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mllm_converter::chat_template::{ChatMessage, ChatTemplate, TemplateLimits};
use mllm_converter::image_preprocess::{decode_bytes, DEFAULT_MAX_PIXELS};
use mllm_converter::tokenizer::{Tokenizer, DEFAULT_MAX_TEXT_BYTES};

fn asset(rel: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.cache")
        .join(rel);
    assert!(
        p.is_file(),
        "missing test asset {}: run tests/fetch_assets.sh (from the repository root) to fetch it",
        p.display()
    );
    p
}

fn render_err(source: &str, limits: Option<TemplateLimits>) -> String {
    let mut t = ChatTemplate::new(source, "hostile.jinja").expect("compiles");
    if let Some(l) = limits {
        t.set_limits(l);
    }
    let t0 = Instant::now();
    let e = t
        .render(&[ChatMessage::new("user", "hi")], true, &[])
        .expect_err("the template is stopped")
        .to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    e
}

#[test]
fn a_template_looping_without_end_runs_out_of_fuel() {
    // 10^10 iterations with the default limits.
    let e = render_err(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        None,
    );
    assert!(
        e.contains("hostile.jinja") && e.contains("used up its fuel of 10000000"),
        "{e}"
    );
    assert!(e.contains("MLLM_TEMPLATE_FUEL"), "{e}");
}

#[test]
fn a_template_growing_a_string_runs_out_of_fuel_before_memory() {
    // Doubling a megabyte 30 times would be a petabyte; fuel pays for bytes.
    let source = "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    let small = TemplateLimits {
        fuel: 1_000_000,
        ..TemplateLimits::default()
    };
    let e = render_err(source, Some(small));
    assert!(e.contains("used up its fuel of 1000000"), "{e}");
}

#[test]
fn a_macro_calling_itself_hits_the_depth_limit() {
    let e = render_err(
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        None,
    );
    assert!(e.contains("nests calls more than 200 deep"), "{e}");
    assert!(e.contains("MLLM_TEMPLATE_MAX_DEPTH"), "{e}");
}

#[test]
fn output_past_the_cap_is_refused() {
    // 100 MB of text, cheap in fuel per byte written.
    let e = render_err(
        "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
        None,
    );
    assert!(e.contains("rendered more than 16777216 bytes"), "{e}");
    assert!(e.contains("MLLM_TEMPLATE_MAX_OUTPUT"), "{e}");
    let tight = TemplateLimits {
        max_output: 10,
        ..TemplateLimits::default()
    };
    let mut t = ChatTemplate::new("0123456789", "t").expect("compiles");
    t.set_limits(tight);
    assert_eq!(
        t.render(&[], false, &[]).expect("10 bytes fit"),
        "0123456789"
    );
    let mut t = ChatTemplate::new("0123456789!", "t").expect("compiles");
    t.set_limits(tight);
    assert!(t.render(&[], false, &[]).is_err(), "11 bytes do not");
}

#[test]
fn a_real_template_renders_a_megabyte_conversation_on_a_tenth_of_the_fuel() {
    let mut t = ChatTemplate::from_tokenizer_config(&asset("npm/qwen3/tokenizer_config.json"))
        .expect("qwen3");
    let turn = "All work and no play makes Jack a dull boy. ".repeat(120);
    let messages: Vec<ChatMessage> = (0..200)
        .map(|i| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, turn.clone()))
        .collect();
    t.set_limits(TemplateLimits {
        fuel: TemplateLimits::default().fuel / 10,
        ..TemplateLimits::default()
    });
    let text = t.render(&messages, true, &[]).expect("renders");
    assert!(text.len() > 1_000_000, "{} bytes", text.len());
    assert!(
        text.ends_with("<|im_start|>assistant\n"),
        "{}",
        &text[text.len() - 40..]
    );
}

/// A PNG whose header claims `w` x `h` RGB pixels, with a few bytes of
/// (deflated, empty) data: a decompression bomb's shape.
fn bomb_png(w: u32, h: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = vec![];
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, no interlace
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(
        &mut png,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

#[test]
fn images_claiming_too_many_pixels_are_refused_before_decoding() {
    let t0 = Instant::now();
    // 400 megapixels with sides the decoder accepts: the pixel limit.
    let e = decode_bytes(&bomb_png(20_000, 20_000), "bomb.png")
        .expect_err("over the pixel limit")
        .to_string();
    assert!(
        e.contains("bomb.png")
            && e.contains("20000x20000 = 400000000 pixels")
            && e.contains(&format!("over the limit of {DEFAULT_MAX_PIXELS}")),
        "{e}"
    );
    assert!(e.contains("MLLM_MAX_IMAGE_PIXELS"), "{e}");
    // 100k x 100k: refused from the header as well, by the side limit.
    let e = decode_bytes(&bomb_png(100_000, 100_000), "wide.png")
        .expect_err("over the side limit")
        .to_string();
    assert!(e.contains("wide.png") && e.contains("refused"), "{e}");
    // Neither allocated its pixels: both answers are immediate.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // The same file under the limit reaches the decoder (whose data ends early).
    let e = decode_bytes(&bomb_png(64, 64), "small.png")
        .expect_err("no pixel data")
        .to_string();
    assert!(!e.contains("over the limit"), "{e}");
}

fn qwen3() -> Tokenizer {
    Tokenizer::from_file(&asset("npm/qwen3/tokenizer.json")).expect("qwen3 tokenizer")
}

#[test]
fn megabytes_of_adversarial_text_encode_in_bounded_time() {
    // Measured (release, 2 busy cores): 1 MiB of each in 0.3-0.8 s, 4 MiB
    // in 1.4-5.4 s (digits, one token each, are the slowest): linear.
    let tok = qwen3();
    let n = 1 << 20;
    let mut unicode = String::new();
    let mut x = 7u32;
    while unicode.len() < n {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        unicode.push(char::from_u32((x >> 16) % 0x2fff + 0x20).unwrap_or('?'));
    }
    let inputs = [
        ("digits", "7".repeat(n)),
        ("spaces", " ".repeat(n)),
        ("one long word", "a".repeat(n)),
        ("newlines", "\n".repeat(n)),
        ("random unicode", unicode),
    ];
    for (what, text) in inputs {
        let t0 = Instant::now();
        let ids = tok.encode(&text, false).expect("encodes");
        let took = t0.elapsed();
        assert!(!ids.is_empty());
        assert!(
            took < Duration::from_secs(10),
            "{what}: {} bytes took {took:?}",
            text.len()
        );
    }
}

#[test]
fn text_over_the_limit_is_refused_at_once() {
    let tok = qwen3();
    let text = "x".repeat(DEFAULT_MAX_TEXT_BYTES as usize + 1);
    let t0 = Instant::now();
    let e = tok.encode(&text, false).expect_err("too long").to_string();
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert!(
        e.contains("over the limit of 16777216 bytes") && e.contains("MLLM_MAX_TEXT_BYTES"),
        "{e}"
    );
}
