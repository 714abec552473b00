//! DSL test cases as files: every `tests/dsl/*.mdl` carries its expected
//! diagnostics inline (`#~ CODE` on the line of the error). The rendered
//! report is compared with the `.stderr` file beside it; run with
//! `MLLM_BLESS=1` to rewrite those after an intended change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mllm_runtime::assets::ScriptResolver;

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dsl");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/dsl")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "mdl"))
        .collect();
    v.sort();
    assert!(v.len() >= 6, "expected the DSL cases in {}", dir.display());
    v
}

fn expected(text: &str) -> BTreeMap<usize, Vec<String>> {
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(pos) = line.find("#~") {
            for code in line[pos + 2..].split_whitespace() {
                out.entry(i + 1).or_default().push(code.to_string());
            }
        }
    }
    out
}

#[test]
fn every_case_reports_exactly_its_annotated_diagnostics() {
    let bless = std::env::var_os("MLLM_BLESS").is_some();
    let mut failures = vec![];
    for path in cases() {
        let text = std::fs::read_to_string(&path).expect("read case");
        let name = format!(
            "tests/dsl/{}",
            path.file_name().expect("name").to_string_lossy()
        );
        let resolver = ScriptResolver {
            dir: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("dsl")),
        };
        let (prog, diags) = mllm_dsl::check(&name, &text, &resolver);
        let mut got: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for d in &diags {
            assert_eq!(d.source, 0, "{name}: diagnostic in an imported file: {d:?}");
            let line = prog.sources.line_col(0, d.span().map_or(0, |s| s.start)).0;
            got.entry(line).or_default().push(d.code.to_string());
            assert!(
                d.help.is_some() || d.code.starts_with("mdl::check::duplicate"),
                "{name}: {} has no help text",
                d.code
            );
        }
        for v in got.values_mut() {
            v.sort();
        }
        let mut want = expected(&text);
        for v in want.values_mut() {
            v.sort();
        }
        if got != want {
            failures.push(format!(
                "{name}:\n  expected {want:?}\n  got      {got:?}\n{}",
                mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
            ));
            continue;
        }
        let rendered = mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false);
        let snap = path.with_extension("stderr");
        if bless {
            std::fs::write(&snap, &rendered).expect("write snapshot");
        } else {
            match std::fs::read_to_string(&snap) {
                Ok(s) if s == rendered => {}
                Ok(_) => failures.push(format!("{name}: rendered diagnostics differ from {} (MLLM_BLESS=1 rewrites it)\n{rendered}", snap.display())),
                Err(_) => failures.push(format!("{name}: no snapshot {} (run with MLLM_BLESS=1)", snap.display())),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
