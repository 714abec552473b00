//! `mllm bench`: llama-bench-like throughput. `pp N` times a prefill of N
//! tokens on an empty cache; `tg N` times N single-token decode steps from an
//! empty cache. Each test repeats `-r` times; mean and standard deviation of
//! tok/s are reported (text table or `--json`). With `--image-size S`, a
//! vision-language model also prefills each prompt after an S x S image
//! (`imgS+ppN`, tok/s over all prompt tokens) and, beside it, a text-only
//! prompt of the same length: the difference is the vision encoder's time.

use std::time::Instant;

use crate::engine::Engine;
use crate::model_files::{self, load_model};
use crate::{CliError, CliResult};

pub struct BenchArgs {
    pub script: Option<String>,
    pub model: String,
    /// The vision tower of a GGUF `model` (`--mmproj`): llama.cpp's mmproj file.
    pub mmproj: Option<String>,
    pub prompt: Vec<usize>,
    pub gen: Vec<usize>,
    /// Context tokens computed (untimed) before each test, as llama-bench's `-d`.
    pub depth: Vec<usize>,
    pub reps: usize,
    pub threads: usize,
    pub json: bool,
    pub load: model_files::LoadOptions,
    /// Side of a synthetic square image for vision-language models.
    pub image_size: Option<usize>,
    /// Batch sizes for batched decode (`tgN xB`).
    pub batch: Vec<usize>,
    /// Speculative decoding, timed on `prompt_file`'s answer.
    pub spec: crate::SpecFlags,
    pub prompt_file: Option<String>,
}

fn stats(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// The process's peak resident memory (Linux `VmHWM`), when known.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Seconds for `n` tokens of each of `b` sequences: each starts with one
/// token of its own, then `n - 1` batched steps.
fn batched_decode(
    engine: &mut Engine,
    load: &model_files::LoadOptions,
    b: usize,
    n: usize,
    vocab: usize,
    rep: usize,
) -> CliResult<f64> {
    use mllm_runtime::Sequence;
    let mut seqs = vec![];
    for _ in 0..b {
        let mut s = Sequence::new(None);
        s.set_kv_dtype(load.kv.0)?;
        seqs.push(s);
    }
    let toks: Vec<Vec<u32>> = (0..b).map(|i| ids(n, vocab, 3000 + rep * b + i)).collect();
    let t = Instant::now();
    for (s, tk) in seqs.iter_mut().zip(&toks) {
        s.feed(&mut engine.runner, &tk[..1])?;
    }
    for step in 1..n {
        let next: Vec<u32> = toks.iter().map(|tk| tk[step]).collect();
        let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
        Sequence::step_batch(&mut engine.runner, &mut refs, &next)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Deterministic token ids spread over the vocabulary.
fn ids(n: usize, vocab: usize, salt: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 7919 + salt * 104_729 + 13) % vocab.max(1)) as u32)
        .collect()
}

