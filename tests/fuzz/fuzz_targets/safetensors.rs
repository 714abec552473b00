#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mllm_fuzz::targets::safetensors::run(data));
