//! Speculative decoding is exact: a verification step of k + 1 rows gives
//! every row the bits one-token steps give it, on every text architecture
//! (float and quantized weights, eager and captured steps), and answers
//! with proposals (n-gram lookup, proposers that are always right or
//! always wrong; a draft model's in `speculative_draft.rs`) equal plain
//! decoding's token for token, greedy and sampled; sampled answers fit
//! the model's own distribution (a chi-square test). Recurrent models
//! (Qwen3.5's Gated DeltaNet) go back to a checkpoint of their state where
//! proposals are rejected.

mod common;

use common::speculative::*;
use common::*;
use mllm_runtime::generation::{GenerationConfig, SamplerConfig};
use mllm_runtime::speculative::{NgramLookup, Proposer, SpecConfig, SpecStats, SpecType};
use mllm_runtime::{Runner, Sequence};

/// Text architectures (with sliding windows, experts, NoPE layers).
const ARCHS: &[(&str, &str)] = &[
    ("qwen3", "gqa_tied_f32"),
    ("qwen3", "untied_bf16_ropeparams"),
    ("llama", "llama/smollm_like_tied"),
    ("qwen2", "qwen2/gqa_tied_f32"),
    ("gemma3", "gemma3/gemma3_f32"),
    ("qwen3_moe", "qwen3_moe/moe_f32"),
    ("smollm3", "smollm3/smollm3_f32"),
    // Recurrent layers: a rejection restores a checkpoint of the state.
    ("qwen3_5", "qwen3_5/qwen3_5_f32"),
    ("qwen3_5_moe", "qwen3_5_moe/moe_f32"),
];

/// After the prompt, `extend_rows` over the greedy tokens (in steps of
/// several rows, rewound and redone in other cuts) gives each row the
/// one-step logits bit for bit.
fn check_rows(runner: &mut Runner, prompt: &[u32], case: &str) {
    let n = 12;
    let (toks, rows) = one_at_a_time(runner, prompt, n);
    for cut in [n, 5, 3, 1] {
        let mut seq = Sequence::new(None);
        seq.feed(runner, prompt)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        let mut at = 0;
        while at < n {
            let to = (at + cut).min(n);
            let (from, checkpoint) = (at, seq.checkpoint());
            let got = seq
                .extend_rows(runner, &toks[at..to])
                .unwrap_or_else(|e| panic!("{case}: {}", render(e)));
            for (r, row) in got.iter().enumerate() {
                let want = &rows[at + r + 1];
                assert_finite(case, want);
                let same = row.len() == want.len()
                    && row
                        .iter()
                        .zip(want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{case}: cut {cut}: row {} of a {}-row step differs from its one-token step by {:e}",
                    at + r,
                    to - at,
                    max_abs(row, want)
                );
            }
            at = to;
            // Take back the last row and compute it again in the next
            // step, as a rejected proposal is.
            if at < n && cut > 1 {
                match checkpoint {
                    // A recurrent state: back to before the step, and the
                    // rows kept computed again.
                    Some(cp) => {
                        seq.restore(cp).expect("restore");
                        seq.extend_rows(runner, &toks[from..at - 1]).expect("again");
                    }
                    None => seq.truncate(prompt.len() + at - 1).expect("truncate"),
                }
                at -= 1;
            }
        }
    }
}

#[test]
fn verification_rows_equal_single_steps_on_every_text_architecture() {
    for &(script_name, case) in ARCHS {
        let prompt = prompt_of(case);
        let mut runner = runner_for(script_name, case);
        check_rows(&mut runner, &prompt, case);
        runner.compile_default(256);
        check_rows(&mut runner, &prompt, &format!("{case}, compiled"));
    }
}

#[test]
fn verification_rows_equal_single_steps_on_quantized_weights() {
    let case = "quant_scaled_f32";
    let prompt = prompt_of(case);
    let dir = tempfile::tempdir().expect("tmp");
    for ty in [
        "q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "w8a8", "w4a16", "f16", "bf16",
    ] {
        let out = dir.path().join(format!("{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let m = mllm_runtime::load(&qwen3_script(), out.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{ty}: {}", render(e)));
        let mut runner = m.runner;
        runner.compile_default(256);
        check_rows(&mut runner, &prompt, &format!("{case} as {ty}"));
    }
}

/// Proposes what a fixed answer says comes next (always right when it is
/// the plain answer), or one more than that (always wrong).
struct Oracle {
    answer: Vec<u32>,
    prompt_len: usize,
    wrong: bool,
}
impl Proposer for Oracle {
    fn propose(
        &mut self,
        history: &[u32],
        max: usize,
        _: &SpecConfig,
    ) -> mllm_runtime::Result<Vec<u32>> {
        let done = history.len() - self.prompt_len;
        let next = self.answer.iter().skip(done).take(max);
        Ok(next
            .map(|&t| {
                if self.wrong {
                    t.checked_sub(1).unwrap_or(1)
                } else {
                    t
                }
            })
            .collect())
    }
    fn kind(&self) -> SpecType {
        SpecType::Ngram
    }
}

