//! `tokenizer.json` loading and encoding: the input is a tokenizer.json
//! document and a text (`PART`-separated). Loads it, encodes the text with
//! and without special tokens, decodes the ids (and ids taken from the
//! text's bytes, some out of range), and streams them through the
//! incremental decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mllm_converter::tokenizer::Tokenizer;

/// Texts longer than this are cut: throughput on megabytes is a separate,
/// deterministic test; here breadth matters.
const MAX_TEXT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let p = mllm_fuzz::parts(data, 2);
    let Ok(json) = std::str::from_utf8(p[0]) else {
        return;
    };
    let Ok(tok) = Tokenizer::from_json_str(json, "fuzz tokenizer.json") else {
        return;
    };
    let text = p.get(1).copied().unwrap_or_default();
    let text = String::from_utf8_lossy(&text[..text.len().min(MAX_TEXT)]);
    let _ = (
        tok.vocab_size(),
        tok.bos_id(),
        tok.eos_ids(),
        tok.special_ids(),
    );
    let _ = (
        tok.bos_token(),
        tok.eos_token(),
        tok.unk_token(),
        tok.pad_token(),
    );
    for special in [false, true] {
        if let Ok(ids) = tok.encode(&text, special) {
            let _ = tok.decode(&ids, false);
            let _ = tok.decode(&ids, true);
            let mut stream = tok.stream_decoder(special);
            for &id in &ids {
                let _ = stream.step(id);
            }
            let _ = stream.flush();
            for &id in ids.iter().take(16) {
                if let Some(t) = tok.id_to_token(id) {
                    let _ = tok.token_to_id(&t);
                }
            }
        }
    }
    let raw: Vec<u32> = text.bytes().map(u32::from).chain([u32::MAX]).collect();
    let _ = tok.decode(&raw, false);
    let mut stream = tok.stream_decoder(false);
    for &id in &raw {
        let _ = stream.step(id);
    }
    let _ = stream.flush();
});
