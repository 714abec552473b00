//! Sharded safetensors checkpoint: the input is `model.safetensors.index.json`
//! and up to three shard files (`PART`-separated), written to a scratch
//! folder as `model.safetensors.index.json`, `a.safetensors`,
//! `b.safetensors`, `c.safetensors`; the index may name any of them (or
//! anything else). The folder is opened as a checkpoint and every tensor
//! loaded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mllm_converter::SafetensorsDir;

fuzz_target!(|data: &[u8]| {
    let p = mllm_fuzz::parts(data, 4);
    let dir = mllm_fuzz::scratch();
    mllm_fuzz::write(dir, "model.safetensors.index.json", Some(p[0]));
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let bytes = p.get(i + 1).copied();
        mllm_fuzz::write(dir, &format!("{name}.safetensors"), bytes);
    }
    if let Ok(ck) = SafetensorsDir::open(dir) {
        mllm_fuzz::touch_all(&ck);
    }
});