pub fn run(a: BenchArgs) -> CliResult<()> {
    let t0 = Instant::now();
    // Synthetic ids need no tokenizer (see `skip_tokenizer` for its memory).
    let speculating = a.spec.requested();
    if speculating != a.prompt_file.is_some() {
        return Err(CliError::invalid(
            "bench times speculative decoding on a real prompt: give --spec-type (or --model-draft) with --prompt-file FILE",
        ));
    }
    let load = model_files::LoadOptions {
        skip_tokenizer: !speculating,
        ..a.load
    };
    let files = model_files::open_with_mmproj(&a.model, a.mmproj.as_deref(), load)?;
    let model = load_model(&files, a.script.as_deref())?;
    let load_secs = t0.elapsed().as_secs_f64();
    let vocab = files
        .config
        .get("vocab_size")
        .or_else(|| files.config.get("text_config")?.get("vocab_size"))
        .and_then(|v| v.as_u64())
        .unwrap_or(1000) as usize;
    let image = match a.image_size {
        Some(side) => Some((side, crate::images::synthetic(&files, side)?)),
        None => None,
    };
    let params: usize = model
        .params
        .iter()
        .map(|p| p.shape.iter().product::<usize>())
        .sum();
    let bytes: u64 = model
        .params
        .iter()
        .map(|p| match p.dtype {
            Some(d) => d.storage_bytes(&p.shape).unwrap_or(0) as u64,
            None => p.shape.iter().product::<usize>() as u64 * 4,
        })
        .sum();
    let dtypes: std::collections::BTreeSet<String> = model
        .params
        .iter()
        .filter(|p| p.shape.len() == 2)
        .filter_map(|p| p.dtype.map(|d| d.to_string()))
        .collect();
    let mut engine = Engine::new(model, None);
    engine.configure(&a.load)?;
    let mut speculator = a
        .spec
        .speculator(&files, a.load, files.max_context(), &mut engine)?;
    let mut rows = vec![];
    let reps = a.reps.max(1);
    let depths: Vec<usize> = if a.depth.is_empty() {
        vec![0]
    } else {
        a.depth.clone()
    };
    let at = |name: String, d: usize| {
        if d > 0 {
            format!("{name} @ d{d}")
        } else {
            name
        }
    };
    for &d in &depths {
        for &n in a.prompt.iter().filter(|&&n| n > 0) {
            let mut rates = vec![];
            // One warm-up run, not counted.
            for rep in 0..=reps {
                engine.reset();
                let mut all = ids(d, vocab, 5000 + rep);
                if d > 0 {
                    engine.feed(&all)?;
                }
                all.extend(ids(n, vocab, rep));
                let t = Instant::now();
                engine.feed(&all)?;
                if rep > 0 {
                    rates.push(n as f64 / t.elapsed().as_secs_f64());
                }
            }
            rows.push((at(format!("pp{n}"), d), rates));
        }
    }
    if let Some((side, (imgs, spec))) = &image {
        let count = imgs.tokens(0, spec);
        for &n in a.prompt.iter().filter(|&&n| n > 0) {
            let mut prompt: Vec<u32> = spec.vision_start.iter().map(|&t| t as u32).collect();
            prompt.extend(std::iter::repeat_n(spec.image as u32, count));
            prompt.extend(spec.vision_end.iter().map(|&t| t as u32));
            let text_ids: Vec<u32> = ids(n, vocab, 7)
                .into_iter()
                .map(|t| if t == spec.image as u32 { t + 1 } else { t })
                .collect();
            prompt.extend(text_ids);
            let total = prompt.len();
            let (mut with_image, mut text_only) = (vec![], vec![]);
            for rep in 0..=reps {
                engine.reset();
                let t = Instant::now();
                engine.feed_images(&prompt, imgs, spec)?;
                let ti = t.elapsed().as_secs_f64();
                engine.reset();
                let t = Instant::now();
                engine.feed(&ids(total, vocab, 2000 + rep))?;
                let tt = t.elapsed().as_secs_f64();
                if rep > 0 {
                    with_image.push(ti);
                    text_only.push(tt);
                }
            }
            let (mi, _) = stats(&with_image);
            let (mt, _) = stats(&text_only);
            eprintln!(
                "image {side}x{side} ({count} tokens) + {n} text tokens: prefill {mi:.2} s, a text-only prompt of {total} tokens {mt:.2} s: vision encoder ~{:.2} s",
                mi - mt
            );
            rows.push((
                format!("img{side}+pp{n}"),
                with_image.iter().map(|s| total as f64 / s).collect(),
            ));
            rows.push((
                format!("pp{total}"),
                text_only.iter().map(|s| total as f64 / s).collect(),
            ));
        }
    }
    for &d in &depths {
        for &n in a.gen.iter().filter(|&&n| n > 0) {
            let mut rates = vec![];
            for rep in 0..=reps {
                engine.reset();
                let toks = ids(n, vocab, 1000 + rep);
                let t = if d > 0 {
                    engine.feed(&ids(d, vocab, 6000 + rep))?;
                    let t = Instant::now();
                    for &tok in &toks {
                        engine.step(tok)?;
                    }
                    t
                } else {
                    let t = Instant::now();
                    engine.feed(&toks[..1])?;
                    for &tok in &toks[1..] {
                        engine.step(tok)?;
                    }
                    t
                };
                if rep > 0 {
                    rates.push(n as f64 / t.elapsed().as_secs_f64());
                }
            }
            rows.push((at(format!("tg{n}"), d), rates));
        }
    }
    for &b in a.batch.iter().filter(|&&b| b > 1) {
        for &n in a.gen.iter().filter(|&&n| n > 0) {
            let mut rates = vec![];
            for rep in 0..=reps {
                let t = batched_decode(&mut engine, &a.load, b, n, vocab, rep)?;
                if rep > 0 {
                    rates.push((b * n) as f64 / t);
                }
            }
            rows.push((format!("tg{n} x{b}"), rates));
        }
    }
    let spec = match (&mut speculator, &a.prompt_file) {
        (Some(s), Some(f)) => {
            let b = super::bench_spec::run(&mut engine, &files, s, f, &a.gen, reps)?;
            rows.extend(b.rows.iter().cloned());
            Some(b)
        }
        _ => None,
    };
    let host = host_ops_per_step(&mut engine, vocab)?;
    let host_total: u64 = host.iter().map(|(_, n)| n).sum();
    let peak_rss = peak_rss_bytes();
    let name = std::path::Path::new(&a.model)
        .file_name()
        .map_or(a.model.clone(), |f| f.to_string_lossy().into_owned());
    let dt = dtypes.into_iter().collect::<Vec<_>>().join("+");
    if a.json {
        let results: Vec<serde_json::Value> = rows
            .iter()
            .map(|(test, r)| {
                let (m, s) = stats(r);
                serde_json::json!({ "test": test, "avg_ts": m, "stddev_ts": s, "samples_ts": r })
            })
            .collect();
        let out = serde_json::json!({
            "model": name, "weights_dtype": dt, "params": params, "bytes": bytes, "backend": engine.runner.model.backend.name(), "mode": engine.runner.mode(),
            "threads": a.threads, "repetitions": reps, "load_seconds": load_secs, "results": results,
            "peak_rss_bytes": peak_rss, "kv_type": a.load.kv.0.name(),
            "host_ops_per_step": host_total,
            "host_ops": host.iter().map(|(op, n)| serde_json::json!({ "op": op, "count": n })).collect::<Vec<_>>(),
            "speculative": spec.as_ref().map(|b| serde_json::json!({
                "spec_type": b.kind, "prompt_tokens": b.prompt_tokens,
                "results": b.stats.iter().map(|(n, st)| serde_json::json!({
                    "n_gen": n, "steps": st.steps, "proposed": st.proposed, "accepted": st.accepted,
                    "acceptance": st.acceptance(), "tokens_per_step": st.tokens_per_step(),
                    "draft_steps": st.draft_steps,
                })).collect::<Vec<_>>(),
            })),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| CliError::invalid(e.to_string()))?
        );
        return Ok(());
    }
    let backend = format!(
        "{} ({})",
        engine.runner.model.backend.name(),
        engine.runner.mode()
    );
    println!("| model | weights | size | params | backend | threads | test | t/s |");
    println!("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |");
    for (test, r) in &rows {
        let (m, s) = stats(r);
        println!(
            "| {name} | {dt} | {:.1} MiB | {:.1} M | {backend} | {} | {test} | {m:.2} ± {s:.2} |",
            bytes as f64 / (1 << 20) as f64,
            params as f64 / 1e6,
            a.threads
        );
    }
    if let Some(b) = &spec {
        println!(
            "\nspeculation ({}, prompt of {} tokens, greedy, answers identical to plain decoding):",
            b.kind, b.prompt_tokens
        );
        for (n, st) in &b.stats {
            let rate = |name: String| {
                rows.iter()
                    .find(|(t, _)| *t == name)
                    .map_or(0.0, |(_, r)| stats(r).0)
            };
            let (plain, fast) = (
                rate(format!("tg{n} plain")),
                rate(format!("tg{n} {}", b.kind)),
            );
            println!(
                "  tg{n}: acceptance {:.1}% ({} of {} proposed), {:.2} tokens per step{}, {:.2}x plain decode",
                100.0 * st.acceptance(),
                st.accepted,
                st.proposed,
                st.tokens_per_step(),
                st.draft_summary(),
                if plain > 0.0 { fast / plain } else { 0.0 }
            );
        }
    }
    if let Some(b) = peak_rss {
        println!("\npeak RSS {:.1} MiB", b as f64 / (1 << 20) as f64);
    }
    if host_total > 0 {
        let list: Vec<String> = host.iter().map(|(op, n)| format!("{op} {n}")).collect();
        println!(
            "\non the host: {host_total} ops of each decode step have no {} kernel and ran on the CPU ({})",
            engine.runner.model.backend.name(),
            list.join(", ")
        );
    }
    Ok(())
}

/// The ops of one decode step that ran on the CPU in place of the
/// backend's kernels (`--fallback cpu`), by op name.
fn host_ops_per_step(engine: &mut Engine, vocab: usize) -> CliResult<Vec<(&'static str, u64)>> {
    engine.reset();
    engine.feed(&ids(4, vocab, 11))?;
    let before = engine.runner.model.backend.host_ops();
    engine.step(ids(1, vocab, 12)[0])?;
    let after = engine.runner.model.backend.host_ops();
    let was = |op: &str| before.iter().find(|(o, _)| *o == op).map_or(0, |(_, n)| *n);
    Ok(after
        .into_iter()
        .map(|(op, n)| (op, n - was(op)))
        .filter(|(_, n)| *n > 0)
        .collect())
}
