//! `mllm convert` under faults: a write that fails (a file size limit
//! standing in for a full disk), a process killed mid-write (SIGXFSZ's
//! default action, like SIGKILL: no cleanup runs) and Ctrl-C. None leaves a
//! file at the output path; a failed or interrupted run removes its
//! temporary file, and a killed run's temporary is removed by the next
//! conversion to that path, while one that belongs to a running process is
//! left alone.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn fixture() -> String {
    root()
        .join("tests/fixtures/qwen3/gqa_tied_f32")
        .display()
        .to_string()
}

/// Files in `dir` whose names start with `.NAME.tmp-` for output `NAME`.
fn temporaries(dir: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!(".{name}.tmp-");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// `mllm convert SRC OUT -q f32` in a shell that first runs `setup`
/// (ulimit, trap), so the limits apply to mllm alone.
fn convert_in_shell(setup: &str, src: &str, out: &Path) -> std::process::Output {
    let script = format!("{setup}; exec \"$0\" convert \"$1\" \"$2\" -q f32",);
    Command::new("bash")
        .args(["-c", &script, env!("CARGO_BIN_EXE_mllm"), src])
        .arg(out)
        .env("NO_COLOR", "1")
        .output()
        .expect("run bash")
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("full.mllm");
    // 64 KiB of file size (the model is 325 KiB); SIGXFSZ ignored, so the
    // write fails with EFBIG as it would with ENOSPC on a full disk.
    let r = convert_in_shell("trap '' XFSZ; ulimit -f 64", &fixture(), &out);
    let err = text(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("full.mllm") && err.contains("File too large"),
        "{err}"
    );
    assert!(err.contains("was not created"), "{err}");
    assert!(!out.exists(), "no output file");
    assert_eq!(temporaries(dir.path(), "full.mllm"), Vec::<PathBuf>::new());
}

#[test]
fn a_killed_conversion_leaves_no_output_and_the_next_run_cleans_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("killed.mllm");
    // SIGXFSZ's default action ends the process at once, mid-write.
    let r = convert_in_shell("ulimit -f 64", &fixture(), &out);
    assert!(!r.status.success());
    assert!(!out.exists(), "a killed run leaves no output file");
    let left = temporaries(dir.path(), "killed.mllm");
    assert_eq!(left.len(), 1, "the killed run's temporary: {left:?}");

    // A temporary that belongs to a running process (this test) stays.
    let live = dir
        .path()
        .join(format!(".killed.mllm.tmp-{}", std::process::id()));
    std::fs::write(&live, b"in progress").expect("write");

    let r = mllm(&[
        "convert",
        &fixture(),
        &out.display().to_string(),
        "-q",
        "f32",
    ]);
    let err = text(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(
        err.contains("left by an earlier conversion that was killed")
            && err.contains(&left[0].display().to_string()),
        "{err}"
    );
    assert!(out.is_file());
    assert_eq!(temporaries(dir.path(), "killed.mllm"), vec![live]);
    let r = mllm(&[
        "exec",
        "qwen3",
        "--model",
        &out.display().to_string(),
        "--input-ids",
        "1,2,3",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
}

#[test]
fn ctrl_c_stops_a_conversion_and_removes_its_temporary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    // 30 layers to quantize on one thread: seconds, time enough to interrupt.
    let r = mllm(&[
        "random-checkpoint",
        "--preset",
        "smollm2-135m",
        "--out",
        &src.display().to_string(),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let out = dir.path().join("int.mllm");
    let child = Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args(["convert", &src.display().to_string()])
        .arg(&out)
        .args(["-q", "q4_k", "-t", "1"])
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mllm");
    let t0 = Instant::now();
    while temporaries(dir.path(), "int.mllm").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the conversion never started writing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let r = child.wait_with_output().expect("wait");
    let err = text(&r.stderr);
    assert!(
        !r.status.success(),
        "it finished before the interrupt: {err}"
    );
    assert!(err.contains("interrupted after"), "{err}");
    assert!(!out.exists());
    assert_eq!(temporaries(dir.path(), "int.mllm"), Vec::<PathBuf>::new());
}
