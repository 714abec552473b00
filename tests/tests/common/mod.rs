//! Shared helpers: fixture paths and reference files.

#![allow(dead_code)]

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_interpreter::KvCache;
use mllm_runtime::{load, Loaded};

pub mod golden;
pub mod speculative;

pub const QWEN3_CASES: &[&str] = &["gqa_tied_f32", "untied_bf16_ropeparams", "mha_odd_f32"];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub const LLAMA_CASES: &[&str] = &[
    "smollm_like_tied",
    "llama3_rope_untied_bf16",
    "mha_bias_linear_rope",
];

/// A fixture directory: Qwen3 cases by name, other families as `family/case`.
pub fn fixture(case: &str) -> PathBuf {
    if case.contains('/') {
        return root().join("tests/fixtures").join(case);
    }
    root().join("tests/fixtures/qwen3").join(case)
}

pub fn script(name: &str) -> String {
    root()
        .join("models")
        .join(format!("{name}.mdl"))
        .display()
        .to_string()
}

pub fn qwen3_script() -> String {
    root().join("models/qwen3.mdl").display().to_string()
}

pub struct Reference {
    pub input_ids: Vec<i32>,
    pub logits: Vec<f32>,
    pub vocab: usize,
    pub greedy: Vec<i32>,
}

fn i32s(t: &safetensors::tensor::TensorView) -> Vec<i32> {
    t.data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// An i32 tensor of a reference safetensors file, by name.
pub fn ref_i32s(path: &std::path::Path, name: &str) -> Vec<i32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    i32s(&st.tensor(name).unwrap_or_else(|_| panic!("{name}")))
}

pub fn reference(case: &str) -> Reference {
    reference_file(&fixture(case).join("reference.safetensors"))
}

/// A reference file with `input_ids`, `logits` and `greedy_ids` (a fixture's
/// `reference.safetensors`, or one prompt's of the vision fixtures).
pub fn reference_file(path: &std::path::Path) -> Reference {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid reference");
    let logits = st.tensor("logits").expect("logits");
    let vocab = logits.shape()[1];
    let lv = logits
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Reference {
        input_ids: i32s(&st.tensor("input_ids").expect("input_ids")),
        logits: lv,
        vocab,
        greedy: i32s(&st.tensor("greedy_ids").expect("greedy_ids")),
    }
}

pub fn load_case(case: &str) -> Loaded {
    load_with(&qwen3_script(), case)
}

pub fn load_with(script: &str, case: &str) -> Loaded {
    match load(script, fixture(case).to_str().expect("utf-8 path")) {
        Ok(m) => m,
        Err(e) => panic!("loading {case} failed:\n{}", e.render(false)),
    }
}

pub fn new_cache() -> Rc<RefCell<KvCache>> {
    Rc::new(RefCell::new(KvCache::new()))
}

/// Panics unless every value of `v` is finite. NaN compares false both
/// ways and `f32::max` / `f64::min` skip it, so without this an all-NaN
/// output would pass every tolerance check; an Inf would pass a check
/// whose bound scales with the output. `#[track_caller]`: the panic points
/// at the test that passed the values.
#[track_caller]
pub fn assert_finite(name: &str, v: &[f32]) {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        let n = v.iter().filter(|x| !x.is_finite()).count();
        panic!(
            "{name}: {n} of {} values are not finite (the first, at index {i}, is {})",
            v.len(),
            v[i]
        );
    }
}

/// Largest `|a - b|`. Both sides must be finite (see `assert_finite`):
/// the fold below would skip a NaN, and callers also use the result as a
/// lower bound (`err > 0.0`: "rounding changed something"), which an Inf
/// would satisfy, so a non-finite value panics instead of returning.
#[track_caller]
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    assert_finite("max_abs: left side", a);
    assert_finite("max_abs: right side", b);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Cosine similarity of two equal-length vectors, in f64. Non-finite
/// values panic (a NaN cosine would fail `>=` but vanish in a `min` fold
/// over positions), and so does a zero vector, whose cosine is undefined
/// (0/0): all-zero logits are as much garbage as NaN ones.
#[track_caller]
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "cosine: length mismatch");
    assert_finite("cosine: left side", a);
    assert_finite("cosine: right side", b);
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    assert!(
        na > 0.0 && nb > 0.0,
        "cosine of a zero vector (norms {na}, {nb}) is undefined"
    );
    dot / (na * nb)
}

