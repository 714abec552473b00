//! `tokenizer.json` loading and encoding: the input is a tokenizer.json
//! document and a text (`PART`-separated). Loads it, encodes the text with
//! and without special tokens, decodes the ids (and ids taken from the
//! text's bytes, some out of range), and streams them through the
//! incremental decoder.

use std::sync::{Arc, Mutex};

use mllm_converter::tokenizer::Tokenizer;

/// Texts longer than this are cut: throughput on megabytes is a separate,
/// deterministic test; here breadth matters.
const MAX_TEXT: usize = 4096;

/// Loads the tokenizer as production does. mllm's loader (parse.rs) turns
/// a panic inside the `tokenizers` crate into an error with `catch_unwind`,
/// but libFuzzer's panic hook aborts the process before the unwind gets
/// there. So while loading, a hook that only notes the message stands in
/// for it, and is swapped back right after: a panic that mllm lets out of
/// the loader is raised again under the fuzzer's hook (a crash, with its
/// message), and one anywhere else (encode, decode, streaming) is a crash
/// as before.
fn load(json: &str) -> mllm_converter::Result<Tokenizer> {
    let message = Arc::new(Mutex::new(String::new()));
    let noted = Arc::clone(&message);
    let fuzzer_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *noted.lock().unwrap_or_else(|e| e.into_inner()) = info.to_string();
    }));
    let tok = std::panic::catch_unwind(|| Tokenizer::from_json_str(json, "fuzz tokenizer.json"));
    std::panic::set_hook(fuzzer_hook);
    match tok {
        Ok(tok) => tok,
        Err(_) => {
            let message = message.lock().unwrap_or_else(|e| e.into_inner());
            panic!("loading panicked and mllm did not catch it: {message}")
        }
    }
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    let p = super::parts(data, 2);
    let Ok(json) = std::str::from_utf8(p[0]) else {
        return;
    };
    let Ok(tok) = load(json) else {
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
}