#[test]
fn answers_with_proposals_equal_plain_answers() {
    for &(script_name, case) in ARCHS {
        let prompt = prompt_of(case);
        let mut runner = runner_for(script_name, case);
        runner.compile_default(256);
        for (temp, seed) in [(0.0, 0), (0.9, 7), (1.3, 12345)] {
            let n = 40;
            let what = format!("{case} temp {temp} seed {seed}");
            let mut none = SpecStats::default();
            let (plain, text, r) = answer(
                runner,
                &prompt,
                config(temp, seed, n),
                None,
                SpecConfig::DEFAULT,
                &mut none,
            );
            runner = r;
            assert_eq!(
                plain.len(),
                n,
                "{what}: the fixture's EOS ended the answer early"
            );
            let proposers: Vec<(&str, Box<dyn Proposer>)> = vec![
                ("ngram", Box::new(NgramLookup::default())),
                (
                    "right",
                    Box::new(Oracle {
                        answer: plain.clone(),
                        prompt_len: prompt.len(),
                        wrong: false,
                    }),
                ),
                (
                    "wrong",
                    Box::new(Oracle {
                        answer: plain.clone(),
                        prompt_len: prompt.len(),
                        wrong: true,
                    }),
                ),
            ];
            for (name, mut p) in proposers {
                let mut stats = SpecStats::default();
                let (got, got_text, r) = answer(
                    runner,
                    &prompt,
                    config(temp, seed, n),
                    Some(p.as_mut()),
                    SpecConfig::DEFAULT,
                    &mut stats,
                );
                runner = r;
                assert_eq!(got, plain, "{what}: {name} changed the answer");
                assert_eq!(got_text, text, "{what}: {name} changed the text");
                match name {
                    // Every proposal right: 17 tokens a step.
                    "right" => {
                        assert_eq!(stats.accepted, stats.proposed, "{what}: {stats:?}");
                        assert!(stats.steps <= n.div_ceil(17) + 1, "{what}: {stats:?}");
                    }
                    "wrong" => {
                        assert_eq!(stats.accepted, 0, "{what}: {stats:?}");
                        assert!(stats.proposed > 0, "{what}: {stats:?}");
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The chi-square statistic's value that a fit exceeds with probability
/// 0.001 at `df` degrees of freedom (Wilson-Hilferty).
fn chi2_critical(df: f64) -> f64 {
    let z = 3.09;
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Sampled answers with proposals follow the target's distribution: the
/// first two tokens of many seeded answers (temperature 1, no top-k/p
/// cut), with an oracle proposing the greedy continuation (accepted
/// exactly when the sample agrees), fit the model's own joint
/// probabilities p(t1) p(t2 | t1) by a chi-square test at 0.001. A
/// verifier that kept proposals too often (or too rarely) fails it.
#[test]
fn sampled_answers_with_proposals_follow_the_target_distribution() {
    let case = "gqa_tied_f32";
    let prompt = prompt_of(case);
    let mut runner = runner_for("qwen3", case);
    runner.compile_default(256);
    let (greedy, _) = one_at_a_time(&mut runner, &prompt, 4);
    // The model's probabilities: p(t1), and p(t2 | t1) for every t1.
    let mut seq = Sequence::new(None);
    let first = seq
        .feed(&mut runner, &prompt)
        .unwrap_or_else(|e| panic!("{}", render(e)));
    let p1 = softmax(&first, 1.0);
    let samples = 4000;
    let cfg = |seed| GenerationConfig {
        sampler: SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplerConfig::DEFAULT
        },
        // The second token is verified against one proposal (a step
        // proposes at most what the answer has room for after it).
        max_new_tokens: 3,
        ignore_eos: true,
        ..Default::default()
    };
    let mut counts = std::collections::HashMap::<(u32, u32), usize>::new();
    let mut stats = SpecStats::default();
    for seed in 0..samples {
        let mut oracle = Oracle {
            answer: greedy.clone(),
            prompt_len: prompt.len(),
            wrong: false,
        };
        let (got, _, r) = answer(
            runner,
            &prompt,
            cfg(seed as u64),
            Some(&mut oracle),
            SpecConfig::DEFAULT,
            &mut stats,
        );
        runner = r;
        *counts.entry((got[0], got[1])).or_default() += 1;
    }
    assert!(
        stats.accepted > 0 && stats.accepted < stats.proposed,
        "proposals must be kept sometimes and rejected sometimes: {stats:?}"
    );
    // Expected counts of every pair seen or likely; bins under 5 expected
    // are pooled into one.
    let mut t1s: Vec<u32> = counts.keys().map(|k| k.0).collect();
    t1s.sort_unstable();
    t1s.dedup();
    let mut bins: Vec<(f64, f64)> = vec![];
    let (mut rest_e, mut rest_o) = (0.0, 0.0);
    let mut covered = 0.0;
    for &t1 in &t1s {
        let mut s = Sequence::new(None);
        s.feed(&mut runner, &prompt)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        let after = s
            .step(&mut runner, t1)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        for (t2, p2) in softmax(&after, 1.0).into_iter().enumerate() {
            let p = p1[t1 as usize] * p2;
            covered += p;
            let e = p * samples as f64;
            let o = counts.get(&(t1, t2 as u32)).copied().unwrap_or(0) as f64;
            if e >= 5.0 {
                bins.push((e, o));
            } else {
                rest_e += e;
                rest_o += o;
            }
        }
    }
    // Pairs whose first token was never drawn: their expected mass.
    rest_e += (1.0 - covered) * samples as f64;
    bins.push((rest_e, rest_o));
    let chi2: f64 = bins.iter().map(|(e, o)| (o - e) * (o - e) / e).sum();
    let df = (bins.len() - 1) as f64;
    assert!(
        bins.len() >= 10,
        "too few bins for a test: {} (the fixture's distribution is too flat or too sharp)",
        bins.len()
    );
    assert!(
        chi2 < chi2_critical(df),
        "chi-square {chi2:.1} over {df} degrees of freedom exceeds {:.1}: the answers do not follow the model's distribution ({stats:?})",
        chi2_critical(df)
    );
}

/// A recurrent model whose verification steps keep each row's states
/// (`Sequence::keep_step_states`, what `run`, `chat`, `bench` and `serve`
/// do) takes rejected rows back by picking the last kept row's states:
/// nothing is computed again, and every later step gives the bits that
/// computing the kept rows again (and one-token steps) give.
#[test]
fn kept_row_states_take_rows_back_without_computing_again() {
    for &(script_name, case) in &ARCHS[ARCHS.len() - 2..] {
        for graph in [false, true] {
            let what = format!("{case} graph {graph}");
            let prompt = prompt_of(case);
            let mut runner = runner_for(script_name, case);
            if graph {
                runner.compile_default(256);
            }
            runner.keep_side_outputs();
            let (kept, plain) = (Sequence::new(None), Sequence::new(None));
            let mut seqs = [kept, plain];
            seqs[0].keep_step_states();
            let proposal = [7, 3, 11, 2, 9];
            let mut logits = vec![];
            for (i, seq) in seqs.iter_mut().enumerate() {
                seq.feed(&mut runner, &prompt)
                    .unwrap_or_else(|e| panic!("{}", render(e)));
                let cp = seq.checkpoint();
                assert!(cp.is_some(), "{what}: no recurrent state");
                seq.extend_rows(&mut runner, &proposal)
                    .unwrap_or_else(|e| panic!("{}", render(e)));
                // Two of the five rows kept.
                let again = seq
                    .take_back(&mut runner, cp, prompt.len() + 2)
                    .unwrap_or_else(|e| panic!("{}", render(e)));
                assert_eq!(again, i == 1, "{what}: computed again");
                assert_eq!(seq.cached.len(), prompt.len() + 2, "{what}");
                let mut rows = vec![];
                for t in [5, 8, 1] {
                    rows.push(
                        seq.step(&mut runner, t)
                            .unwrap_or_else(|e| panic!("{}", render(e))),
                    );
                }
                logits.push(rows);
            }
            assert!(logits[0] == logits[1], "{what}: the kept states differ");
            // One token at a time from the start gives the same bits.
            let mut ids = prompt.clone();
            ids.extend_from_slice(&proposal[..2]);
            let mut one = Sequence::new(None);
            one.feed(&mut runner, &ids[..prompt.len()])
                .unwrap_or_else(|e| panic!("{}", render(e)));
            for &t in &proposal[..2] {
                one.step(&mut runner, t)
                    .unwrap_or_else(|e| panic!("{}", render(e)));
            }
            let rows: Vec<Vec<f32>> = [5, 8, 1]
                .iter()
                .map(|&t| {
                    one.step(&mut runner, t)
                        .unwrap_or_else(|e| panic!("{}", render(e)))
                })
                .collect();
            assert!(rows == logits[0], "{what}: differs from one-token steps");
        }
    }
}
