//! Qwen3.5's multi-token-prediction head (`--spec-type mtp`) on the dense
//! and MoE fixtures with an `mtp.*` shard (tests/fixtures/make_qwen3_5_mtp_fixture.py):
//! the script's head equals the NumPy transcription of vLLM's
//! qwen3_next_mtp; every step keeps the model's final hidden states
//! (eager and captured, bit for bit, cut back with the cache); the head's
//! incremental cache proposes what a head computed from scratch proposes;
//! and answers with it equal plain answers, greedy and sampled.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;

use common::golden::load_auto;
use common::speculative::config;
use common::*;
use mllm_interpreter::{Eager, KvCache, Value};
use mllm_runtime::generation::{Detokenize, Generation, GenerationConfig};
use mllm_runtime::speculative::{MtpHead, Proposer, SpecConfig, SpecStats, SpecType, TargetView};
use mllm_runtime::{Engine, GenRequest, Sequence, Speculation};

const CASE: &str = "qwen3_5_vl/dense";

fn render(e: mllm_runtime::Error) -> String {
    e.render(false)
}

#[test]
fn the_head_matches_vllms_transcription() {
    // The MoE model's head has a sparse MLP (router, experts, shared expert).
    for case in [CASE, "qwen3_5_vl/moe"] {
        head_matches(case);
    }
}

fn head_matches(case: &str) {
    let m = load_auto(case);
    let model = &m.runner.model;
    let path = fixture(case).join("reference_mtp.json");
    let text = std::fs::read_to_string(&path).expect("reference_mtp.json");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    let mut exec = Eager::new(model.backend.clone());
    exec.emitted = Some(vec![]);
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array()
            .expect("array")
            .iter()
            .flat_map(|x| match x.as_array() {
                Some(row) => row.iter().map(|y| y.as_f64().expect("f") as f32).collect(),
                None => vec![x.as_f64().expect("f") as f32],
            })
            .collect()
    };
    let ints = |v: &serde_json::Value| -> Vec<i32> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|x| x.as_i64().expect("int") as i32)
            .collect()
    };
    let calls = r["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 3);
    for (k, c) in calls.iter().enumerate() {
        let ids = ints(&c["input_ids"]);
        let pos = ints(&c["positions"]);
        let hidden = floats(&c["hidden"]);
        let t = ids.len();
        let width = hidden.len() / t;
        let t_ =
            |d: Vec<i32>| Value::Tensor(mllm_backends::Tensor::from_i32(d, vec![t]).expect("t"));
        let out = model
            .call(
                "mtp_forward",
                &mut exec,
                vec![
                    ("input_ids", t_(ids)),
                    (
                        "hidden",
                        Value::Tensor(
                            mllm_backends::Tensor::from_f32(hidden, vec![t, width]).expect("h"),
                        ),
                    ),
                    ("positions", t_(pos)),
                    ("cache", Value::Cache(cache.clone())),
                ],
            )
            .unwrap_or_else(|e| panic!("{}", e.render(&model.program.sources, false)));
        let Value::Tensor(logits) = &out else {
            panic!("call {k}: not logits: {out:?}")
        };
        let side = exec
            .emitted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let h = &side.last().expect("the head emits its last row").1;
        for (name, got, want) in [
            ("logits", data(logits), floats(&c["logits"])),
            ("out", data(h), floats(&c["out"])),
        ] {
            assert_finite(name, &got);
            assert_eq!(got.len(), want.len(), "call {k} {name}");
            let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
            let diff = max_abs(&got, &want);
            assert!(
                diff <= 2e-5 * scale,
                "{case} call {k} {name}: max |diff| {diff} (scale {scale})"
            );
        }
    }
}

/// Token ids as text.
struct Ids;
impl Detokenize for Ids {
    fn step(&mut self, token: u32) -> Result<String, String> {
        Ok(format!("{token} "))
    }
    fn flush(&mut self) -> String {
        String::new()
    }
}

fn prompt() -> Vec<u32> {
    vec![11, 42, 7, 99, 150, 3, 42, 7]
}

