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

struct Files(&'static [(&'static str, &'static str)]);

impl mllm_dsl::Resolver for Files {
    fn resolve(&self, name: &str) -> Option<(String, String)> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, t)| (format!("{n}.mdl"), t.to_string()))
    }
}

/// A config extending an imported one whose inherited default reads a field
/// of a config declared in that import (`rope.theta`, `Rope` extending a
/// third file's config): configs resolve after the configs they depend on,
/// whatever the order the files declare them in.
#[test]
fn inherited_defaults_read_configs_of_a_deeper_import() {
    let files = Files(&[
        ("a", "config Base {\n  theta: float = 1.0\n}\n"),
        (
            "b",
            "import a\nconfig Rope : a.Base {\n  factor: float = 0.5\n}\nconfig Text {\n  rope: Rope\n  theta: float = rope.theta * rope.factor\n}\n",
        ),
    ]);
    let main = "import b\nconfig Moe : b.Text {\n  experts: int = 2\n}\nmodule M(c: Moe) {\n  let t = c.theta\n}\n";
    let (prog, diags) = mllm_dsl::check("main.mdl", main, &files);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
}

/// A config with several bases takes each base's fields in turn; a field a
/// later base or the child declares again replaces the earlier one in its
/// place, and an inherited default reads the replacement.
#[test]
fn several_bases_merge_their_fields_in_order() {
    let files = Files(&[
        ("a", "config Dense {\n  hidden: int\n  act: str = \"silu\"\n}\n"),
        (
            "b",
            "config Experts {\n  experts: int = 4\n  act: str = \"gelu\"\n  width: int = experts * 2\n}\n",
        ),
    ]);
    let main = "import a\nimport b\nconfig Moe : a.Dense, b.Experts {\n  experts: int = 8\n}\nmodule M(c: Moe) {\n  let w = c.width\n}\n";
    let (prog, diags) = mllm_dsl::check("main.mdl", main, &files);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    let moe = prog.configs.iter().find(|c| c.name == "Moe").expect("Moe");
    let names: Vec<&str> = moe.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["hidden", "act", "experts", "width"]);
    assert_eq!(moe.bases.len(), 2);
    // `act` is b's (a later base replaces), `experts` the child's.
    let source = |name: &str| {
        moe.fields
            .iter()
            .find(|f| f.name == name)
            .expect("field")
            .source
    };
    assert_ne!(source("act"), source("hidden"));
    assert_eq!(source("act"), source("width"));
    assert_ne!(source("experts"), source("width"));

    let unknown = "import a\nconfig Moe : a.Dense, Missing {}\n";
    let (_, diags) = mllm_dsl::check("main.mdl", unknown, &files);
    assert!(
        diags
            .iter()
            .any(|d| d.message.contains("unknown config `Missing`")),
        "{diags:?}"
    );
}
