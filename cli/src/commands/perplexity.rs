//! `mllm perplexity --model PATH --file TEXT [-c N] [--chunks N]
//! [--kl-divergence-base FILE [--kl-divergence]] [--json]`: the quality
//! number llama.cpp users compare quantizations by, computed as
//! llama-perplexity computes it (`mllm_runtime::perplexity`). Progress
//! (`[chunk]ppl,` as llama-perplexity prints it) goes to stderr; the last
//! line is `Final estimate: PPL = X +/- Y`.

use mllm_runtime::model_files;
use mllm_runtime::perplexity::{chunk_logits, log_softmax, Chunks, KlBase, Kld, Nll};
use mllm_runtime::Runner;
use serde_json::json;

use crate::{CliError, CliResult};

pub struct PplArgs {
    pub model: String,
    pub script: Option<String>,
    pub file: Option<String>,
    pub ctx: usize,
    pub chunks: Option<usize>,
    pub kl_base: Option<String>,
    pub kl: bool,
    pub json: bool,
    pub load: model_files::LoadOptions,
}

pub fn run(args: PplArgs) -> CliResult<()> {
    let files = model_files::open_with(&args.model, args.load)?;
    let tok = files.tokenizer()?;
    let mut base = match (&args.kl_base, args.kl) {
        (Some(path), true) => Some(KlBase::read(path)?),
        _ => None,
    };
    let chunks = match &base {
        // The base file's tokens and context: both runs score the same rows.
        Some(b) => Chunks {
            tokens: b.tokens.clone(),
            ctx: b.ctx,
            count: args.chunks.map_or(b.chunks, |c| c.min(b.chunks)),
            bos: None,
        },
        None => {
            let path = args.file.as_deref().unwrap_or("-");
            let text = if path == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(path)
            }
            .map_err(|e| CliError::invalid(format!("cannot read {path}: {e}")))?;
            Chunks::new(tok, &text, args.ctx, args.chunks)?
        }
    };
    let model = model_files::load_model(&files, args.script.as_deref())?;
    let mut runner = Runner::new(model);
    mllm_runtime::engine::configure_runner(&mut runner, &args.load);
    let mut writer = None;
    let mut nll = Nll::default();
    let mut kld = Kld::default();
    eprintln!(
        "perplexity: {} tokens, {} chunks of {} ({} scored tokens each)",
        chunks.tokens.len(),
        chunks.count,
        chunks.ctx,
        chunks.scored().len()
    );
    let t0 = std::time::Instant::now();
    for i in 0..chunks.count {
        let (logits, vocab) = chunk_logits(&mut runner, &chunks, i)?;
        if let Some(b) = &base {
            if b.vocab != vocab {
                return Err(CliError::invalid(format!("the base file has a vocabulary of {} and this model {vocab}: KL divergence compares models of one vocabulary",
                    b.vocab
                )));
            }
        }
        if let (Some(path), false, None) = (&args.kl_base, args.kl, &writer) {
            writer = Some(KlBase::writer(path, &chunks, vocab)?);
        }
        for (r, j) in chunks.scored().enumerate() {
            let lp = log_softmax(&logits[r * vocab..(r + 1) * vocab]);
            let next = chunks.next(i, j);
            let p = lp.get(next as usize).copied().ok_or_else(|| {
                CliError::invalid(format!(
                    "token {next} of the text lies outside the model's {vocab} logits"
                ))
            })?;
            nll.add(-(p as f64));
            if let Some(w) = writer.as_mut() {
                KlBase::write_row(w, &lp)?;
            }
            if let Some(b) = base.as_mut() {
                kld.add(&b.next_row()?, &lp, next);
            }
        }
        if i == 0 {
            let secs = t0.elapsed().as_secs_f64();
            eprintln!(
                "perplexity: {secs:.2} seconds per pass - ETA {:.2} minutes",
                secs * chunks.count as f64 / 60.0
            );
        }
        eprint!("[{}]{:.4},", i + 1, nll.ppl());
    }
    eprintln!();
    if let Some(mut w) = writer {
        use std::io::Write;
        w.flush()
            .map_err(|e| CliError::invalid(format!("writing the KL base: {e}")))?;
    }
    let (ppl, err) = nll.estimate();
    let kl = base.is_some().then(|| {
        let (mean, mean_err) = kld.mean();
        (mean, mean_err, kld.same_top(), kld.rms_dp())
    });
    if args.json {
        let mut v =
            json!({"ppl": ppl, "ppl_stderr": err, "chunks": chunks.count, "ctx": chunks.ctx});
        if let Some((mean, mean_err, same, rms)) = kl {
            v["kld"] = json!(mean);
            v["kld_stderr"] = json!(mean_err);
            v["same_top"] = json!(same);
            v["rms_dp"] = json!(rms);
        }
        println!("{v}");
        return Ok(());
    }
    if let Some((mean, mean_err, same, rms)) = kl {
        println!("Mean    KLD: {mean:10.6} ± {mean_err:10.6}");
        println!("Same top p : {:6.3} %", 100.0 * same);
        println!("RMS Δp     : {:6.3} %", 100.0 * rms);
    }
    println!("Final estimate: PPL = {ppl:.4} +/- {err:.5}");
    Ok(())
}
