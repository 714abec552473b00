//! Speculative decoding is exact: a verification step of k + 1 rows gives
//! every row the bits one-token steps give it, on every text architecture
//! (float and quantized weights, eager and captured steps), and answers
//! with proposals (n-gram lookup, a draft model, proposers that are always
//! right or always wrong) equal plain decoding's token for token, greedy
//! and sampled; sampled answers fit the model's own distribution (a
//! chi-square test). Recurrent models (Qwen3.5's Gated DeltaNet) go back
//! to a checkpoint of their state where proposals are rejected.

mod common;

use std::sync::atomic::AtomicBool;

use common::*;
use mllm_runtime::generation::{Detokenize, Generation, GenerationConfig, SamplerConfig};
use mllm_runtime::speculative::{
    draft_propose, DraftModel, NgramLookup, Proposer, SpecConfig, SpecStats, SpecType,
};
use mllm_runtime::{Engine, GenRequest, Runner, Sequence, Speculation};

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

fn runner_for(script_name: &str, case: &str) -> Runner {
    load_with(&script(script_name), case).runner
}

fn argmax(v: &[f32]) -> u32 {
    mllm_runtime::generation::argmax(v) as u32
}

fn render(e: mllm_runtime::Error) -> String {
    e.render(false)
}

/// Greedy tokens and the logits before each, one step at a time.
fn one_at_a_time(runner: &mut Runner, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
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

fn prompt_of(case: &str) -> Vec<u32> {
    reference(case)
        .input_ids
        .iter()
        .map(|&t| t as u32)
        .collect()
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

/// Token ids as text: the answers compare as strings too.
struct Ids;
impl Detokenize for Ids {
    fn step(&mut self, token: u32) -> Result<String, String> {
        Ok(format!("{token} "))
    }
    fn flush(&mut self) -> String {
        String::new()
    }
}

fn config(temperature: f32, seed: u64, n: usize) -> GenerationConfig {
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
fn answer(
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

/// A draft model with the same vocabulary: the same fixture converted to
/// q4_0 proposes (it mostly agrees with its f32 target), and the answer is
/// still the target's.
fn draft_changes_no_answer(script_name: &str, case: &str) {
    let prompt = prompt_of(case);
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("draft.mllm");
    mllm_converter::mllm_format::convert(&fixture(case), &out, "q4_0", None, |_, _| {})
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let draft = mllm_runtime::load(&script(script_name), out.to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{case}: {}", render(e)));
    let mut draft = DraftModel::new(draft.runner, None);
    let mut runner = runner_for(script_name, case);
    for (temp, seed) in [(0.0, 0), (0.8, 99)] {
        let mut none = SpecStats::default();
        let (plain, _, r) = answer(
            runner,
            &prompt,
            config(temp, seed, 48),
            None,
            SpecConfig::DEFAULT,
            &mut none,
        );
        let mut stats = SpecStats::default();
        // A random-weight draft is never confident: propose at any
        // probability.
        let spec = SpecConfig {
            draft_p_min: 0.0,
            ..SpecConfig::DEFAULT
        };
        let (got, _, r) = answer(
            r,
            &prompt,
            config(temp, seed, 48),
            Some(&mut draft),
            spec,
            &mut stats,
        );
        runner = r;
        assert_eq!(
            got, plain,
            "{case} temp {temp}: the draft changed the answer"
        );
        assert!(
            stats.proposed > 0,
            "{case} temp {temp}: the draft proposed nothing: {stats:?}"
        );
        assert!(
            stats.accepted > 0,
            "{case} temp {temp}: a q4_0 copy of the target had nothing accepted: {stats:?}"
        );
        // A step per target step at most for what the draft lacks, and at
        // most one more per proposed token.
        assert!(
            stats.draft_steps > 0 && stats.draft_steps <= stats.steps + stats.proposed,
            "{case} temp {temp}: draft steps not counted: {stats:?}"
        );
    }
}

#[test]
fn a_draft_model_changes_no_answer() {
    draft_changes_no_answer("qwen3", "gqa_tied_f32");
}

/// A draft model's last guess: the token it gives less than
/// `draft_p_min` is still proposed when at least `draft_p_last` likely,
/// from the logits the draft computed already (no draft step for it).
#[test]
fn a_draft_proposes_its_last_guess_without_a_step_for_it() {
    let case = "gqa_tied_f32";
    let prompt = prompt_of(case);
    let mut runner = runner_for("qwen3", case);
    let logits = Sequence::new(None)
        .feed(&mut runner, &prompt)
        .unwrap_or_else(|e| panic!("{}", render(e)));
    // A random-weight model is never sure (p < 1): every token is a last
    // guess.
    let guess = |p_last: f32, runner: &mut Runner| {
        let cfg = SpecConfig {
            draft_p_min: 1.0,
            draft_p_last: p_last,
            ..SpecConfig::DEFAULT
        };
        let mut seq = Sequence::new(None);
        let got = draft_propose(runner, &mut seq, &prompt, 4, &cfg)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        (got, seq.cached)
    };
    let (got, cached) = guess(0.0, &mut runner);
    assert_eq!(got, vec![argmax(&logits)]);
    assert_eq!(
        cached, prompt,
        "the draft computed a step for its last guess"
    );
    let (got, _) = guess(1.0, &mut runner);
    assert!(
        got.is_empty(),
        "a guess less likely than draft_p_last: {got:?}"
    );
}

/// A draft catching up on a few tokens at once (its last guess and the
/// target's next token) runs them as one captured graph with
/// `few_rows_as_graphs`, with the bits the default mode's eager step gives.
#[test]
fn a_few_rows_run_as_a_graph_with_the_eager_bits() {
    let case = "gqa_tied_f32";
    let prompt = prompt_of(case);
    assert!(prompt.len() >= 3, "{case}'s prompt is too short");
    let mut runs = vec![];
    for few in [false, true] {
        let mut runner = runner_for("qwen3", case);
        runner.compile_default(256);
        if few {
            runner.few_rows_as_graphs();
        }
        // One token first (a prompt's pieces of a power of two rows would
        // capture the two-row graph already).
        let mut seq = Sequence::new(None);
        seq.feed(&mut runner, &prompt[..1])
            .unwrap_or_else(|e| panic!("{}", render(e)));
        let graphs = runner.compiled.as_ref().map_or(0, |c| c.graph_count());
        let longer = [prompt[0], prompt[1], prompt[2]];
        let logits = seq
            .feed(&mut runner, &longer)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        assert_eq!(seq.last_computed, 2);
        let added = runner.compiled.as_ref().map_or(0, |c| c.graph_count()) - graphs;
        runs.push((logits, added));
    }
    assert_eq!(runs[0].1, 0, "the default mode stepped two rows as a graph");
    assert_eq!(runs[1].1, 1, "few_rows_as_graphs stepped two rows eagerly");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&runs[0].0), bits(&runs[1].0));
}

/// What a draft proposes after `history` (the prompt and `toks[..s]`),
/// taken token by token from the one-step rows: its top while that is at
/// least `p_min` likely, then a last guess of at least `p_last`.
fn token_by_token(
    toks: &[u32],
    rows: &[Vec<f32>],
    s: usize,
    max: usize,
    cfg: &SpecConfig,
) -> Vec<u32> {
    let mut out = vec![];
    for (j, row) in rows.iter().enumerate().skip(s) {
        let p = softmax(row, 1.0).into_iter().fold(0.0f64, f64::max) as f32;
        if p < cfg.draft_p_min {
            if p >= cfg.draft_p_last {
                out.push(toks[j]);
            }
            break;
        }
        out.push(toks[j]);
        if out.len() == max {
            break;
        }
    }
    out
}

/// Where the text repeats itself, the draft computes the lookup's guesses
/// in one step with its own token (or with what its feed computes) and
/// keeps those it agrees with: its proposals are the token-by-token ones
/// after every history (guesses right, wrong, cut by `p_min`), in fewer
/// steps where the lookup guessed right.
#[test]
fn a_draft_checks_a_lookups_guesses_in_one_step() {
    let case = "gqa_tied_f32";
    let prompt = prompt_of(case);
    let mut runner = runner_for("qwen3", case);
    let (max, n) = (6, 40);
    let (toks, rows) = one_at_a_time(&mut runner, &prompt, n + max);
    // A p-min between two of the tops, so that some proposals stop early.
    let mut tops: Vec<f32> = rows
        .iter()
        .map(|r| softmax(r, 1.0).into_iter().fold(0.0f64, f64::max) as f32)
        .collect();
    tops.sort_by(f32::total_cmp);
    let mid = tops.len() / 2;
    let cfgs = [
        SpecConfig {
            draft_p_min: 0.0,
            ..SpecConfig::DEFAULT
        },
        SpecConfig {
            draft_p_min: (tops[mid - 1] + tops[mid]) / 2.0,
            draft_p_last: 0.0,
            ..SpecConfig::DEFAULT
        },
    ];
    // The draft's lookup (`speculative::draft`'s LOOKUP).
    let lookup = NgramLookup { max_n: 4, min_n: 3 };
    // Steps saved by a right guess at the feed, and after it.
    let mut saved = [0, 0];
    for cfg in &cfgs {
        for s in 0..n {
            let mut history = prompt.clone();
            history.extend_from_slice(&toks[..s]);
            // The draft's cache as the one-step rows had it.
            let mut seq = Sequence::new(None);
            seq.feed(&mut runner, &prompt)
                .unwrap_or_else(|e| panic!("{}", render(e)));
            for &t in &toks[..s] {
                seq.step(&mut runner, t)
                    .unwrap_or_else(|e| panic!("{}", render(e)));
            }
            let before = seq.steps;
            let got = draft_propose(&mut runner, &mut seq, &history, max, cfg)
                .unwrap_or_else(|e| panic!("{}", render(e)));
            let want = token_by_token(&toks, &rows, s, max, cfg);
            assert_eq!(got, want, "after {s} tokens, p_min {}", cfg.draft_p_min);
            // One feed, then a step per proposal but the last (none for a
            // last guess) token by token.
            let steps = seq.steps - before;
            assert!(
                steps <= want.len().max(1),
                "after {s} tokens: {steps} steps for {want:?}"
            );
            // Where the lookup guesses the draft's first token (computed
            // with the feed) or its second, that is not a step of its own.
            let first = lookup.lookup(&history, 1) == [toks[s]];
            history.push(toks[s]);
            let second = lookup.lookup(&history, 1) == [toks[s + 1]];
            if cfg.draft_p_min == 0.0 && (first || second) {
                assert!(
                    steps < want.len(),
                    "after {s} tokens the lookup was right and saved no step"
                );
                saved[usize::from(second)] += 1;
            }
        }
    }
    assert!(
        saved[0] > 0 && saved[1] > 0,
        "{case}'s greedy text repeats too little for the lookup: {saved:?} right guesses at the feed and after it"
    );
}

/// Both recurrent: the target goes back to a checkpoint where it rejects,
/// the draft after every proposal.
#[test]
fn a_recurrent_draft_changes_no_answer_of_a_recurrent_model() {
    draft_changes_no_answer("qwen3_5", "qwen3_5/qwen3_5_f32");
}

/// Softmax of `logits / temp` in f64.
fn softmax(logits: &[f32], temp: f64) -> Vec<f64> {
    let mx = logits.iter().fold(f32::MIN, |m, &x| m.max(x)) as f64;
    let e: Vec<f64> = logits
        .iter()
        .map(|&x| ((x as f64 - mx) / temp).exp())
        .collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
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
