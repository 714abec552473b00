//! GGUF vocabularies: the input is a `.gguf` file (the seeds carry only
//! `tokenizer.ggml.*` metadata). Reads the vocabulary, converts it to a
//! tokenizer.json document and a tokenizer, and encodes and decodes a fixed
//! text of mixed scripts, spaces and special-looking tokens.

use mllm_converter::gguf::GgufFile;
use mllm_converter::tokenizer::{GgufVocab, Tokenizer};

const TEXT: &str = "Hello  world!\n\tÇa va? 你好，世界 🦀 <|im_start|>user<s></s> 12345 <unk>\u{0}";

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Ok(file) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) else {
        return;
    };
    let Ok(vocab) = GgufVocab::from_gguf(&file) else {
        return;
    };
    let _ = vocab.to_tokenizer_json();
    let Ok(tok) = Tokenizer::from_gguf_vocab(&vocab) else {
        return;
    };
    for special in [false, true] {
        if let Ok(ids) = tok.encode(TEXT, special) {
            let _ = tok.decode(&ids, false);
            let _ = tok.decode(&ids, true);
        }
    }
    let all: Vec<u32> = (0..tok.vocab_size().min(512) as u32).collect();
    let _ = tok.decode(&all, false);
    let mut stream = tok.stream_decoder(true);
    for &id in &all {
        let _ = stream.step(id);
    }
    let _ = stream.flush();
}
