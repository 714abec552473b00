//! The CRC-32 check of a `.mllm` file's tensors (FORMAT.md, "Checksums"):
//! every tensor's stored CRC against its bytes, large tensors hashed in
//! pieces in parallel. `Checksums` owns what the check reads (a share of
//! the mapping and the tensor table), so a loader can run it on its own
//! thread while it prepares the weights, and join before the first forward.
//!
//! The same pass checks what a CRC cannot: values a kernel type forbids in
//! bytes that hash correctly (a file written by another tool, or crafted).
//! Q8_KS is the one such type: its code bytes are 0..=127, the SIMD
//! kernels read 7 bits of them and the reference twin 8, so a larger byte
//! would make the two disagree instead of failing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mllm_backends::ByteOwner;
use rayon::prelude::*;

use super::reader::TensorEntry;
use super::types::StoredType;
use crate::error::{ConvertError, Result};
use crate::file_bytes::FileBytes;

/// A `.mllm` file's tensors and the bytes their CRCs are checked against
/// (`MllmFile::checksums`).
pub struct Checksums {
    pub(super) path: PathBuf,
    pub(super) storage: Arc<FileBytes>,
    pub(super) tensors: Vec<TensorEntry>,
}

impl Checksums {
    /// Checks every tensor's CRC and names every damaged tensor (at most 20).
    pub fn verify(&self) -> Result<()> {
        // A mapped file is checked through positioned reads of the file:
        // the bytes come from the page cache without becoming resident in
        // this process (reading the mapping added ~150 MB of file pages to
        // the resident set of a Qwen3-0.6B q4_0 load, pages of tensors the
        // CPU then repacks or reads only in part).
        #[cfg(unix)]
        if let FileBytes::Mapped(m) = &*self.storage {
            if let Ok(f) = std::fs::File::open(&self.path) {
                if f.metadata().is_ok_and(|md| md.len() == m.len() as u64) {
                    return report(
                        self.tensors
                            .par_iter()
                            .filter_map(|t| self.check_crc_read(&f, t).err())
                            .collect(),
                    );
                }
            }
        }
        report(
            self.tensors
                .par_iter()
                .filter_map(|t| check_crc(&self.path, t, self.bytes(t)).err())
                .collect(),
        )
    }

    /// The stored bytes of a tensor (in bounds: checked when the file was
    /// opened).
    fn bytes(&self, t: &TensorEntry) -> &[u8] {
        self.storage
            .bytes()
            .get(t.offset..t.offset + t.byte_len)
            .unwrap_or(&[])
    }

    /// `check_crc` reading the tensor's bytes from `f` (the mapped file).
    #[cfg(unix)]
    fn check_crc_read(
        &self,
        f: &std::fs::File,
        t: &TensorEntry,
    ) -> std::result::Result<(), String> {
        use std::os::unix::fs::FileExt;
        // Each piece: its CRC and whether its codes are valid (reported
        // after the CRC: a damaged tensor's checksum is the better message).
        type Piece = (crc32fast::Hasher, std::result::Result<(), String>);
        let pieces: Vec<std::result::Result<Piece, String>> = (0..t.byte_len)
            .step_by(CRC_PIECE)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map_init(Vec::new, |buf: &mut Vec<u8>, at| {
                let len = CRC_PIECE.min(t.byte_len - at);
                buf.resize(len, 0);
                f.read_exact_at(buf, (t.offset + at) as u64).map_err(|e| {
                    format!("{}: reading tensor `{}`: {e}", self.path.display(), t.name)
                })?;
                let mut h = crc32fast::Hasher::new();
                h.update(buf);
                Ok((h, check_codes(&self.path, t, at, buf)))
            })
            .collect();
        let mut all = crc32fast::Hasher::new();
        let mut codes = Ok(());
        for p in pieces {
            let (h, c) = p?;
            all.combine(&h);
            codes = codes.and(c);
        }
        crc_matches(&self.path, t, all.finalize())?;
        codes
    }
}

