//! The README's examples, run so that they cannot rot.
//!
//! Marker: a fenced ```sh (or ```bash) block of README.md runs when the
//! nearest non-blank line above its fence is an HTML comment
//!
//!     <!-- readme-test -->                  needs only committed files
//!     <!-- readme-test needs=PATH -->       also needs PATH (relative to the
//!                                           repository root), e.g. the
//!                                           SmolLM2 GGUF tests/fetch_assets.sh
//!                                           fetches into .cache/gguf/
//!
//! A marked block runs as written, as one `bash -e -o pipefail` script in
//! the repository root, with the directory of the freshly built `mllm`
//! first on PATH (so the README's `mllm ...` is this build); it must exit 0
//! and print something on stdout. Mark only blocks that need no download
//! beyond what tests/fetch_assets.sh fetches and that end by themselves
//! (not `serve`); write outputs under the ignored `.cache/`. A block whose
//! `needs=` file is missing is skipped with a message (a failure when
//! CI=true, as the other tests' missing assets are). The test fails when
//! the README has no marked block that needs only committed files, or a
//! marker that is not followed by a sh/bash fence.
//!
//! Every other `mllm SUBCOMMAND --flag ...` line of the README's sh blocks
//! (the ones that need a model download or run forever) is checked against
//! `mllm SUBCOMMAND --help`: the subcommand must exist and each long flag
//! must be one it lists. And the README's test command must be the one
//! `.ci/run` runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MARKER: &str = "readme-test";
const TEST_COMMAND: &str = "bash tests/fetch_assets.sh && cargo test --workspace";
const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    body: String,
    /// `Some(needs)` when marked runnable; `needs` is the optional file.
    marked: Option<Option<String>>,
}

/// The fenced sh/bash blocks of `text` (fences may be indented, as inside
/// a list item), each with its marker if any.
fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if let Some(info) = t.strip_prefix("```") {
            let lang = info.split_whitespace().next().unwrap_or("");
            let start = i;
            let mut body = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push_str(lines[i].trim_start());
                body.push('\n');
                i += 1;
            }
            assert!(i < lines.len(), "README.md:{}: unclosed fence", start + 1);
            if lang == "sh" || lang == "bash" {
                out.push(Block {
                    line: start + 1,
                    body,
                    marked: marker_above(&lines, start),
                });
            }
        }
        i += 1;
    }
    out
}

/// The marker on the nearest non-blank line above line `fence` (0-based).
fn marker_above(lines: &[&str], fence: usize) -> Option<Option<String>> {
    let above = lines[..fence].iter().rev().find(|l| !l.trim().is_empty())?;
    let inner = above
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    let rest = inner.strip_prefix(MARKER)?.trim();
    if rest.is_empty() {
        return Some(None);
    }
    let needs = rest
        .strip_prefix("needs=")
        .unwrap_or_else(|| panic!("README.md: unknown marker argument in `{above}`"));
    Some(Some(needs.to_string()))
}

/// Every marker line must sit right above a sh/bash fence.
fn check_markers(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    for (n, l) in lines.iter().enumerate() {
        if l.contains(&format!("<!-- {MARKER}")) {
            let next = lines[n + 1..].iter().find(|l| !l.trim().is_empty());
            let ok = next.is_some_and(|l| {
                let t = l.trim_start();
                t.starts_with("```sh") || t.starts_with("```bash")
            });
            assert!(
                ok,
                "README.md:{}: a marker not followed by a sh/bash fence",
                n + 1
            );
        }
    }
}

fn run_block(dir: &Path, bin_dir: &Path, b: &Block) -> (String, Duration) {
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let started = Instant::now();
    let mut child = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &b.body])
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bash");
    // Read the pipes on threads so a chatty block cannot block on a full pipe.
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).ok();
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed() > BLOCK_TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "README.md:{}: the block ran past {:?}:\n{}",
                b.line, BLOCK_TIMEOUT, b.body
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&ro.join().expect("stdout")).into_owned();
    let stderr = String::from_utf8_lossy(&re.join().expect("stderr")).into_owned();
    assert!(
        status.success(),
        "README.md:{}: the block failed ({status}):\n{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        b.line,
        b.body
    );
    assert!(
        !stdout.trim().is_empty(),
        "README.md:{}: the block printed nothing on stdout:\n{}\n--- stderr\n{stderr}",
        b.line,
        b.body
    );
    (stdout, started.elapsed())
}

