//! Replays every fuzz target's committed corpus (`tests/fuzz/corpus/TARGET`)
//! through the target's own code (`tests/fuzz/src/targets/TARGET.rs`,
//! compiled in here), so `cargo test` keeps every input the fuzzer ever kept
//! handled: no panic and every target's own assertions hold. This is the
//! regression half of fuzzing, without libFuzzer or AddressSanitizer;
//! campaigns that look for new inputs are `bash tests/fuzz.sh SECONDS`
//! (docs/testing.md), kept out of CI for its time.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod mllm_fuzz;

fn replay(target: &str, run: fn(&[u8])) -> (usize, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    entries.sort();
    let mut failures = Vec::new();
    for path in &entries {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
            failures.push(path.display().to_string());
        }
    }
    (entries.len(), failures)
}

#[test]
fn every_fuzz_corpus_input_is_handled() {
    let mut failures = Vec::new();
    for &(target, run) in mllm_fuzz::targets::ALL {
        let (n, mut failed) = replay(target, run);
        assert!(n > 0, "the corpus of fuzz target {target} is empty");
        eprintln!("{target}: {n} inputs, {} failed", failed.len());
        failures.append(&mut failed);
    }
    assert!(
        failures.is_empty(),
        "fuzz corpus inputs that panic (replay one with `bash tests/fuzz.sh` \
         or `cargo fuzz run --fuzz-dir tests/fuzz TARGET FILE`):\n{}",
        failures.join("\n")
    );
}

/// Every target binary has a corpus and a module here, and the other way
/// round: a new target cannot miss the replay.
#[test]
fn every_fuzz_target_is_replayed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut bins: Vec<String> = std::fs::read_dir(root.join("fuzz_targets"))
        .expect("tests/fuzz/fuzz_targets")
        .map(|e| {
            let p = e.expect("an entry").path();
            p.file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    bins.sort();
    let mut replayed: Vec<String> = mllm_fuzz::targets::ALL
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    replayed.sort();
    assert_eq!(bins, replayed);
}
