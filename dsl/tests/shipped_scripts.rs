//! Every shipped model script checks cleanly against the stdlib on disk
//! (the language's own test of the scripts; the golden tests run them).

use std::path::{Path, PathBuf};

struct Stdlib(PathBuf);

impl mllm_dsl::Resolver for Stdlib {
    fn resolve(&self, name: &str) -> Option<(String, String)> {
        let p = self.0.join(format!("{name}.mdl"));
        std::fs::read_to_string(&p)
            .ok()
            .map(|t| (p.display().to_string(), t))
    }
}

#[test]
fn every_model_script_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let resolver = Stdlib(root.join("stdlib"));
    let mut n = 0;
    for dir in ["models", "stdlib"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("mdl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read script");
            let name = path.display().to_string();
            let (prog, diags) = mllm_dsl::check(&name, &text, &resolver);
            assert!(
                diags.is_empty(),
                "{name}:\n{}",
                mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
            );
            n += 1;
        }
    }
    assert!(n >= 6, "found only {n} scripts");
}
