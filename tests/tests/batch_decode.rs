//! A batched decode step (one token for each of several sequences of
//! different lengths, one pass over the weights; what `mllm serve` runs
//! for its busy slots) gives each sequence the logits its own step gives,
//! bit for bit, on float and quantized weights alike: every kernel computes
//! a row the same way whatever else is in the step
//! (`mllm_backends::cpu::ROW_INVARIANT_STEP`). Greedy continuations in a
//! batch equal each sequence's alone, eager or through captured graphs
//! (one graph per row count, each run of rows attending over its own
//! cache).

mod common;

use common::*;
use mllm_runtime::{Runner, Sequence};

/// Prompts of different lengths (so the batch is ragged), from `base`.
fn prompts(base: &[i32]) -> Vec<Vec<u32>> {
    let b: Vec<u32> = base.iter().map(|&t| t as u32).collect();
    let n = b.len();
    vec![
        b.clone(),
        b[..n.saturating_sub(2).max(1)].to_vec(),
        b.iter().rev().copied().collect(),
        b[..1].to_vec(),
    ]
}

fn argmax(v: &[f32]) -> u32 {
    mllm_runtime::generation::argmax(v) as u32
}

/// Greedy-decodes `n` tokens for each prompt, alone and all in one batch;
/// asserts logits within `tol` times the largest |logit| (at least 1; 0:
/// identical) and the same greedy tokens
/// at every step.
fn check(runner: &mut Runner, prompts: &[Vec<u32>], n: usize, tol: f32, case: &str) {
    // Alone: each prompt with its own steps.
    let mut alone = vec![];
    for p in prompts {
        let mut seq = Sequence::new(None);
        let mut logits = seq
            .feed(runner, p)
            .unwrap_or_else(|e| panic!("{case}: {}", e.render(false)));
        let mut rows = vec![];
        for _ in 0..n {
            let t = argmax(&logits);
            rows.push(logits);
            logits = seq
                .step(runner, t)
                .unwrap_or_else(|e| panic!("{case}: {}", e.render(false)));
        }
        alone.push(rows);
    }
    // Together: prompts fed one by one, then batched steps (with captured
    // graphs: a graph per batch size, captured at the first such step).
    let graphs = |r: &Runner| r.compiled.as_ref().map(|c| c.graph_count());
    let before = graphs(runner);
    let mut seqs: Vec<Sequence> = prompts.iter().map(|_| Sequence::new(None)).collect();
    let mut logits: Vec<Vec<f32>> = seqs
        .iter_mut()
        .zip(prompts)
        .map(|(s, p)| {
            s.feed(runner, p)
                .unwrap_or_else(|e| panic!("{case}: {}", e.render(false)))
        })
        .collect();
    for step in 0..n {
        for (b, (l, own)) in logits.iter().zip(&alone).enumerate() {
            let own = &own[step];
            let diff = max_abs(l, own);
            let scale = own.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            assert!(
                diff <= tol * scale,
                "{case}: sequence {b} step {step}: batched logits differ from its own by {diff:e} (largest |logit| {scale})"
            );
            assert_eq!(argmax(l), argmax(own), "{case}: sequence {b} step {step}");
        }
        let tokens: Vec<u32> = logits.iter().map(|l| argmax(l)).collect();
        let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
        logits = Sequence::step_batch(runner, &mut refs, &tokens)
            .unwrap_or_else(|e| panic!("{case}: {}", e.render(false)));
    }
    if let (Some(before), Some(after)) = (before, graphs(runner)) {
        let recurrent = seqs.iter().any(|s| s.has_state());
        assert!(
            recurrent || after > before,
            "{case}: the batched steps captured no graph ({before} before, {after} after): they ran eagerly"
        );
    }
}

fn runner_for(script_name: &str, case: &str) -> Runner {
    let m = load_with(&script(script_name), case);
    m.runner
}

#[test]
fn batched_steps_equal_single_steps_on_every_text_architecture() {
    for (script_name, case) in [
        ("qwen3", "gqa_tied_f32"),
        ("qwen3", "untied_bf16_ropeparams"),
        ("llama", "llama/smollm_like_tied"),
        ("qwen2", "qwen2/gqa_tied_f32"),
        // Sliding windows (5 keys) in a ragged batch; sparse experts whose
        // routing differs per row; NoPE layers.
        ("gemma3", "gemma3/gemma3_f32"),
        ("qwen3_moe", "qwen3_moe/moe_f32"),
        ("smollm3", "smollm3/smollm3_f32"),
        // Recurrent layers: steps one sequence at a time, same results.
        ("qwen3_5", "qwen3_5/qwen3_5_f32"),
    ] {
        let r = reference(case);
        let mut runner = runner_for(script_name, case);
        check(&mut runner, &prompts(&r.input_ids), 5, 0.0, case);
        // Also with the decode steps of single sequences compiled.
        runner.compile_default(256);
        check(
            &mut runner,
            &prompts(&r.input_ids),
            3,
            0.0,
            &format!("{case}, compiled"),
        );
    }
}

