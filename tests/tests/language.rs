//! Runs every `test_*` function of `tests/lang/*.mdl` through the
//! interpreter on the CPU backend.

use std::path::Path;

use mllm_backends::CpuBackend;
use mllm_interpreter::{Eager, Interp};
use mllm_runtime::assets::ScriptResolver;

#[test]
fn language_semantics() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lang/semantics.mdl");
    let text = std::fs::read_to_string(&path).expect("semantics.mdl");
    let name = path.display().to_string();
    let (prog, diags) = mllm_dsl::check(&name, &text, &ScriptResolver::for_script(&name));
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    let mut exec = Eager::new(CpuBackend);
    let mut ran = 0;
    let mut failures = vec![];
    for f in prog
        .fns
        .iter()
        .filter(|f| f.source == prog.main && f.name.starts_with("test_"))
    {
        let mut it = Interp::new(&prog, &mut exec);
        match it.call_function(f, None, vec![], vec![]) {
            Ok(_) => ran += 1,
            Err(e) => failures.push(format!("{}:\n{}", f.name, e.render(&prog.sources, false))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 7, "ran {ran} test functions");
}

#[test]
fn failing_asserts_point_at_the_script() {
    let text = "fn test_x() {\n  let a = 1\n  assert(a == 2, \"a is not two\")\n}\n";
    let (prog, diags) = mllm_dsl::check("t.mdl", text, &mllm_dsl::NoImports);
    assert!(diags.is_empty());
    let mut exec = Eager::new(CpuBackend);
    let mut it = Interp::new(&prog, &mut exec);
    let err = it
        .call_function(&prog.fns[0], None, vec![], vec![])
        .expect_err("assert fails");
    let shown = err.render(&prog.sources, false);
    assert!(
        shown.contains("a is not two") && shown.contains("t.mdl:3:3"),
        "{shown}"
    );
}

#[test]
fn runaway_recursion_is_an_error() {
    let text = "fn f(n) { return f(n + 1) }\n";
    let (prog, _) = mllm_dsl::check("r.mdl", text, &mllm_dsl::NoImports);
    let mut exec = Eager::new(CpuBackend);
    let mut it = Interp::new(&prog, &mut exec);
    let err = it
        .call_function(
            &prog.fns[0],
            None,
            vec![mllm_interpreter::Value::Int(0)],
            vec![],
        )
        .expect_err("too deep");
    assert_eq!(err.code, "mdl::run::too_deep");
}
