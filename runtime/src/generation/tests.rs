//! The core against a made-up model: logits that are a hash of the history,
//! and a detokenizer that spells token `i` as a fixed piece of text.

use proptest::prelude::*;

use super::processors::{LogitsProcessor, ProcessorError};
use super::*;

const VOCAB: usize = 12;
const PIECES: [&str; VOCAB] = [
    "a", "b", " ", "<", "|", "end", ">", "x", "yz", "!", "\u{e9}", "<eos>",
];
const EOS: u32 = 11;

struct Pieces;

impl Detokenize for Pieces {
    fn step(&mut self, token: u32) -> Result<String, String> {
        PIECES
            .get(token as usize)
            .map(|s| s.to_string())
            .ok_or_else(|| format!("token id {token} is out of range"))
    }
    fn flush(&mut self) -> String {
        String::new()
    }
}

/// Logits after `history`: deterministic, different for every history.
fn model(history: &[u32], vocab: usize) -> Vec<f32> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in history {
        h = (h ^ t as u64).wrapping_mul(0x0100_0000_01b3);
    }
    (0..vocab)
        .map(|i| {
            let x = (h ^ (i as u64 + 1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x >> 40) % 1000) as f32 / 150.0
        })
        .collect()
}

fn config(sampler: SamplerConfig, max: usize) -> GenerationConfig {
    GenerationConfig {
        sampler,
        max_new_tokens: max,
        eos: vec![EOS],
        ..Default::default()
    }
}

/// Logits where `best` leads.
fn peaked(best: u32, vocab: usize) -> Vec<f32> {
    let mut l = vec![0.0; vocab];
    l[best as usize] = 5.0;
    l
}

/// Drives `g` one token at a time over a script of winners.
fn drive(g: &mut Generation, winners: &[u32]) -> Vec<Step> {
    let mut steps = vec![];
    let mut hist = vec![];
    for &w in winners {
        let s = g.next(&mut peaked(w, VOCAB), &hist).expect("step");
        let done = s.done.is_some();
        hist.extend(s.token);
        steps.push(s);
        if done {
            break;
        }
    }
    steps
}

#[test]
fn eos_ends_the_answer_and_is_not_generated() {
    let mut g = Generation::new(config(SamplerConfig::greedy(), 10), Box::new(Pieces));
    let steps = drive(&mut g, &[0, 1, EOS, 0]);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2].token, None);
    assert_eq!(steps[2].done, Some(StopReason::Eos));
    assert_eq!(g.generated(), &[0, 1]);
    assert_eq!(g.text(), "ab");
    // Asked again after the end: nothing more.
    let again = g.next(&mut peaked(0, VOCAB), &[]).expect("ended");
    assert_eq!((again.token, again.done), (None, Some(StopReason::Eos)));
}

#[test]
fn stop_strings_are_held_back_and_never_shown() {
    let mut cfg = config(SamplerConfig::greedy(), 20);
    cfg.stops = vec!["<|end|>".into()];
    let mut g = Generation::new(cfg, Box::new(Pieces));
    // "a<|x" is shown only once "x" rules the stop string out.
    let steps = drive(&mut g, &[0, 3, 4, 7, 3, 4, 5, 4, 6, 0]);
    let shown: Vec<&str> = steps.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(shown, vec!["a", "", "", "<|x", "", "", "", "", ""]);
    assert_eq!(
        steps.last().and_then(|s| s.done),
        Some(StopReason::StopString)
    );
    assert_eq!(g.text(), "a<|x");
}

#[test]
fn the_token_limit_ends_on_the_last_token_and_releases_held_text() {
    let mut cfg = config(SamplerConfig::greedy(), 3);
    cfg.stops = vec!["<|end|>".into()];
    let mut g = Generation::new(cfg, Box::new(Pieces));
    let steps = drive(&mut g, &[0, 1, 3, 0]);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2].token, Some(3));
    assert_eq!(steps[2].text, "<", "held text is released at the end");
    assert_eq!(steps[2].done, Some(StopReason::MaxTokens));
    assert_eq!(StopReason::MaxTokens.finish_reason(), "length");
}

