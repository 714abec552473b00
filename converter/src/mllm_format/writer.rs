//! `MllmWriter`: writes a `.mllm` file tensor by tensor. The layout is fixed
//! up front from the planned types and shapes (every tensor's size is known
//! before it is converted), so each tensor's bytes go to disk as soon as
//! they exist and memory holds one tensor at a time; the CRCs, known only
//! afterwards, are patched into the table and header at the end. The file
//! is written as `.OUT.tmp-PID` beside `OUT` and renamed into place only
//! when complete (an atomic rename on one filesystem), so a conversion that
//! fails, runs out of disk or is killed never leaves a file at `OUT`; a
//! failed one removes its temporary, and the temporaries of killed runs
//! (their process gone) are removed by the next conversion to that path.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::layout::{self, Header, RawEntry, DEFAULT_ALIGNMENT, HEADER_LEN, MAX_NAME, MAX_RANK};
use super::types::StoredType;
use crate::error::{ConvertError, Result};

/// A tensor the file will hold, before its data exists.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    pub ty: StoredType,
    pub requested: StoredType,
    pub shape: Vec<usize>,
}

pub struct MllmWriter {
    out: BufWriter<File>,
    tmp: PathBuf,
    dest: PathBuf,
    header: Header,
    meta: Vec<u8>,
    entries: Vec<RawEntry>,
    /// Index of the next tensor to write.
    next: usize,
    /// Bytes of the data section written so far.
    pos: u64,
    finished: bool,
    /// Temporaries of killed conversions to the same path, removed by `create`.
    removed_stale: Vec<PathBuf>,
}

/// The temporary file this process writes for `dest`: `.NAME.tmp-PID` in
/// the same directory (hidden, and named after the process so a later run
/// can tell a killed run's leftovers from a conversion still running).
pub fn tmp_path(dest: &Path) -> PathBuf {
    let mut name = tmp_prefix(dest);
    name.push(std::process::id().to_string());
    dest.with_file_name(name)
}

/// `.NAME.tmp-`: what every temporary for `dest` starts with.
fn tmp_prefix(dest: &Path) -> std::ffi::OsString {
    let mut name = std::ffi::OsString::from(".");
    name.push(dest.file_name().unwrap_or_default());
    name.push(".tmp-");
    name
}