#[test]
fn readme_examples_run() {
    let root = root();
    let text = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    check_markers(&text);
    let all = blocks(&text);
    let marked: Vec<&Block> = all.iter().filter(|b| b.marked.is_some()).collect();
    assert!(
        marked.iter().any(|b| matches!(b.marked, Some(None))),
        "README.md has no `<!-- {MARKER} -->` block that needs only committed files"
    );

    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mllm"));
    assert_eq!(bin.file_name().and_then(|n| n.to_str()), Some("mllm"));
    let bin_dir = bin.parent().expect("binary's directory");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let mut ran = 0;
    for b in &marked {
        if let Some(Some(needs)) = &b.marked {
            if !root.join(needs).exists() {
                let msg = format!(
                    "README.md:{}: {needs} is missing; run `bash tests/fetch_assets.sh`",
                    b.line
                );
                assert!(!ci, "{msg}");
                eprintln!("skipped: {msg}");
                continue;
            }
        }
        let (_, took) = run_block(&root, bin_dir, b);
        eprintln!("README.md:{}: ok in {:.1}s", b.line, took.as_secs_f64());
        ran += 1;
    }
    assert!(ran > 0, "no README block ran");
}

/// The arguments after `mllm` (or `cargo run ... --`) on each command of a
/// line, with comments dropped; quoted text is kept whole.
fn mllm_invocations(line: &str) -> Vec<Vec<String>> {
    let words = shell_words(line);
    let mut out = Vec::new();
    for cmd in words.split(|w| w == "|" || w == "&&" || w == ";") {
        match cmd.first().map(String::as_str) {
            Some("mllm") => out.push(cmd[1..].to_vec()),
            Some("cargo") if cmd.get(1).map(String::as_str) == Some("run") => {
                if let Some(p) = cmd.iter().position(|w| w == "--") {
                    out.push(cmd[p + 1..].to_vec());
                }
            }
            _ => {}
        }
    }
    out
}

/// A small shell word splitter: whitespace, single and double quotes, `#`
/// comments at a word start, and `|`, `&&`, `;` as separate words.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                    cur.push(d);
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '|' | ';' if !in_word || cur.is_empty() => {
                words.push(c.to_string());
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                words.push("&&".into());
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[test]
fn readme_commands_use_flags_that_exist() {
    let root = root();
    let text = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut checked = 0;
    for b in blocks(&text) {
        for line in b.body.lines() {
            for args in mllm_invocations(line) {
                let sub = args
                    .first()
                    .unwrap_or_else(|| panic!("`{line}`: no subcommand"));
                let help = Command::new(env!("CARGO_BIN_EXE_mllm"))
                    .args([sub.as_str(), "--help"])
                    .output()
                    .expect("run mllm");
                assert!(
                    help.status.success(),
                    "README.md:{}: `mllm {sub}` is not a subcommand ({line})",
                    b.line
                );
                let help = String::from_utf8_lossy(&help.stdout);
                for flag in args.iter().filter(|a| a.starts_with("--")) {
                    let name = flag.split('=').next().expect("flag");
                    let listed = help
                        .split(|c: char| c.is_whitespace() || c == ',')
                        .any(|w| w == name);
                    assert!(
                        listed,
                        "README.md:{}: `mllm {sub}` has no flag {name} ({line})",
                        b.line
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} mllm commands found in README.md"
    );
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(
        readme.lines().any(|l| l.trim() == TEST_COMMAND),
        "README.md lacks the test command `{TEST_COMMAND}`"
    );
    assert!(
        ci.contains(TEST_COMMAND),
        ".ci/run does not run the README's test command `{TEST_COMMAND}`"
    );
}
