//! `mllm check FILE...`: parse and check scripts, print every diagnostic.

use crate::assets::{load_script, ScriptResolver};
use crate::{color, CliError, CliResult};

/// Checks a script; on success returns the program, else the rendered
/// diagnostics.
pub fn check_script(path: &str) -> CliResult<mllm_dsl::Program> {
    let (name, text) = load_script(path).map_err(|e| CliError(format!("error: {e}")))?;
    let (prog, diags) = mllm_dsl::check(&name, &text, &ScriptResolver::for_script(path));
    if diags.is_empty() {
        return Ok(prog);
    }
    let n = diags.len();
    let mut out = mllm_dsl::diagnostic::render_all(&diags, &prog.sources, color());
    out.push_str(&format!(
        "\n{name}: {n} error{}",
        if n == 1 { "" } else { "s" }
    ));
    Err(CliError(out))
}

pub fn run(files: &[String]) -> CliResult<()> {
    let mut failed = vec![];
    for f in files {
        match check_script(f) {
            Ok(prog) => eprintln!(
                "{f}: ok ({} module{}, {} config{})",
                prog.main_modules().len(),
                if prog.main_modules().len() == 1 {
                    ""
                } else {
                    "s"
                },
                prog.configs
                    .iter()
                    .filter(|c| c.source == prog.main)
                    .count(),
                if prog
                    .configs
                    .iter()
                    .filter(|c| c.source == prog.main)
                    .count()
                    == 1
                {
                    ""
                } else {
                    "s"
                },
            ),
            Err(e) => {
                eprintln!("{}", e.0);
                failed.push(f.clone());
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError(format!(
            "error: {} of {} script(s) failed the check",
            failed.len(),
            files.len()
        )))
    }
}
