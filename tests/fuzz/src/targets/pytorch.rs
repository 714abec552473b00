//! PyTorch checkpoint (zip + restricted unpickler). The first input byte
//! picks the form of the rest:
//! - bit 0 clear: the rest is a whole archive (`torch.save` output);
//! - bit 0 set: the rest is `data.pkl` and up to ten storages
//!   (`PART`-separated), packed here into a well-formed archive as torch
//!   writes it (`fuzz/data.pkl`, `fuzz/byteorder`, `fuzz/data/0` ..), so
//!   mutations reach the unpickler and the tensor checks instead of dying in
//!   the zip's CRCs; bit 1 deflates the storages.
//!
//! The archive is written to a scratch file (the reader maps a path), opened,
//! and every tensor loaded.

use std::io::Write;

use mllm_converter::pytorch::PytorchCheckpoint;
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

fn archive(rest: &[u8], deflate: bool) -> Option<Vec<u8>> {
    let p = super::parts(rest, 11);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .with_alignment(64);
    let data = if deflate {
        SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
    } else {
        stored
    };
    zip.start_file("fuzz/data.pkl", stored).ok()?;
    zip.write_all(p[0]).ok()?;
    zip.start_file("fuzz/byteorder", stored).ok()?;
    zip.write_all(b"little").ok()?;
    for (i, s) in p[1..].iter().enumerate() {
        zip.start_file(format!("fuzz/data/{i}"), data).ok()?;
        zip.write_all(s).ok()?;
    }
    zip.start_file("fuzz/version", stored).ok()?;
    zip.write_all(b"3\n").ok()?;
    Some(zip.finish().ok()?.into_inner())
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        match archive(rest, mode & 2 != 0) {
            Some(b) => b,
            None => return,
        }
    };
    let path = super::write(super::scratch(), "fuzz.pt", Some(&bytes));
    if let Ok(ck) = PytorchCheckpoint::open(&path) {
        let _ = (ck.files(), ck.pickle_crc32());
        for name in mllm_backends::weights::WeightSource::names(&ck) {
            let _ = ck.saved_elem(&name);
        }
        super::touch_all(&ck);
    }
}
