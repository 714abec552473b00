//! Safetensors file: the input is one `.safetensors` file, parsed in memory
//! (`SafetensorsDir::from_bytes`), every tensor loaded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mllm_converter::SafetensorsDir;

fuzz_target!(|data: &[u8]| {
    if let Ok(dir) = SafetensorsDir::from_bytes("fuzz.safetensors", data.to_vec()) {
        mllm_fuzz::touch_all(&dir);
    }
});
