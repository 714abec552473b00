#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mllm_fuzz::targets::gguf::run(data));
