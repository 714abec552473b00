//! `mllm convert SRC OUT [--type TYPE] [--recipe FILE] [--verify]`: a
//! Hugging Face directory, PyTorch checkpoint or GGUF file to one
//! self-contained `.mllm` file (converter/FORMAT.md). The work is
//! `mllm_runtime::mllm_format::convert`; this file draws the progress
//! line and prints what was done. Ctrl-C stops the conversion cleanly
//! (the partial file is removed; a second Ctrl-C quits at once, and the
//! next conversion to that path removes what is left).

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mllm_runtime::mllm_format::{self, MllmFile};

use crate::{CliError, CliResult};

pub use mllm_runtime::inspect::human_bytes;

/// Converts `src` to `out` at type `ty`, with an optional recipe file;
/// `verify` re-reads the written file and checks every tensor's CRC.
pub fn run(
    src: &str,
    mmproj: Option<&str>,
    out: &str,
    ty: &str,
    recipe: Option<&str>,
    verify: bool,
) -> CliResult<()> {
    let (src_p, out_p) = (Path::new(src), Path::new(out));
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_draw = Instant::now();
    let progress = |done: usize, total: usize| {
        // Redraw at most ~10 times a second, and only on a terminal: a
        // log file gets the summary alone.
        if tty && (done == total || last_draw.elapsed().as_millis() >= 100) {
            last_draw = Instant::now();
            let width = 30;
            let filled = (done * width).checked_div(total).unwrap_or(width);
            eprint!(
                "\rconverting [{}{}] {done}/{total} tensors",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
            let _ = std::io::stderr().flush();
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        // Without a handler SIGINT would end the process before the
        // partial file is removed.
        let _ = ctrlc::set_handler(move || {
            if cancel.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
    }
    let summary = mllm_format::convert_cancellable(
        src_p,
        mmproj.map(Path::new),
        out_p,
        ty,
        recipe.map(Path::new),
        progress,
        &cancel,
    );
    if tty {
        eprintln!();
    }
    let summary = summary.map_err(|e| {
        let state = if out_p.exists() {
            "left unchanged"
        } else {
            "not created"
        };
        CliError::invalid(format!("{e}\n({out} was {state})"))
    })?;
    for p in &summary.removed_stale {
        eprintln!(
            "removed {}, left by an earlier conversion that was killed",
            p.display()
        );
    }
    let file_size = std::fs::metadata(&summary.out)
        .map(|m| m.len())
        .unwrap_or(0);
    eprintln!(
        "wrote {}: {} tensors, {} params, {} ({}) in {:.1}s",
        summary.out.display(),
        summary.tensors,
        summary.params,
        human_bytes(file_size),
        ty,
        started.elapsed().as_secs_f64()
    );
    if !summary.fallbacks.is_empty() {
        eprintln!(
            "{} tensor{} stored in another type than the recipe asked (rows not whole blocks):",
            summary.fallbacks.len(),
            if summary.fallbacks.len() == 1 {
                ""
            } else {
                "s"
            }
        );
        for (name, asked, stored) in summary.fallbacks.iter().take(10) {
            eprintln!("  {name}: {asked} -> {stored}");
        }
        if summary.fallbacks.len() > 10 {
            eprintln!("  ... and {} more", summary.fallbacks.len() - 10);
        }
    }
    if verify {
        let f = MllmFile::open(&summary.out)?;
        f.verify()
            .map_err(|e| CliError::invalid(format!("{}: {e}", summary.out.display())))?;
        eprintln!("verified: every tensor's checksum matches");
    }
    Ok(())
}