/// The smallest per-row cosine of `a` and `b`, rows of `vocab` values
/// (both the same length, a whole number of rows).
#[track_caller]
pub fn worst_cosine(a: &[f32], b: &[f32], vocab: usize) -> f64 {
    assert_eq!(a.len(), b.len(), "worst_cosine: length mismatch");
    assert!(
        vocab > 0 && a.len().is_multiple_of(vocab),
        "worst_cosine: {} values are not rows of {vocab}",
        a.len()
    );
    a.chunks(vocab)
        .zip(b.chunks(vocab))
        .map(|(x, y)| cosine(x, y))
        .fold(1.0, f64::min)
}

/// Whether `CI=true` is set: a test that would skip for a missing asset
/// fails there instead, so CI cannot go green by testing nothing.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// `path` if it exists; otherwise says the test is skipped, names the
/// asset and how to fetch it, and returns None. Under `CI=true` a missing
/// asset panics instead (a skip there would pass without checking).
#[track_caller]
pub fn asset_or_skip(path: impl Into<PathBuf>) -> Option<PathBuf> {
    asset_or_skip_in(path, in_ci())
}

/// `asset_or_skip` with the CI setting given (testable without touching
/// the process environment).
#[track_caller]
pub fn asset_or_skip_in(path: impl Into<PathBuf>, ci: bool) -> Option<PathBuf> {
    let path = path.into();
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "test asset {} is missing: run `bash tests/fetch_assets.sh` (from the repository root) to fetch it",
        path.display()
    );
    if ci {
        panic!("{msg} (CI=true: a missing asset fails instead of skipping)");
    }
    eprintln!("SKIPPED, nothing was tested: {msg}");
    None
}

pub fn data(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec().expect("f32 data")
}

/// Greedy decoding through the KV cache: prefill `prompt`, then `n` tokens.
pub fn greedy(m: &mut Loaded, prompt: &[i32], n: usize) -> Vec<i32> {
    let cache = new_cache();
    let mut logits = m.step(&cache, prompt, 0, true).expect("prefill");
    assert_eq!(logits.shape()[0], 1, "last_only returns one row");
    let mut got = vec![];
    let mut pos = prompt.len();
    while got.len() < n {
        // The argmax of NaN logits is an arbitrary id, which could even
        // match the reference's; checked here too, not only by the
        // runtime's own check (host logits: what `step` returns).
        if logits.device().is_none() {
            assert_finite(
                &format!("greedy: logits before token {}", got.len()),
                &data(&logits),
            );
        }
        let next = m.argmax_last(&logits).expect("argmax");
        got.push(next);
        logits = m.step(&cache, &[next], pos, true).expect("decode");
        pos += 1;
    }
    got
}

/// Logits of every position of `ids` (a fresh cache), `[seq, vocab]`.
pub fn full_logits(model: &mllm_interpreter::Model, ids: &[i32]) -> Tensor {
    let mut exec = mllm_interpreter::Eager::new(mllm_backends::CpuBackend);
    mllm_runtime::engine::run_forward(model, &mut exec, &new_cache(), ids, 0, false)
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

/// Config values compared as a transformers config means them: numbers as
/// f64 (1e-6 written either way), anything else as JSON, null never equal.
pub fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b && !a.is_null(),
    }
}

/// A reference safetensors file read by tensor name: f32 values, or i32
/// token ids as u32.
pub struct RefFile(Vec<u8>);

impl RefFile {
    pub fn open(path: &std::path::Path) -> RefFile {
        RefFile(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
    }
    fn words(&self, name: &str) -> Vec<[u8; 4]> {
        let st = safetensors::SafeTensors::deserialize(&self.0).expect("safetensors");
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
        t.data()
            .chunks_exact(4)
            .map(|b| [b[0], b[1], b[2], b[3]])
            .collect()
    }
    pub fn f32s(&self, name: &str) -> Vec<f32> {
        self.words(name)
            .into_iter()
            .map(f32::from_le_bytes)
            .collect()
    }
    pub fn u32s(&self, name: &str) -> Vec<u32> {
        self.words(name)
            .into_iter()
            .map(u32::from_le_bytes)
            .collect()
    }
}

/// `n` greedy ids from an engine whose prompt gave `logits`: argmax, step.
pub fn engine_greedy(
    engine: &mut mllm_runtime::engine::Engine,
    mut logits: Vec<f32>,
    n: usize,
) -> Vec<u32> {
    let mut got = vec![];
    while got.len() < n {
        assert_finite(
            &format!("engine_greedy: logits before token {}", got.len()),
            &logits,
        );
        let t = mllm_runtime::generation::argmax(&logits) as u32;
        got.push(t);
        logits = engine
            .step(t)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    }
    got
}
