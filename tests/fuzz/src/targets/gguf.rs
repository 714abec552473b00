//! GGUF reader: the input is a whole `.gguf` file. Parses it, builds the
//! config.json view of its metadata, and loads every tensor under its
//! Hugging Face name, as blocks and dequantized.

use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights};

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Ok(file) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) else {
        return;
    };
    let _ = hf_config(&file);
    for key in file.meta_keys() {
        let _ = file.meta(key).map(|v| v.type_name());
    }
    for info in file.tensor_infos() {
        let _ = file.tensor_data(info);
    }
    let Ok(mut weights) = GgufWeights::new(file) else {
        return;
    };
    super::touch_all(&weights);
    weights.set_dequantize(true);
    super::touch_all(&weights);
}
