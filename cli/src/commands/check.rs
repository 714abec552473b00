//! `mllm check FILE...`: parse and check scripts, print every diagnostic.

use crate::{CliError, CliResult};
pub use mllm_runtime::assets::check_script;

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
                eprintln!("{}", e.render(crate::color()));
                failed.push(f.clone());
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::invalid(format!(
            "{} of {} script(s) failed the check",
            failed.len(),
            files.len()
        )))
    }
}
