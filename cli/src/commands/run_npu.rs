//! `mllm run --backend qnn|ascend --model EXPORT_DIR --prompt TEXT`: one
//! answer from exported static graphs on an NPU (`mllm_runtime::npu`),
//! streamed as `run` streams it. EXPORT_DIR holds the graphs (`decode/`,
//! optional `prefill/`, the vendor's compiled files) and the checkpoint's
//! tokenizer files (`tokenizer.json`, `tokenizer_config.json` for the chat
//! template, `generation_config.json` for EOS ids), copied beside them.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use mllm_runtime::npu::{self, Vendor};

use super::run::RunArgs;
use crate::model_files;
use crate::{CliError, CliResult};

pub fn run(a: &RunArgs, vendor: Vendor) -> CliResult<()> {
    let backend = a.load.backend.name();
    if !a.images.is_empty() || !a.videos.is_empty() || a.mmproj.is_some() {
        return Err(CliError::invalid(format!("--backend {backend} runs exported text graphs; images and videos need --backend cpu or opencl"
        )));
    }
    if a.script.is_some() {
        return Err(CliError::invalid(format!("--backend {backend} runs the graphs exported from a script; the script was chosen at `mllm export`"
        )));
    }
    let dir = Path::new(&a.model);
    if !dir.join("tokenizer.json").is_file() {
        return Err(CliError::tokenizer(format!("--backend {backend} takes --model EXPORT_DIR holding the exported graphs and the checkpoint's tokenizer.json (with tokenizer_config.json and generation_config.json); {} has no tokenizer.json (docs/npu_runtime.md)",
            dir.display()
        )));
    }
    let t0 = Instant::now();
    let files = model_files::open_without_weights(&a.model)?;
    let tok = files.tokenizer()?;
    let mut host = npu::open(dir, vendor, a.load.device)?;
    let load_secs = t0.elapsed().as_secs_f64();
    let ids = super::run::text_prompt_ids(&files, tok, a)?;
    let mut gen = a.sampling.generation(&files, tok, 0)?;
    let stdout = std::io::stdout();
    let stats = npu::generate(
        &mut host,
        &mut gen,
        &ids,
        &mut |s| {
            let mut lock = stdout.lock();
            let _ = lock.write_all(s.as_bytes());
            let _ = lock.flush();
        },
        &AtomicBool::new(false),
    )?;
    println!();
    eprintln!("{}", stats.summary(Some(load_secs)));
    Ok(())
}