#[test]
fn cancelling_releases_held_text_once() {
    let mut cfg = config(SamplerConfig::greedy(), 20);
    cfg.stops = vec!["<|end|>".into()];
    let mut g = Generation::new(cfg, Box::new(Pieces));
    drive(&mut g, &[0, 3]);
    let s = g.finish(StopReason::Interrupted);
    assert_eq!(
        (s.text.as_str(), s.done),
        ("<", Some(StopReason::Interrupted))
    );
    assert_eq!(g.finish(StopReason::MaxTokens).text, "");
}

#[test]
fn ignore_eos_masks_it_and_padded_vocab_rows_are_never_drawn() {
    let mut cfg = config(SamplerConfig::greedy(), 4);
    cfg.ignore_eos = true;
    let mut g = Generation::new(cfg, Box::new(Pieces));
    let s = g.next(&mut peaked(EOS, VOCAB), &[]).expect("step");
    assert!(s.token.is_some() && s.token != Some(EOS), "{s:?}");

    // A head of 16 rows over a 12-token vocabulary: rows 12..16 lead but
    // are padding; greedy and sampled draws both skip them.
    for sampler in [SamplerConfig::greedy(), SamplerConfig::DEFAULT] {
        let mut cfg = config(sampler, 50);
        cfg.vocab = Some(VOCAB);
        let mut g = Generation::new(cfg, Box::new(Pieces));
        let mut hist = vec![];
        for _ in 0..50 {
            let mut l = model(&hist, 16);
            l[12..].fill(100.0);
            let s = g.next(&mut l, &hist).expect("in the vocabulary");
            hist.extend(s.token);
            if s.done.is_some() {
                break;
            }
        }
        assert!(hist.iter().all(|&t| (t as usize) < VOCAB), "{hist:?}");
    }
}

#[test]
fn broken_logits_and_a_chain_that_forbids_everything_are_errors() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut g = Generation::new(config(SamplerConfig::greedy(), 5), Box::new(Pieces));
        let mut l = peaked(0, VOCAB);
        l[4] = bad;
        let e = g.next(&mut l, &[]).expect_err("not sampled");
        assert!(
            matches!(e, GenerationError::NonFinite(ref m) if m.contains("at token 4")),
            "{e}"
        );
    }
    struct Nothing;
    impl LogitsProcessor for Nothing {
        fn process(&mut self, l: &mut [f32], _: &[u32]) -> Result<(), ProcessorError> {
            l.fill(f32::NEG_INFINITY);
            Ok(())
        }
    }
    let mut g = Generation::new(config(SamplerConfig::DEFAULT, 5), Box::new(Pieces));
    g.add_processor(Box::new(Nothing));
    let e = g
        .next(&mut peaked(0, VOCAB), &[])
        .expect_err("nothing allowed");
    assert_eq!(e, GenerationError::NothingAllowed);
}

#[test]
fn a_processor_is_told_each_token_and_can_end_the_answer() {
    /// Allows only `x` then `yz`, then says the answer is whole.
    struct Exactly(Vec<u32>);
    impl LogitsProcessor for Exactly {
        fn process(&mut self, l: &mut [f32], _: &[u32]) -> Result<(), ProcessorError> {
            let want = *self
                .0
                .first()
                .ok_or(ProcessorError("past the end".into()))?;
            for (i, v) in l.iter_mut().enumerate() {
                if i as u32 != want {
                    *v = f32::NEG_INFINITY;
                }
            }
            Ok(())
        }
        fn accept(&mut self, t: u32) -> Result<(), ProcessorError> {
            if self.0.first() != Some(&t) {
                return Err(ProcessorError(format!("token {t} was not allowed")));
            }
            self.0.remove(0);
            Ok(())
        }
        fn is_complete(&self) -> bool {
            self.0.is_empty()
        }
    }
    let mut g = Generation::new(config(SamplerConfig::DEFAULT, 50), Box::new(Pieces));
    g.add_processor(Box::new(Exactly(vec![7, 8])));
    let steps = drive(&mut g, &[0, 0, 0, 0]);
    assert_eq!(g.text(), "xyz");
    assert_eq!(steps.last().and_then(|s| s.done), Some(StopReason::Eos));
}

