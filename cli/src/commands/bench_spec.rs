//! `mllm bench --spec-type TYPE --prompt-file F -n N`: decode speed with
//! and without speculative decoding on one real prompt (llama-bench cannot
//! time this). Each repetition answers the prompt greedily for exactly N
//! tokens (end-of-sequence ignored) from an empty cache, once plainly and
//! once speculating; the prompt is untimed. Rows `tgN plain` and
//! `tgN TYPE` are decode tok/s; below the table, per type: acceptance
//! (accepted / proposed tokens), tokens per target step, and the speed-up.
//! The two answers must be identical (speculation is exact), or the bench
//! fails.

use std::sync::atomic::AtomicBool;

use mllm_runtime::generation::{Generation, SamplerConfig};
use mllm_runtime::model_files::ModelFiles;
use mllm_runtime::speculative::{SpecStats, Speculator};

use crate::engine::{generate_with, Engine, GenRequest};
use crate::prompt::{self, Message};
use crate::{CliError, CliResult};

/// What the speculative rows measured, for the table and `--json`.
pub struct SpecBench {
    pub rows: Vec<(String, Vec<f64>)>,
    /// Per `n`: the speculation's totals over the timed repetitions.
    pub stats: Vec<(usize, SpecStats)>,
    pub kind: &'static str,
    pub prompt_tokens: usize,
}

/// The prompt file's ids, through the chat template when the model has one.
fn prompt_ids(files: &ModelFiles, path: &str) -> CliResult<Vec<u32>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::invalid(format!("cannot read --prompt-file {path}: {e}")))?;
    let tok = files.tokenizer()?;
    if files.chat_template.is_none() {
        return Ok(tok.encode(&text, true)?);
    }
    let rendered = prompt::render(files, &[Message::new("user", &text)], true, Some(false))?;
    Ok(tok.encode(&rendered, false)?)
}

/// Decode seconds and tokens of one greedy answer of `n` tokens.
fn answer(
    engine: &mut Engine,
    files: &ModelFiles,
    ids: &[u32],
    n: usize,
    spec: Option<&mut Speculator>,
) -> CliResult<(f64, Vec<u32>)> {
    engine.reset();
    let greedy = SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::DEFAULT
    };
    let mut cfg = files.generation_config(greedy, n, vec![]);
    cfg.ignore_eos = true;
    let mut gen = Generation::new(cfg, Box::new(files.tokenizer()?.stream_decoder(true)));
    let st = generate_with(
        engine,
        &mut gen,
        GenRequest {
            prompt: ids,
            images: None,
        },
        spec.map(|s| s.speculation()),
        &mut |_| {},
        &AtomicBool::new(false),
    )?;
    Ok((st.gen_secs, st.generated))
}

pub fn run(
    engine: &mut Engine,
    files: &ModelFiles,
    spec: &mut Speculator,
    prompt_file: &str,
    gens: &[usize],
    reps: usize,
) -> CliResult<SpecBench> {
    let ids = prompt_ids(files, prompt_file)?;
    let kind = spec.proposer.kind().name();
    let mut out = SpecBench {
        rows: vec![],
        stats: vec![],
        kind,
        prompt_tokens: ids.len(),
    };
    for &n in gens.iter().filter(|&&n| n > 0) {
        let (mut plain, mut fast) = (vec![], vec![]);
        let mut total = SpecStats::default();
        // One warm-up repetition, not counted.
        for rep in 0..=reps {
            let (t_plain, want) = answer(engine, files, &ids, n, None)?;
            spec.stats = SpecStats::default();
            spec.proposer.reset();
            let (t_spec, got) = answer(engine, files, &ids, n, Some(spec))?;
            if got != want {
                let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
                return Err(CliError::generate(format!(
                    "speculation changed the answer at token {at} (a bug: the answer must be the plain one; please report it with the model and prompt)"
                )));
            }
            if rep > 0 {
                plain.push(want.len() as f64 / t_plain);
                fast.push(got.len() as f64 / t_spec);
                total.add(&spec.stats);
            }
        }
        out.rows.push((format!("tg{n} plain"), plain));
        out.rows.push((format!("tg{n} {kind}"), fast));
        out.stats.push((n, total));
    }
    Ok(out)
}