/// One tensor's CRC over `bytes`, its stored data, then its codes.
pub(super) fn check_crc(
    path: &Path,
    t: &TensorEntry,
    bytes: &[u8],
) -> std::result::Result<(), String> {
    crc_matches(path, t, parallel_crc(bytes))?;
    bytes
        .par_chunks(CRC_PIECE)
        .enumerate()
        .try_for_each(|(i, c)| check_codes(path, t, i * CRC_PIECE, c))
}

/// Checks the code bytes of a Q8_KS tensor in `bytes`, the tensor's data
/// from byte `at` on (any piece: blocks may straddle its ends).
fn check_codes(
    path: &Path,
    t: &TensorEntry,
    at: usize,
    bytes: &[u8],
) -> std::result::Result<(), String> {
    use mllm_backends::quant::{q8_ks::BlockQ8KS, QuantType};
    if !matches!(t.ty, StoredType::Quant(QuantType::Q8KS { .. })) {
        return Ok(());
    }
    // Codes are the first 256 bytes of each 274-byte block.
    const CODES: usize = mllm_backends::quant::QK_K;
    let bad = bytes
        .iter()
        .enumerate()
        .find(|&(i, &b)| b > 127 && (at + i) % BlockQ8KS::SIZE < CODES);
    match bad {
        None => Ok(()),
        Some((i, &b)) => Err(format!(
            "{}: tensor `{}` is Q8_KS, whose code bytes are 0..=127, but block {} holds {b} (byte {} of the tensor); \
             `mllm convert` never writes that: convert the source again",
            path.display(),
            t.name,
            (at + i) / BlockQ8KS::SIZE,
            at + i
        )),
    }
}

fn crc_matches(path: &Path, t: &TensorEntry, crc: u32) -> std::result::Result<(), String> {
    if crc == t.crc32 {
        Ok(())
    } else {
        Err(format!(
            "{}: tensor `{}` has checksum {crc:08x}, the table says {:08x}",
            path.display(),
            t.name,
            t.crc32
        ))
    }
}

fn report(mut bad: Vec<String>) -> Result<()> {
    if bad.is_empty() {
        return Ok(());
    }
    bad.sort();
    let n = bad.len();
    bad.truncate(20);
    Err(ConvertError::Corrupt(format!(
        "{} damaged tensor{}:\n  {}",
        n,
        if n == 1 { "" } else { "s" },
        bad.join("\n  ")
    )))
}

/// Bytes per piece when a tensor's CRC is computed in parallel: large
/// enough that combining is free, small enough that one big tensor (an
/// embedding table) keeps every thread busy, and that the buffer a piece
/// is read into stays in L2 for the CRC that follows (4 MiB pieces went
/// through memory twice: +0.47 s on a 2.28 GB Qwen3-VL-2B q8_0 load, vs
/// ~+0.12-0.28 s at 256 KiB on the same busy machine).
const CRC_PIECE: usize = 256 << 10;

/// CRC-32 of `bytes`, pieces hashed in parallel and combined in order.
fn parallel_crc(bytes: &[u8]) -> u32 {
    if bytes.len() <= CRC_PIECE {
        return crc32fast::hash(bytes);
    }
    let parts: Vec<crc32fast::Hasher> = bytes
        .par_chunks(CRC_PIECE)
        .map(|c| {
            let mut h = crc32fast::Hasher::new();
            h.update(c);
            h
        })
        .collect();
    let mut all = crc32fast::Hasher::new();
    for p in &parts {
        all.combine(p);
    }
    all.finalize()
}

#[cfg(test)]
mod tests {
    use super::{parallel_crc, CRC_PIECE};

    #[test]
    fn pieces_hashed_in_parallel_combine_to_the_whole_crc() {
        let data: Vec<u8> = (0..3 * CRC_PIECE + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        assert_eq!(parallel_crc(&data), crc32fast::hash(&data));
        assert_eq!(parallel_crc(&data[..1000]), crc32fast::hash(&data[..1000]));
        let mut damaged = data.clone();
        damaged[2 * CRC_PIECE + 7] ^= 1;
        assert_ne!(parallel_crc(&damaged), crc32fast::hash(&data));
    }
}