fn engine(graph: bool, keep: bool) -> Engine {
    let m = load_auto(CASE);
    let mut runner = m.runner;
    if graph {
        runner.compile_default(256);
    } else {
        runner.eager_only();
    }
    let mut e = Engine {
        runner,
        seq: Sequence::new(None),
    };
    if keep {
        e.keep_hidden();
    }
    e
}

/// The hidden rows of positions `0..n`.
fn hidden_rows(e: &Engine, n: usize) -> Vec<f32> {
    let h = e.seq.hidden.as_ref().expect("kept");
    assert_eq!((h.base(), h.end()), (0, n), "rows kept");
    h.range(0, n).expect("rows").to_vec()
}

#[test]
fn steps_keep_the_final_hidden_states() {
    let ids = prompt();
    let mut per_mode = vec![];
    for graph in [false, true] {
        let mut e = engine(graph, true);
        e.feed(&ids).unwrap_or_else(|e| panic!("{}", render(e)));
        e.step(5).unwrap_or_else(|e| panic!("{}", render(e)));
        // A verification step of 3 rows, 1 of them kept.
        let cp = e.seq.checkpoint();
        e.seq
            .extend_rows(&mut e.runner, &[6, 8, 9])
            .unwrap_or_else(|e| panic!("{}", render(e)));
        assert_eq!(e.seq.hidden.as_ref().map(|h| h.end()), Some(ids.len() + 4));
        e.seq
            .take_back(&mut e.runner, cp, ids.len() + 2)
            .unwrap_or_else(|e| panic!("{}", render(e)));
        per_mode.push(hidden_rows(&e, ids.len() + 2));
    }
    assert!(
        per_mode[0] == per_mode[1],
        "captured steps keep other hidden states than eager ones"
    );
    // The rows are what the output head reads: tied embeddings turn them
    // into the logits of a full forward over the same tokens.
    let m = load_auto(CASE);
    let mut all: Vec<i32> = prompt().iter().map(|&t| t as i32).collect();
    all.extend([5, 6]);
    let logits = data(&full_logits(&m.runner.model, &all));
    let embed = m
        .runner
        .model
        .weights
        .iter()
        .find(|(n, _)| n == "model.language_model.embed_tokens.weight")
        .map(|(_, t)| data(t))
        .expect("embeddings");
    let hidden = &per_mode[0];
    let width = hidden.len() / all.len();
    let vocab = embed.len() / width;
    let mut from_hidden = vec![];
    for row in hidden.chunks_exact(width) {
        for v in embed.chunks_exact(width) {
            from_hidden.push(row.iter().zip(v).map(|(a, b)| a * b).sum::<f32>());
        }
    }
    assert_eq!(from_hidden.len(), all.len() * vocab);
    let diff = max_abs(&from_hidden, &logits);
    assert!(
        diff < 1e-4,
        "hidden rows x embeddings differ from logits by {diff}"
    );
}

#[test]
fn models_without_a_head_are_refused() {
    let plain = load_auto("qwen3_5/qwen3_5_f32");
    let e = MtpHead::new(&plain.runner.model).err().expect("refused");
    assert!(
        e.message().contains("no `mtp.*` tensors"),
        "{}",
        e.message()
    );
    let other = load_with(&qwen3_script(), "gqa_tied_f32");
    let e = MtpHead::new(&other.runner.model).err().expect("refused");
    assert!(
        e.message().contains("has no `mtp_forward`"),
        "{}",
        e.message()
    );
}

/// Proposes the plain answer's next `k` tokens (`k` cycling 0, 1, 2: some
/// accepted, some not), then the MTP head's guesses; checks each time that
/// the head's incremental cache proposes what a fresh head given the same
/// history and hidden states proposes.
struct Checked {
    head: MtpHead,
    answer: Vec<u32>,
    prompt_len: usize,
    calls: usize,
    compared: usize,
}

