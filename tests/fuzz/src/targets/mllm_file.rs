//! `.mllm` reader: the input is a whole `.mllm` file. The header CRC is
//! recomputed before parsing (it covers everything parsed eagerly, so
//! without this nearly every mutation would stop at the checksum); tensor
//! CRCs are left as they are, so `verify` sees damaged data too. Every
//! tensor is then loaded as stored and as the runtime gets it.

use mllm_converter::mllm_format::{layout, MllmFile};

/// Recomputes the header CRC (bytes 52..56, FORMAT.md) over the eager
/// part, bytes `0 .. 64 + meta_len + table_len`, when that fits the input.
fn fix_header_crc(b: &mut [u8]) {
    if b.len() < layout::HEADER_LEN {
        return;
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let end = (layout::HEADER_LEN as u64)
        .checked_add(u64_at(16))
        .and_then(|e| e.checked_add(u64_at(24)));
    let Some(end) = end.filter(|&e| e <= b.len() as u64) else {
        return;
    };
    let crc = layout::header_crc(&b[..end as usize]);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    let mut bytes = data.to_vec();
    fix_header_crc(&mut bytes);
    let Ok(mut file) = MllmFile::from_bytes("fuzz.mllm", bytes) else {
        return;
    };
    let _ = (file.config(), file.generation_config(), file.recipe());
    let _ = (
        file.tokenizer_json(),
        file.tokenizer_config(),
        file.chat_template(),
    );
    let _ = (file.preprocessor_config(), file.source(), file.metadata());
    let _ = file.verify();
    let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
    for name in names.iter().take(64) {
        let _ = file.verify_tensor(name);
        if let Ok(t) = file.load_stored(name) {
            let _ = t.to_f32_vec();
        }
    }
    super::touch_all(&file);
    file.set_dequantize(true);
    super::touch_all(&file);
}
