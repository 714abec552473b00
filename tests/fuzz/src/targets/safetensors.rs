//! Safetensors file: the input is one `.safetensors` file, parsed in memory
//! (`SafetensorsDir::from_bytes`), every tensor loaded.

use mllm_converter::SafetensorsDir;

/// One fuzz input.
pub fn run(data: &[u8]) {
    if let Ok(dir) = SafetensorsDir::from_bytes("fuzz.safetensors", data.to_vec()) {
        super::touch_all(&dir);
    }
}
