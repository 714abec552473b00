//! examples/generate.c, compiled with the system C compiler against the
//! static library cargo built for this test and run on the real SmolLM2
//! GGUF: it loads, round-trips tokens, streams a greedy answer and cancels
//! a second one from its callback. The header also compiles as C++.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{root, smollm2, ANSWER, QUESTION};

/// `libmllm.a` of this build: cargo writes it beside the test binary
/// (target/<profile>/deps/), and uplifts plain builds one folder up.
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps folder");
    for dir in [deps, deps.parent().expect("profile folder")] {
        let p = dir.join("libmllm.a");
        if p.is_file() {
            return p;
        }
    }
    panic!("libmllm.a not found beside {}", exe.display());
}

fn compile(out: &Path) {
    let status = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(root().join("capi/include"))
        .arg(root().join("capi/examples/generate.c"))
        .arg(staticlib())
        // What the Rust standard library needs from the system
        // (`rustc --print native-static-libs`).
        .args(["-lm", "-lpthread", "-ldl", "-o"])
        .arg(out)
        .status()
        .expect("run cc (a C compiler is needed for this test)");
    assert!(status.success(), "cc failed to build examples/generate.c");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn c_example_streams_and_cancels() {
    let model = smollm2();
    let dir = tempfile::tempdir().expect("tmp");
    let exe = dir.path().join("generate");
    compile(&exe);

    let out = Command::new(&exe)
        .args([model.as_str(), QUESTION, "4"])
        .output()
        .expect("run generate");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.starts_with("mllm 0.1.0\n"), "{stdout}");
    assert!(stdout.contains("(round trip ok)"), "{stdout}");
    assert!(
        stdout.contains(&format!("answer: {ANSWER}\n")),
        "greedy answer differs from `mllm run --temp 0`:\n{stdout}"
    );
    assert!(stdout.contains("stop: eos]"), "{stdout}");
    // The second turn reused the first turn's cache, and was cancelled
    // after exactly 4 pieces.
    let line = stdout
        .lines()
        .find(|l| l.contains("pieces"))
        .unwrap_or_else(|| panic!("no summary of the cancelled answer:\n{stdout}"));
    assert!(line.ends_with("4 pieces, stop: cancelled]"), "{line}");
    let computed: usize = line
        .split('(')
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let total: usize = line
        .split("prompt ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(computed < total / 2, "the cache was not reused: {line}");

    let missing = dir.path().join("no-such-model.gguf");
    let out = Command::new(&exe)
        .arg(&missing)
        .output()
        .expect("run generate");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("mllm_model_load failed: model not found (2)")
            && stderr.contains("no-such-model.gguf"),
        "{stderr}"
    );
}

#[test]
fn header_compiles_as_cpp() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("use.cpp");
    std::fs::write(
        &src,
        "#include \"mllm.h\"\nint main() { mllm_generate_params p = mllm_generate_params_default(); return p.raw ? 1 : 0; }\n",
    )
    .expect("write");
    let status = Command::new("c++")
        .args(["-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(root().join("capi/include"))
        .arg(&src)
        .status()
        .expect("run c++ (a C++ compiler is needed for this test)");
    assert!(status.success());
}