/// Steps with several rows per sequence (what a server's speculating
/// slots verify together: each its token and its proposals): every row's
/// logits equal the one-token step's at that position, whatever the other
/// sequences hold, including a rewind (rejected proposals dropped) and
/// more rows than one row-invariant step takes (run as two steps).
fn check_rows(runner: &mut Runner, prompts: &[Vec<u32>], case: &str) {
    // Each sequence's next tokens: its prompt read backwards, repeated.
    let tokens = |b: usize, n: usize| -> Vec<u32> {
        let p = &prompts[b];
        (0..n).map(|j| p[p.len() - 1 - j % p.len()]).collect()
    };
    let rounds: [&[usize]; 3] = [&[3, 1, 5, 2], &[1, 4, 1, 1], &[17, 9, 8, 3]];
    let total: Vec<usize> = (0..prompts.len())
        .map(|b| rounds.iter().map(|r| r[b]).sum())
        .collect();
    // Alone: one token per step.
    let mut alone = vec![];
    for (b, p) in prompts.iter().enumerate() {
        let mut seq = Sequence::new(None);
        ok(seq.feed(runner, p), case);
        let rows: Vec<Vec<f32>> = tokens(b, total[b])
            .into_iter()
            .map(|t| ok(seq.step(runner, t), case))
            .collect();
        alone.push(rows);
    }
    let mut seqs: Vec<Sequence> = prompts.iter().map(|_| Sequence::new(None)).collect();
    for (s, p) in seqs.iter_mut().zip(prompts) {
        ok(s.feed(runner, p), case);
    }
    let mut done = vec![0; prompts.len()];
    for (k, round) in rounds.iter().enumerate() {
        let ids: Vec<Vec<u32>> = (0..prompts.len())
            .map(|b| tokens(b, done[b] + round[b])[done[b]..].to_vec())
            .collect();
        let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
        let got = ok(Sequence::extend_batch(runner, &mut refs, &ids), case);
        for b in 0..prompts.len() {
            for (j, row) in got[b].iter().enumerate() {
                assert_eq!(
                    max_abs(row, &alone[b][done[b] + j]),
                    0.0,
                    "{case}: round {k}, sequence {b}, row {j} of {}",
                    round[b]
                );
            }
            done[b] += round[b];
        }
        if k == 0 {
            // Proposals rejected: sequence 0 keeps 1 of its 3 rows, and
            // the next round computes the rest again.
            let keep = seqs[0].cached.len() - 2;
            ok(seqs[0].truncate(keep), case);
            done[0] -= 2;
        }
    }
}

fn ok<T>(r: mllm_runtime::Result<T>, case: &str) -> T {
    r.unwrap_or_else(|e| panic!("{case}: {}", e.render(false)))
}

#[test]
fn batched_steps_of_several_rows_per_sequence_equal_single_steps() {
    for (script_name, case) in [
        ("qwen3", "gqa_tied_f32"),
        ("llama", "llama/smollm_like_tied"),
        ("gemma3", "gemma3/gemma3_f32"),
        ("qwen3_moe", "qwen3_moe/moe_f32"),
        ("smollm3", "smollm3/smollm3_f32"),
    ] {
        let r = reference(case);
        let mut runner = runner_for(script_name, case);
        runner.compile_default(256);
        check_rows(&mut runner, &prompts(&r.input_ids), case);
    }
}

#[test]
fn batched_steps_equal_single_steps_on_quantized_weights() {
    let case = "quant_scaled_f32";
    let r = reference(case);
    let dir = tempfile::tempdir().expect("tmp");
    for ty in ["q4_0", "q8_0", "q4_k", "w8a8"] {
        let out = dir.path().join(format!("{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let m = mllm_runtime::load(&qwen3_script(), out.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{ty}: {}", e.render(false)));
        let mut runner = m.runner;
        runner.compile_default(256);
        check(
            &mut runner,
            &prompts(&r.input_ids),
            4,
            0.0,
            &format!("{case} as {ty}"),
        );
    }
}

#[test]
fn batched_steps_equal_single_steps_on_the_real_smollm2() {
    let p = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        p.display()
    );
    let files = mllm_runtime::model_files::open(p.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = mllm_runtime::model_files::load_model(&files, None)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut runner = Runner::new(model);
    runner.compile_default(512);
    let prompts: Vec<Vec<u32>> = [
        "The capital of France is",
        "Once upon a time, in a land far away, there lived",
        "1, 2, 3,",
    ]
    .iter()
    .map(|t| tok.encode(t, true).unwrap_or_else(|e| panic!("{e}")))
    .collect();
    check(&mut runner, &prompts, 8, 0.0, "SmolLM2 Q4_1");
}

/// On the OpenCL backend (PoCL in CI): batched steps (device KV caches,
/// per-sequence attention on device tensors) give each sequence its own
/// step's logits. `MLLM_SKIP_OPENCL=1` skips it knowingly.
#[test]
fn batched_steps_equal_single_steps_on_opencl() {
    if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
        eprintln!("MLLM_SKIP_OPENCL is set: batched steps on OpenCL were NOT tested");
        return;
    }
    let case = "gqa_tied_f32";
    let r = reference(case);
    let opts = mllm_runtime::model_files::LoadOptions {
        backend: mllm_runtime::model_files::Backend::OpenCl,
        ..Default::default()
    };
    let path = fixture(case).display().to_string();
    let m = mllm_runtime::load_with(&qwen3_script(), &path, opts)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut runner = m.runner;
    check(
        &mut runner,
        &prompts(&r.input_ids),
        4,
        1e-5,
        "OpenCL gqa_tied_f32",
    );
    // Batched steps replaying captured graphs on the device.
    runner.compile_default(256);
    check(
        &mut runner,
        &prompts(&r.input_ids),
        3,
        1e-5,
        "OpenCL gqa_tied_f32, compiled",
    );
}
