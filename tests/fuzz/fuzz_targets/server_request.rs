#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mllm_fuzz::targets::server_request::run(data));
