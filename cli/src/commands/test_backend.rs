//! `mllm test-backend [--backend NAME] [--op NAME]`: the op conformance
//! suite (`mllm_runtime::devices::conformance`) on a backend against the CPU, one
//! line per case with its normalized mean squared error, as llama.cpp's
//! `test-backend-ops` reports. Fails when a case fails or an op has no
//! case.

use mllm_runtime::devices::{conformance, op_names};

use crate::{CliError, CliResult};

pub fn run(backend: &str, device: usize, op: Option<&str>, verbose: bool) -> CliResult<()> {
    if let Some(name) = op {
        if !op_names().contains(&name) {
            return Err(CliError::invalid(format!(
                "unknown op `{name}`; ops: {}",
                op_names().join(", ")
            )));
        }
    }
    let b = crate::model_files::backend_by_name(backend, device)?;
    let cases = conformance::cases(op);
    let missing = if op.is_none() {
        conformance::missing_ops(&cases)
    } else {
        vec![]
    };
    let outcomes = conformance::run_all(b.as_ref(), &cases);
    let (mut passed, mut failed, mut host) = (0, 0, 0);
    for o in &outcomes {
        let status = if o.passed() {
            passed += 1;
            "ok"
        } else if o.skipped() {
            host += 1;
            "host"
        } else {
            failed += 1;
            "FAIL"
        };
        if verbose || status != "ok" {
            println!(
                "{status:>9}  {:<60} nmse {:>9.2e} <= {:.0e}  {}",
                o.name,
                o.nmse.unwrap_or(f64::NAN),
                o.max_nmse,
                o.error.as_deref().unwrap_or("")
            );
        }
    }
    println!("\n| op | cases | on the host | worst NMSE |\n|---|---:|---:|---:|");
    for s in conformance::by_op(&outcomes) {
        let worst = s.worst.map_or("-".to_string(), |w| format!("{w:.2e}"));
        println!("| {} | {} | {} | {worst} |", s.op, s.cases, s.host);
    }
    println!(
        "\n{}: {passed} passed, {failed} failed, {host} on the host (no kernel; --fallback cpu runs them on the CPU), of {} cases",
        b.name(),
        outcomes.len()
    );
    if !missing.is_empty() {
        return Err(CliError::invalid(format!(
            "ops without conformance cases: {}",
            missing.join(", ")
        )));
    }
    if failed > 0 {
        return Err(CliError::invalid(format!("{failed} cases failed")));
    }
    Ok(())
}