#[test]
fn logprobs_come_from_the_masked_distribution() {
    let mut cfg = config(SamplerConfig::greedy(), 5);
    cfg.logprobs = Some(3);
    cfg.vocab = Some(4);
    let mut g = Generation::new(cfg, Box::new(Pieces));
    let mut l = vec![1.0, 3.0, 2.0, 0.0, 9.0, 9.0];
    let lp = g.next(&mut l, &[]).expect("step").logprob.expect("asked");
    let z: f64 = [1.0f64, 3.0, 2.0, 0.0].iter().map(|v| v.exp()).sum();
    assert_eq!(lp.token, 1);
    assert!((lp.logprob as f64 - (3.0 - z.ln())).abs() < 1e-5, "{lp:?}");
    let top: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
    assert_eq!(top, vec![1, 2, 0], "masked rows 4, 5 are not among the top");
}

/// The answer `next` gives one token at a time.
fn sequential(cfg: &GenerationConfig, prompt: &[u32]) -> (Vec<u32>, String, Option<StopReason>) {
    let mut g = Generation::new(cfg.clone(), Box::new(Pieces));
    let mut hist = prompt.to_vec();
    loop {
        let s = g.next(&mut model(&hist, VOCAB), &hist).expect("step");
        hist.extend(s.token);
        if s.done.is_some() {
            return (g.generated().to_vec(), g.text().to_string(), s.done);
        }
    }
}

/// The same answer through `verify`, with a drafter that proposes `k`
/// tokens: the model's greedy choice, except where `wrong` says to
/// propose something else.
fn speculative(
    cfg: &GenerationConfig,
    prompt: &[u32],
    k: usize,
    wrong: &[bool],
) -> (Vec<u32>, String, Option<StopReason>) {
    let mut g = Generation::new(cfg.clone(), Box::new(Pieces));
    let mut hist = prompt.to_vec();
    let mut round = 0;
    loop {
        let mut proposed = vec![];
        let mut h = hist.clone();
        for j in 0..k {
            let mut t = argmax(&model(&h, VOCAB)) as u32;
            if wrong[(round * k + j) % wrong.len()] {
                t = (t + 1) % VOCAB as u32;
            }
            proposed.push(t);
            h.push(t);
        }
        round += 1;
        let mut rows: Vec<Vec<f32>> = (0..=k)
            .map(|i| model(&[&hist[..], &proposed[..i]].concat(), VOCAB))
            .collect();
        let steps = g.verify(&proposed, &mut rows, &hist).expect("verify");
        assert!(!steps.is_empty() && steps.len() <= k + 1);
        for s in &steps {
            hist.extend(s.token);
        }
        if let Some(done) = steps.last().and_then(|s| s.done) {
            return (g.generated().to_vec(), g.text().to_string(), Some(done));
        }
    }
}

