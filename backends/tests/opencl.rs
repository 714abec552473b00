//! The OpenCL backend against the CPU, op by op (the conformance suite of
//! `mllm_backends::conformance`, as `mllm test-backend --backend opencl`
//! runs it). Needs an OpenCL device: CI installs PoCL (a CPU device). The
//! only way to skip is to say so: `MLLM_SKIP_OPENCL=1`, which prints that
//! nothing was tested.

#![cfg(feature = "opencl")]

use mllm_backends::conformance::{self, Outcome};
use mllm_backends::opencl::OpenClBackend;
use mllm_backends::Backend;

fn backend() -> Option<OpenClBackend> {
    if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
        eprintln!("MLLM_SKIP_OPENCL is set: the OpenCL backend was NOT tested");
        return None;
    }
    match OpenClBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => panic!("{e} (set MLLM_SKIP_OPENCL=1 to skip these tests knowingly)"),
    }
}

fn report(outcomes: &[Outcome]) -> Vec<String> {
    let mut failed = vec![];
    for o in outcomes {
        let status = if o.passed() {
            "ok"
        } else if o.skipped() {
            "host"
        } else {
            "FAIL"
        };
        eprintln!(
            "{status:>9}  {:<14} {:<60} nmse {:>10.3e} (max {:.0e}) {}",
            o.op,
            o.name,
            o.nmse.unwrap_or(f64::NAN),
            o.max_nmse,
            o.error.as_deref().unwrap_or("")
        );
        if !o.passed() && !o.skipped() {
            failed.push(format!(
                "{}: {}",
                o.name,
                o.error.as_deref().unwrap_or(status)
            ));
        }
    }
    failed
}

#[test]
fn every_op_has_cases() {
    let missing = conformance::missing_ops(&conformance::cases(None));
    assert!(
        missing.is_empty(),
        "ops without conformance cases: {missing:?}"
    );
}

#[test]
fn every_case_matches_the_cpu() {
    let Some(cl) = backend() else { return };
    let cases = conformance::cases(None);
    let outcomes = conformance::run_all(&cl, &cases);
    let failed = report(&outcomes);
    // The ops OpenCL has no kernels for: `supports` says so (the executor's
    // fallback then runs them on the CPU), and nothing else is missing.
    let host: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .filter(|o| o.skipped())
        .map(|o| o.op)
        .collect();
    assert_eq!(
        host.into_iter().collect::<Vec<_>>(),
        [
            "cached_sdpa",
            "causal_conv1d",
            "gated_delta_rule",
            "gather",
            "moe_linear",
            "sdpa",
            "topk"
        ],
        "ops without an OpenCL kernel"
    );
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        outcomes.len(),
        failed.join("\n")
    );
}

#[test]
fn device_tensors_round_trip_and_refuse_host_reads() {
    let Some(cl) = backend() else { return };
    let mut g = conformance::Gen::new(7);
    for dtype in ["f32", "f16", "q4_0", "q8_0"] {
        let dt = mllm_backends::DType::parse(dtype).expect("dtype");
        let t = g.typed(dt, &[3, 64], 1.0);
        let d = cl.upload(t.clone()).expect("upload");
        assert!(
            d.f32s().is_err() && d.floats().is_err(),
            "host read of a device tensor"
        );
        let back = cl.download(&d).expect("download");
        assert_eq!(
            back.to_f32_vec().expect("f32"),
            t.to_f32_vec().expect("f32"),
            "{dtype}"
        );
        // A row view downloads just its rows.
        let row = d.narrow0(1, 2).expect("view");
        let back = cl.download(&row).expect("download");
        assert_eq!(
            back.to_f32_vec().expect("f32"),
            t.narrow0(1, 2).expect("v").to_f32_vec().expect("f32")
        );
    }
}

#[test]
fn every_program_builds() {
    let Some(cl) = backend() else { return };
    let t = std::time::Instant::now();
    cl.warm_up().expect("every .cl program builds");
    eprintln!("built every program in {:?}", t.elapsed());
}
