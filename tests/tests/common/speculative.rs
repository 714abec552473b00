//! Helpers of the speculative-decoding tests: a fixture's runner and
//! prompt, greedy rows one token at a time, and whole answers with or
//! without a proposer.

use std::sync::atomic::AtomicBool;

use super::*;
use mllm_runtime::generation::{Detokenize, Generation, GenerationConfig, SamplerConfig};
use mllm_runtime::speculative::{Proposer, SpecConfig, SpecStats};
use mllm_runtime::{Engine, GenRequest, Runner, Sequence, Speculation};

pub fn runner_for(script_name: &str, case: &str) -> Runner {
    load_with(&script(script_name), case).runner
}

pub fn argmax(v: &[f32]) -> u32 {
    mllm_runtime::generation::argmax(v) as u32
}

pub fn render(e: mllm_runtime::Error) -> String {
    e.render(false)
}

/// Greedy tokens and the logits before each, one step at a time.
pub fn one_at_a_time(runner: &mut Runner, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut seq = Sequence::new(None);
    let mut logits = seq
        .feed(runner, prompt)
        .unwrap_or_else(|e| panic!("{}", render(e)));
    let (mut toks, mut rows) = (vec![], vec![]);
    for _ in 0..n {
        let t = argmax(&logits);
        toks.push(t);
        rows.push(logits);
        logits = seq
            .step(runner, t)
            .unwrap_or_else(|e| panic!("{}", render(e)));
    }
    rows.push(logits);
    (toks, rows)
}

pub fn prompt_of(case: &str) -> Vec<u32> {
    reference(case)
        .input_ids
        .iter()
        .map(|&t| t as u32)
        .collect()
}

/// Token ids as text: the answers compare as strings too.
pub struct Ids;
impl Detokenize for Ids {
    fn step(&mut self, token: u32) -> Result<String, String> {
        Ok(format!("{token} "))
    }
    fn flush(&mut self) -> String {
        String::new()
    }
}

pub fn config(temperature: f32, seed: u64, n: usize) -> GenerationConfig {
    GenerationConfig {
        sampler: SamplerConfig {
            temperature,
            seed,
            ..SamplerConfig::DEFAULT
        },
        max_new_tokens: n,
        ..Default::default()
    }
}

/// The answer's tokens and text, with `proposer` or plainly.
pub fn answer(
    runner: Runner,
    prompt: &[u32],
    cfg: GenerationConfig,
    proposer: Option<&mut dyn Proposer>,
    spec_cfg: SpecConfig,
    stats: &mut SpecStats,
) -> (Vec<u32>, String, Runner) {
    let mut engine = Engine {
        runner,
        seq: Sequence::new(None),
    };
    let mut gen = Generation::new(cfg, Box::new(Ids));
    let mut shown = String::new();
    let spec = proposer.map(|p| Speculation {
        proposer: p,
        config: spec_cfg,
        stats,
    });
    let st = mllm_runtime::generate_with(
        &mut engine,
        &mut gen,
        GenRequest {
            prompt,
            images: None,
        },
        spec,
        &mut |s| shown.push_str(s),
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("{}", render(e)));
    assert_eq!(shown, st.text);
    (st.generated, st.text, engine.runner)
}

/// Softmax of `logits / temp` in f64.
pub fn softmax(logits: &[f32], temp: f64) -> Vec<f64> {
    let mx = logits.iter().fold(f32::MIN, |m, &x| m.max(x)) as f64;
    let e: Vec<f64> = logits
        .iter()
        .map(|&x| ((x as f64 - mx) / temp).exp())
        .collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}
