//! No input, however malformed, makes the parser or checker panic: random
//! text, token soup, and mutations of the shipped scripts.

use mllm_dsl::{check, Resolver};
use proptest::prelude::*;

const NN: &str = include_str!("../../stdlib/nn.mdl");
const QWEN3: &str = include_str!("../../models/qwen3.mdl");

struct Stdlib;

impl Resolver for Stdlib {
    fn resolve(&self, name: &str) -> Option<(String, String)> {
        (name == "nn").then(|| ("nn.mdl".to_string(), NN.to_string()))
    }
}

const TOKENS: &[&str] = &[
    "module",
    "config",
    "fn",
    "let",
    "for",
    "in",
    "if",
    "else",
    "return",
    "param",
    "import",
    "nn",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "=",
    "==",
    "+",
    "-",
    "*",
    "/",
    "//",
    "**",
    "@",
    ".",
    "..",
    "...",
    "!",
    "&&",
    "||",
    "x",
    "c",
    "forward",
    "0",
    "1",
    "-1",
    "2.5",
    "1e-6",
    "\"s\"",
    "true",
    "none",
    "\n",
    " ",
    "#",
    "é",
    "\u{0}",
    "layer",
    "model.layers",
];

fn soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(TOKENS), 0..80).prop_map(|t| t.join(" "))
}

fn run(text: &str) {
    let (_prog, diags) = check("fuzz.mdl", text, &Stdlib);
    for d in &diags {
        // Every diagnostic points inside the file it names.
        if let Some(s) = d.span() {
            assert!(s.start <= s.end, "{d:?}");
        }
    }
    let _ = mllm_dsl::diagnostic::render_all(&diags, &_prog.sources, false);
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, &'static str),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), proptest::sample::select(TOKENS))
            .prop_map(|(a, t)| Mutation::Insert(a, t)),
        (any::<usize>(), 1usize..60).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

fn mutate(src: &str, muts: &[Mutation]) -> String {
    let mut s: Vec<char> = src.chars().collect();
    for m in muts {
        let len = s.len().max(1);
        match m {
            Mutation::Delete(a, n) => {
                let a = a % len;
                let b = (a + n).min(s.len());
                s.drain(a.min(s.len())..b);
            }
            Mutation::Insert(a, t) => {
                let a = a % (s.len() + 1);
                for (i, c) in t.chars().enumerate() {
                    s.insert(a + i, c);
                }
            }
            Mutation::Duplicate(a, n) => {
                let a = a % len;
                let b = (a + n).min(s.len());
                let piece: Vec<char> = s[a.min(s.len())..b].to_vec();
                for (i, c) in piece.into_iter().enumerate() {
                    s.insert(b + i, c);
                }
            }
        }
    }
    s.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_text_never_panics(s in "\\PC{0,200}") {
        run(&s);
    }

    #[test]
    fn token_soup_never_panics(s in soup()) {
        run(&s);
    }

    #[test]
    fn mutated_qwen3_never_panics(muts in proptest::collection::vec(mutation(), 1..6)) {
        run(&mutate(QWEN3, &muts));
    }

    #[test]
    fn mutated_stdlib_never_panics(muts in proptest::collection::vec(mutation(), 1..6)) {
        run(&mutate(NN, &muts));
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for open in ["(", "[", "{"] {
        let text = format!("fn f(x) {{ return {}x }}", open.repeat(100_000));
        let (_, diags) = check("deep.mdl", &text, &Stdlib);
        assert!(
            diags.iter().any(|d| d.code == "mdl::parse::too_deep"),
            "{open}: {diags:?}"
        );
    }
    // Long flat chains are refused with a clear error, not a stack overflow
    // in a later recursive pass.
    for (chain, code) in [
        (" + x", "mdl::parse::too_complex"),
        (".y", "mdl::parse::too_complex"),
        ("(x)", "mdl::parse::too_complex"),
    ] {
        let text = format!("fn f(x) {{ return x{} }}", chain.repeat(20_000));
        let (_, diags) = check("long.mdl", &text, &Stdlib);
        assert!(diags.iter().any(|d| d.code == code), "{chain}: {diags:?}");
    }
    let text = format!("fn f(x) {{ return x{} }}", " + x".repeat(100));
    let (_, diags) = check("ok.mdl", &text, &Stdlib);
    assert!(diags.is_empty(), "{diags:?}");
}

#[test]
fn shipped_scripts_check_clean() {
    for (name, text) in [("qwen3.mdl", QWEN3), ("nn.mdl", NN)] {
        let (_, diags) = check(name, text, &Stdlib);
        assert!(diags.is_empty(), "{name}: {diags:?}");
    }
}

/// Nested lists parse in time linear in their depth. The grammar used to
/// try a comprehension and then re-parse the same element as a plain list,
/// doubling the work per level: 17 unclosed `[` took seconds, 40 would not
/// finish (found by the `mdl_run` fuzz target as a timeout).
#[test]
fn nested_lists_parse_in_linear_time() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let closed = format!("fn f(x) {{ return {}x{} }}", "[".repeat(40), "]".repeat(40));
        let (_, diags) = check("closed.mdl", &closed, &Stdlib);
        assert!(diags.is_empty(), "{diags:?}");
        let unclosed = format!("fn f(x) {{ return x{}0 }}", "[".repeat(40));
        let (_, diags) = check("unclosed.mdl", &unclosed, &Stdlib);
        assert!(!diags.is_empty(), "unclosed brackets are an error");
        let comp = "fn f(x) { return [[i + j for j in range(2)] for i in range(3)] }";
        let (_, diags) = check("comp.mdl", comp, &Stdlib);
        assert!(diags.is_empty(), "{diags:?}");
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("parsing 40 nested lists took over a minute (exponential backtracking)");
}