/// Logits that rise with the id enter the heap one after another until
/// `candidates` selects among the rest instead: both ways give the full
/// sort's first k, ties and NaN included.
#[test]
fn candidates_of_rising_and_falling_rows_are_their_twins() {
    use crate::generation::sampler::{candidates, candidates_reference};
    let rising: Vec<f32> = (0..20_000)
        .map(|i| {
            if i % 997 == 0 {
                f32::NAN
            } else {
                (i / 3) as f32 * 0.25
            }
        })
        .collect();
    let falling: Vec<f32> = rising.iter().rev().copied().collect();
    for row in [&rising, &falling] {
        for k in [1, 2, 40, 1000, 6000, 19_999] {
            let bits = |c: Vec<(u32, f32)>| {
                c.into_iter()
                    .map(|(i, v)| (i, v.to_bits()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                bits(candidates(row, k)),
                bits(candidates_reference(row, k)),
                "k {k}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Speculative verification never changes an answer: greedy or
    /// seeded sampling, any proposal length, any mix of right and wrong
    /// proposals, with stop strings and a token limit.
    #[test]
    fn verify_gives_the_answer_next_gives(
        prompt in proptest::collection::vec(0u32..VOCAB as u32, 1..6),
        temperature in prop_oneof![Just(0.0f32), 0.3f32..1.5],
        seed in any::<u64>(),
        k in 1usize..6,
        wrong in proptest::collection::vec(any::<bool>(), 1..9),
        max in 1usize..40,
        stop in prop_oneof![Just(None), Just(Some("yz!".to_string())), Just(Some("a b".to_string()))],
    ) {
        let cfg = GenerationConfig {
            sampler: SamplerConfig { temperature, seed, top_k: 0, top_p: 1.0, min_p: 0.0, ..SamplerConfig::DEFAULT },
            max_new_tokens: max,
            eos: vec![EOS],
            stops: stop.into_iter().collect(),
            ..Default::default()
        };
        prop_assert_eq!(sequential(&cfg, &prompt), speculative(&cfg, &prompt, k, &wrong));
    }

    /// The chunked `argmax` is its plain twin's answer: ties (first wins),
    /// NaN anywhere (never wins), infinities, signed zeros, rows shorter
    /// and longer than its chunks, and rows with no value above -inf.
    #[test]
    fn argmax_is_its_twin(
        row in proptest::collection::vec(
            prop_oneof![
                30 => (-3i8..4).prop_map(|v| v as f32 * 0.5),
                30 => (-4000i32..4000).prop_map(|v| v as f32 * 0.5),
                1 => Just(f32::NAN),
                1 => Just(f32::NEG_INFINITY),
                1 => Just(f32::INFINITY),
                1 => Just(-0.0f32),
                1 => any::<f32>(),
            ],
            0..300,
        ),
        tie in any::<proptest::sample::Index>(),
    ) {
        let twin = crate::generation::sampler::argmax_reference;
        prop_assert_eq!(crate::generation::argmax(&row), twin(&row));
        // The same row with its maximum copied to a random place.
        let mut tied = row.clone();
        if !tied.is_empty() {
            let at = tie.index(tied.len());
            tied[at] = tied[twin(&row)];
        }
        prop_assert_eq!(crate::generation::argmax(&tied), twin(&tied));
    }

    /// Sampling's candidates (the best k kept in a heap, then sorted) are
    /// the full sort's first k, ties and all.
    #[test]
    fn candidates_are_their_twins(
        row in prop_oneof![
            proptest::collection::vec(
                prop_oneof![
                    8 => (-6i8..6).prop_map(|v| v as f32 * 0.5),
                    8 => any::<f32>(),
                    1 => Just(f32::NAN),
                    1 => Just(f32::INFINITY),
                    1 => Just(-0.0f32),
                ],
                0..300,
            ),
            // Half steps over a wide range: runs of ties, and a heap
            // floor that other values equal.
            proptest::collection::vec(
                prop_oneof![
                    30 => (-100i16..100).prop_map(|v| v as f32 * 0.5),
                    1 => Just(f32::NAN),
                    1 => Just(f32::NEG_INFINITY),
                ],
                0..600,
            ),
        ],
        top_k in prop_oneof![Just(0usize), 1usize..60, 60usize..300, Just(700usize)],
    ) {
        let sampler = crate::generation::sampler::candidates;
        let twin = crate::generation::sampler::candidates_reference;
        let bits = |c: Vec<(u32, f32)>| c.into_iter().map(|(i, v)| (i, v.to_bits())).collect::<Vec<_>>();
        prop_assert_eq!(bits(sampler(&row, top_k)), bits(twin(&row, top_k)));
        // k at the edges of a run of ties (the values at the top minus
        // 4): the k-th is the run's first, and the one after the run.
        let finite: Vec<f32> = row.iter().copied().filter(|v| v.is_finite()).collect();
        let top = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let above = finite.iter().filter(|&&v| v > top - 4.0).count();
        let reach = finite.iter().filter(|&&v| v >= top - 4.0).count();
        for k in [above + 1, reach + 1] {
            prop_assert_eq!(bits(sampler(&row, k)), bits(twin(&row, k)));
        }
    }
}