/// Removes the temporaries that earlier conversions to `dest` left behind
/// when they were killed (SIGKILL, power loss): `.NAME.tmp-PID` files whose
/// process no longer runs (where `/proc` cannot say, those untouched for an
/// hour). Returns the removed paths; files it cannot remove are left.
pub fn remove_stale_tmps(dest: &Path) -> Vec<PathBuf> {
    let prefix = tmp_prefix(dest);
    let Some(prefix) = prefix.to_str() else {
        return vec![];
    };
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut removed = vec![];
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if is_stale(&path, pid) && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Whether the temporary `path` written by process `pid` is abandoned.
fn is_stale(path: &Path, pid: u32) -> bool {
    if pid == std::process::id() {
        // Ours from an earlier writer in this process: `create` replaces it.
        return true;
    }
    let proc = Path::new("/proc");
    if proc.join("self").exists() {
        return !proc.join(pid.to_string()).exists();
    }
    // No /proc: a conversion in progress writes continuously.
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > std::time::Duration::from_secs(3600))
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl MllmWriter {
    /// Lays out the file and writes everything up to the first tensor.
    pub fn create(dest: &Path, metadata: &Value, tensors: &[PlannedTensor]) -> Result<MllmWriter> {
        let bad = |m: String| ConvertError::Unsupported(format!("{}: {m}", dest.display()));
        if !metadata.is_object() {
            return Err(bad("the metadata must be a JSON object".into()));
        }
        let meta = serde_json::to_vec(metadata)
            .map_err(|e| bad(format!("cannot serialize the metadata: {e}")))?;
        let alignment = DEFAULT_ALIGNMENT as u64;
        let mut entries = Vec::with_capacity(tensors.len());
        let mut pos = 0u64;
        let mut names = std::collections::HashSet::new();
        for t in tensors {
            if t.name.is_empty() || t.name.len() > MAX_NAME || !names.insert(&t.name) {
                return Err(bad(format!(
                    "tensor name `{}` is empty, too long or repeated",
                    t.name
                )));
            }
            if t.shape.len() > MAX_RANK {
                return Err(bad(format!(
                    "tensor `{}` has more than {MAX_RANK} dimensions",
                    t.name
                )));
            }
            let dims: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
            let numel = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
            if numel.is_none_or(|n| n > layout::MAX_ELEMENTS) {
                return Err(bad(format!("tensor `{}` has too many elements", t.name)));
            }
            let byte_len =
                t.ty.byte_len(&dims)
                    .map_err(|m| bad(format!("tensor `{}` as {}: {m}", t.name, t.ty)))?;
            let offset = align_up(pos, alignment);
            pos = offset + byte_len;
            entries.push(RawEntry {
                name: t.name.clone(),
                ty: t.ty.ggml_id(),
                requested: t.requested.ggml_id(),
                dims,
                offset,
                byte_len,
                crc32: 0,
            });
        }
        let table_len: usize = entries.iter().map(RawEntry::encoded_len).sum();
        // What the reader would refuse is not written (FORMAT.md, "Limits").
        if meta.len() as u64 > layout::MAX_SECTION || table_len as u64 > layout::MAX_SECTION {
            return Err(bad("the metadata or tensor table exceeds 1 GiB".into()));
        }
        if entries.len() > layout::MAX_TENSORS as usize {
            return Err(bad(format!("more than {} tensors", layout::MAX_TENSORS)));
        }
        let eager_end = (HEADER_LEN + meta.len() + table_len) as u64;
        let header = Header {
            major: layout::MAJOR,
            minor: layout::MINOR,
            alignment: DEFAULT_ALIGNMENT,
            meta_len: meta.len() as u64,
            table_len: table_len as u64,
            data_offset: align_up(eager_end, alignment),
            data_len: pos,
            tensor_count: u32::try_from(entries.len())
                .map_err(|_| bad("too many tensors".into()))?,
            header_crc32: 0,
        };
        let removed_stale = remove_stale_tmps(dest);
        let tmp = tmp_path(dest);
        let f = File::create(&tmp).map_err(|e| ConvertError::io(&tmp, e))?;
        let mut w = MllmWriter {
            out: BufWriter::with_capacity(8 << 20, f),
            tmp,
            dest: dest.to_path_buf(),
            header,
            meta,
            entries,
            next: 0,
            pos: 0,
            finished: false,
            removed_stale,
        };
        // Placeholders; `finish` rewrites the eager part with the CRCs.
        w.write_eager()?;
        let pad = w.header.data_offset - eager_end;
        w.write_zeros(pad)?;
        Ok(w)
    }

    /// A write failure (a full disk, a file size limit), naming the
    /// output and the temporary file that was being written.
    fn io(&self, e: std::io::Error) -> ConvertError {
        ConvertError::Io {
            path: format!(
                "cannot write {} (its temporary file {})",
                self.dest.display(),
                self.tmp.display()
            ),
            source: e,
        }
    }

    fn eager_bytes(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(HEADER_LEN + self.meta.len() + self.header.table_len as usize);
        b.extend_from_slice(&self.header.encode());
        b.extend_from_slice(&self.meta);
        for e in &self.entries {
            e.encode_into(&mut b);
        }
        b
    }

    fn write_eager(&mut self) -> Result<()> {
        let b = self.eager_bytes();
        self.out.write_all(&b).map_err(|e| self.io(e))
    }

    fn write_zeros(&mut self, mut n: u64) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        while n > 0 {
            let k = n.min(ZEROS.len() as u64) as usize;
            self.out.write_all(&ZEROS[..k]).map_err(|e| self.io(e))?;
            n -= k as u64;
        }
        Ok(())
    }

    /// The leftovers of killed conversions to this path that `create` removed.
    pub fn removed_stale(&self) -> &[PathBuf] {
        &self.removed_stale
    }

    /// Writes the next planned tensor's data (in plan order).
    pub fn write_next(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let Some(e) = self.entries.get(self.next) else {
            return Err(ConvertError::Unsupported(format!(
                "{}: tensor `{name}` was not planned",
                self.dest.display()
            )));
        };
        if e.name != name || e.byte_len != bytes.len() as u64 {
            return Err(ConvertError::Unsupported(format!(
                "{}: expected tensor `{}` of {} bytes next, got `{name}` of {} bytes",
                self.dest.display(),
                e.name,
                e.byte_len,
                bytes.len()
            )));
        }
        let (offset, crc) = (e.offset, crc32fast::hash(bytes));
        self.write_zeros(offset - self.pos)?;
        self.out.write_all(bytes).map_err(|e| self.io(e))?;
        self.entries[self.next].crc32 = crc;
        self.pos = offset + bytes.len() as u64;
        self.next += 1;
        Ok(())
    }

    /// Patches the CRCs in, flushes, syncs and renames the temporary file
    /// to `OUT`.
    pub fn finish(mut self) -> Result<PathBuf> {
        if self.next != self.entries.len() {
            return Err(ConvertError::Unsupported(format!(
                "{}: {} of {} tensors were written",
                self.dest.display(),
                self.next,
                self.entries.len()
            )));
        }
        let mut eager = self.eager_bytes();
        self.header.header_crc32 = layout::header_crc(&eager);
        eager[..HEADER_LEN].copy_from_slice(&self.header.encode());
        self.out.seek(SeekFrom::Start(0)).map_err(|e| self.io(e))?;
        self.out.write_all(&eager).map_err(|e| self.io(e))?;
        self.out.flush().map_err(|e| self.io(e))?;
        self.out.get_ref().sync_all().map_err(|e| self.io(e))?;
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| ConvertError::io(&self.dest, e))?;
        self.finished = true;
        Ok(self.dest.clone())
    }
}

impl Drop for MllmWriter {
    /// An unfinished file is removed: it would fail to open anyway.
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
