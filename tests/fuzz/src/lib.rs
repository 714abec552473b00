//! Helpers shared by the fuzz targets (`fuzz_targets/*.rs`): splitting one
//! fuzz input into the several files a surface reads, a per-process scratch
//! folder for readers that only open paths, touching every tensor a weight
//! source offers, and the fixture folder. Each target's own file
//! (`targets/NAME.rs`) says what its input is.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mllm_backends::weights::WeightSource;

pub mod targets;

/// Separates the files packed into one input (`parts`). The fuzzer learns it
/// from the seeds and from each target's dictionary (`tests/fuzz/dict/`).
pub const PART: &[u8] = b"\n%%part%%\n";

/// At most `n` pieces of `data`, cut at each `PART`; the last piece keeps
/// any further separators.
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(n);
    let mut rest = data;
    while out.len() + 1 < n {
        match rest.windows(PART.len()).position(|w| w == PART) {
            Some(i) => {
                out.push(&rest[..i]);
                rest = &rest[i + PART.len()..];
            }
            None => break,
        }
    }
    out.push(rest);
    out
}

/// Joins files into one input, the inverse of `parts` (for seeds).
pub fn join(pieces: &[&[u8]]) -> Vec<u8> {
    pieces.join(PART)
}

/// The repository's `tests/fixtures` (compiled in: fuzz binaries run from
/// this checkout). This file is also compiled into the `mllm-tests` crate
/// (`tests/`), whose manifest sits beside `fixtures/`, not below it.
pub fn fixtures() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    match manifest.join("fixtures") {
        beside if beside.is_dir() => beside,
        _ => manifest.join("../fixtures"),
    }
}

/// A folder of this process for readers that take paths: targets write the
/// fuzz input's files here (and remove the ones an input lacks), reusing the
/// folder so each run costs a few writes. Lives under `$TMPDIR`
/// (`tests/fuzz.sh` points that at a folder it removes afterwards).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mllm-fuzz-{}", std::process::id()));
        // A failure here is the machine's, not the input's: stop loudly.
        std::fs::create_dir_all(&dir).expect("create the fuzz scratch folder");
        dir
    })
}

/// Writes `bytes` to `dir/name`, or removes that file when `bytes` is None.
pub fn write(dir: &Path, name: &str, bytes: Option<&[u8]>) -> PathBuf {
    let p = dir.join(name);
    match bytes {
        Some(b) => std::fs::write(&p, b).expect("write a fuzz scratch file"),
        None => {
            let _ = std::fs::remove_file(&p);
        }
    }
    p
}

/// Loads every tensor of a source (at most 64) and reads each as f32, so
/// bad offsets, shapes and conversions are reached, not just the tables.
pub fn touch_all(src: &dyn WeightSource) {
    let _ = src.describe();
    for name in src.names().iter().take(64) {
        let _ = src.info(name);
        if let Ok(t) = src.load(name) {
            let _ = t.to_f32_vec();
        }
    }
}
