//! A draft model's proposals: they change no answer (recurrent drafts and
//! targets too), its last guess costs no step, a few rows run as a graph
//! with the eager bits, and a prompt lookup's guesses are checked in one
//! step with exactly the token-by-token proposals.

mod common;

use common::speculative::*;
use common::*;
use mllm_runtime::speculative::{draft_propose, DraftModel, NgramLookup, SpecConfig, SpecStats};
use mllm_runtime::{Runner, Sequence};

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
