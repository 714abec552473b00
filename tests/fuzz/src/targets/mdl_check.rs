//! `.mdl` parse + check: the input is a script (imports resolve to the
//! embedded stdlib). Every diagnostic is rendered, as `mllm check` does.

use mllm_runtime::assets::ScriptResolver;

/// One fuzz input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // No file of this name exists, so imports come from the embedded stdlib.
    let (prog, diags) = mllm_dsl::check("fuzz.mdl", text, &ScriptResolver { dir: None });
    let _ = mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false);
}
