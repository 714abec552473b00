//! `mllm devices`: the backends of this build and their devices, numbered
//! as `--device N` counts them, with what matters for choosing one.

use crate::CliResult;

pub fn run() -> CliResult<()> {
    println!("cpu");
    println!(
        "  0: {} threads, kernels for {}",
        rayon::current_num_threads(),
        mllm_runtime::devices::cpu_kernels()
    );
    opencl()
}

#[cfg(feature = "opencl")]
fn opencl() -> CliResult<()> {
    println!("opencl");
    let list =
        mllm_runtime::devices::opencl_devices().map_err(|e| e.context("no OpenCL device"))?;
    for d in list {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        println!("  {}: {} ({})", d.index, d.name, d.platform);
        println!(
            "     {}; {} compute units; {:.1} GiB memory, {:.1} GiB largest buffer; work-groups up to {}; fp16 arithmetic: {}",
            d.version,
            d.compute_units,
            gib(d.global_mem),
            gib(d.max_alloc),
            d.max_work_group,
            if d.fp16 { "yes" } else { "no" }
        );
        println!(
            "     extensions: {}",
            d.extensions
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(())
}

#[cfg(not(feature = "opencl"))]
fn opencl() -> CliResult<()> {
    println!("opencl\n  (not in this build: built without the `opencl` feature)");
    Ok(())
}