impl Proposer for Checked {
    fn propose(&mut self, _: &[u32], _: usize, _: &SpecConfig) -> mllm_runtime::Result<Vec<u32>> {
        unreachable!("the loop calls propose_with")
    }
    fn propose_with(
        &mut self,
        target: TargetView,
        history: &[u32],
        max: usize,
        _: &SpecConfig,
    ) -> mllm_runtime::Result<Vec<u32>> {
        let hidden = target.hidden.expect("the sequence keeps hidden states");
        let mut copy = hidden.clone();
        let mut fresh = MtpHead::new(target.model)?;
        let want = fresh.propose(target.model, &mut copy, history, max)?;
        let got = self.head.propose(target.model, hidden, history, max)?;
        assert_eq!(got, want, "call {}: the head's cache drifted", self.calls);
        assert_eq!(got.len(), max, "the head proposes up to max");
        self.compared += 1;
        let k = self.calls % 3;
        self.calls += 1;
        let done = history.len() - self.prompt_len;
        let mut out: Vec<u32> = self
            .answer
            .iter()
            .skip(done)
            .take(k.min(max))
            .copied()
            .collect();
        out.extend(got.into_iter().skip(out.len()));
        Ok(out)
    }
    fn kind(&self) -> SpecType {
        SpecType::Mtp
    }
}

fn answer(
    e: &mut Engine,
    cfg: GenerationConfig,
    proposer: Option<&mut dyn Proposer>,
    stats: &mut SpecStats,
) -> Vec<u32> {
    answer_to(e, &prompt(), cfg, proposer, 4, stats)
}

/// The answer to `prompt` from an empty cache, with `proposer` proposing
/// up to `draft_max` tokens a step, or plainly.
fn answer_to(
    e: &mut Engine,
    prompt: &[u32],
    cfg: GenerationConfig,
    proposer: Option<&mut dyn Proposer>,
    draft_max: usize,
    stats: &mut SpecStats,
) -> Vec<u32> {
    e.reset();
    let mut gen = Generation::new(cfg, Box::new(Ids));
    let spec = proposer.map(|p| Speculation {
        proposer: p,
        config: SpecConfig {
            draft_max,
            ..SpecConfig::DEFAULT
        },
        stats,
    });
    mllm_runtime::generate_with(
        e,
        &mut gen,
        GenRequest {
            prompt,
            images: None,
        },
        spec,
        &mut |_| {},
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("{}", render(e)))
    .generated
}

#[test]
fn answers_with_the_head_equal_plain_answers() {
    // Prompt and answer stay within one row-invariant step, so a fresh
    // head's catch-up has the bits of the incremental one.
    let n = 20;
    assert!(prompt().len() + n <= mllm_runtime::speculative::ROW_INVARIANT_STEP);
    for graph in [false, true] {
        let mut e = engine(graph, true);
        for (temp, seed) in [(0.0, 0), (0.9, 7)] {
            let what = format!("graph {graph} temp {temp}");
            let mut none = SpecStats::default();
            let plain = answer(&mut e, config(temp, seed, n), None, &mut none);
            assert_eq!(plain.len(), n, "{what}");
            // The head eagerly, and as `mllm run --spec-type mtp` uses it
            // (captured graphs): the same proposals.
            let mut runs = vec![];
            for compiled in [false, true] {
                let mut head = match compiled {
                    true => MtpHead::compiled(&e.runner.model, 256),
                    false => MtpHead::new(&e.runner.model),
                }
                .expect("head");
                let mut stats = SpecStats::default();
                let got = answer(&mut e, config(temp, seed, n), Some(&mut head), &mut stats);
                assert_eq!(got, plain, "{what}: the MTP head changed the answer");
                assert!(stats.proposed > 0, "{what}: nothing proposed");
                runs.push(stats);
            }
            assert_eq!(runs[0], runs[1], "{what}: captured head proposes otherwise");
            // Partly right proposals: accepted and rejected rows, and the
            // head's cache checked against a fresh head at every step.
            let mut checked = Checked {
                head: MtpHead::new(&e.runner.model).expect("head"),
                answer: plain.clone(),
                prompt_len: prompt().len(),
                calls: 0,
                compared: 0,
            };
            let mut stats = SpecStats::default();
            let got = answer(
                &mut e,
                config(temp, seed, n),
                Some(&mut checked),
                &mut stats,
            );
            assert_eq!(
                got, plain,
                "{what}: partly right proposals changed the answer"
            );
            assert!(
                stats.accepted > 0 && stats.accepted < stats.proposed && checked.compared > 3,
                "{what}: {stats:?}, {} compared",
                checked.compared
            );
        }
    }
}

