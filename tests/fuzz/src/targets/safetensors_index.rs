//! Sharded safetensors checkpoint: the input is `model.safetensors.index.json`
//! and up to three shard files (`PART`-separated), written to a scratch
//! folder as `model.safetensors.index.json`, `a.safetensors`,
//! `b.safetensors`, `c.safetensors`; the index may name any of them (or
//! anything else). The folder is opened as a checkpoint and every tensor
//! loaded.

use mllm_converter::SafetensorsDir;

/// One fuzz input.
pub fn run(data: &[u8]) {
    let p = super::parts(data, 4);
    let dir = super::scratch();
    super::write(dir, "model.safetensors.index.json", Some(p[0]));
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let bytes = p.get(i + 1).copied();
        super::write(dir, &format!("{name}.safetensors"), bytes);
    }
    if let Ok(ck) = SafetensorsDir::open(dir) {
        super::touch_all(&ck);
    }
}