/// The trained fixture (tests/fixtures/make_qwen3_5_mtp_trained.py): a
/// byte-level Qwen3.5 and its MTP head trained on Python source. mllm's
/// greedy answers are torch's; the head's guess after each pair of a
/// prompt is torch's; and speculating with it keeps every answer while the
/// model accepts about as many guesses as torch's own measurement.
#[test]
fn a_trained_head_guesses_as_torch_does_and_is_accepted() {
    let case = "qwen3_5_mtp/trained";
    let path = fixture(case).join("reference.json");
    let text = std::fs::read_to_string(&path).expect("reference.json");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    };
    let cases: Vec<(Vec<u32>, Vec<u32>)> = r["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| (ids(&p["prompt"]), ids(&p["greedy"])))
        .collect();
    let m = load_auto(case);
    let mut e = Engine {
        runner: m.runner,
        seq: Sequence::new(None),
    };
    e.runner.compile_default(512);
    e.keep_hidden();
    let mut stats = SpecStats::default();
    for (k, (prompt, want)) in cases.iter().enumerate() {
        let mut none = SpecStats::default();
        let plain = answer_to(
            &mut e,
            prompt,
            config(0.0, 0, want.len()),
            None,
            3,
            &mut none,
        );
        assert_eq!(&plain, want, "prompt {k}: greedy answer vs torch");
        let mut head = MtpHead::new(&e.runner.model).expect("head");
        let got = answer_to(
            &mut e,
            prompt,
            config(0.0, 0, want.len()),
            Some(&mut head),
            3,
            &mut stats,
        );
        assert_eq!(&got, want, "prompt {k}: mtp changed the answer");
    }
    let torch =
        r["accepted"].as_f64().expect("accepted") / r["proposed"].as_f64().expect("proposed");
    eprintln!("mtp on {case}: {stats:?} (torch, 3 a step: {torch:.2})");
    assert!(
        stats.acceptance() >= 0.8 * torch && stats.acceptance() > 0.2,
        "acceptance {:.2} (torch {torch:.2}): {stats:?}",
        stats.acceptance()
    );
    // The head after each pair of the first prompt, one pair a call.
    let (prompt, guesses) = (&cases[0].0, ids(&r["mtp_guesses"]));
    e.reset();
    e.feed(prompt).unwrap_or_else(|e| panic!("{}", render(e)));
    let hidden = e.seq.hidden.as_ref().expect("kept");
    let rows = hidden.range(0, prompt.len()).expect("rows").to_vec();
    let width = rows.len() / prompt.len();
    let model = &e.runner.model;
    let mut exec = Eager::new(model.backend.clone());
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let mut same = 0;
    for i in 0..prompt.len() - 1 {
        let t =
            |v: Vec<i32>| Value::Tensor(mllm_backends::Tensor::from_i32(v, vec![1]).expect("t"));
        let row = rows[i * width..(i + 1) * width].to_vec();
        let h = mllm_backends::Tensor::from_f32(row, vec![1, width]).expect("h");
        let out = model
            .call(
                "mtp_forward",
                &mut exec,
                vec![
                    ("input_ids", t(vec![prompt[i + 1] as i32])),
                    ("hidden", Value::Tensor(h)),
                    ("positions", t(vec![i as i32])),
                    ("cache", Value::Cache(cache.clone())),
                ],
            )
            .unwrap_or_else(|e| panic!("{}", e.render(&model.program.sources, false)));
        let Value::Tensor(logits) = &out else {
            panic!("{out:?}")
        };
        let got = mllm_runtime::generation::argmax(&data(logits)) as u32;
        same += usize::from(got == guesses[i]);
    }
    // Near-ties may fall either way after the model's and head's rounding.
    assert!(
        same + 1 >= guesses.len(),
        "{same} of {} guesses as torch's",
        guesses.len()
    );
}
