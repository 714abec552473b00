//! `mllm export --format onnx` checked by an engine that is not ours:
//! every golden text model (Qwen3, Qwen2, Llama fixtures), the Qwen3-VL text
//! decoder and the real SmolLM2 GGUF (dequantized) are exported and run
//! with onnxruntime, and the logits compared with our eager CPU forward
//! (max-abs <= 1e-4, f32):
//! - no-cache: the prompt in one graph, `input_ids` -> `logits`;
//! - cached: two chunks of 3 tokens through the chunk graph, then one token
//!   at a time through the `--seq 1` decode graph, the host (check.py)
//!   copying the present rows into the past buffers; every step's logits
//!   against the eager forward of the whole sequence.
//!
//! Graphs after every pass (merged linears, fused add + norm, gated
//! activations) export and agree too. Needs the onnxruntime venv
//! (tests/onnx/setup.sh, run on first use); `MLLM_SKIP_ONNX=1` skips the
//! onnxruntime runs knowingly.

mod common;
mod onnx_common;

use std::path::{Path, PathBuf};

use common::*;
use onnx_common::*;

/// Rows of the past buffers of the cached exports.
const CONTEXT: usize = 64;
const TOLERANCE: f32 = 1e-4;

struct Case {
    name: String,
    script: String,
    model: PathBuf,
    prompt: Vec<i32>,
    /// Tokens after the prompt (decode steps of the cached run).
    more: Vec<i32>,
}

fn golden(script_name: &str, case: &str) -> Case {
    let r = reference(case);
    Case {
        name: case.to_string(),
        script: script(script_name),
        model: fixture(case),
        prompt: r.input_ids,
        more: r.greedy,
    }
}

/// Which graphs of a case are exported and run.
#[derive(Clone, Copy, PartialEq)]
enum Graphs {
    Both,
    NoCache,
    Cached,
}

/// Exports every case no-cache, as a 3-token chunk graph and as the decode
/// graph, runs them with onnxruntime and compares with eager logits.
fn check(cases: &[Case]) {
    check_graphs(cases, Graphs::Both)
}

fn check_graphs(cases: &[Case], graphs: Graphs) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut runs = vec![];
    let mut expected = vec![];
    for (i, c) in cases.iter().enumerate() {
        let model = c.model.to_str().expect("utf-8 path");
        let dir = |what: &str| tmp.path().join(format!("{i}_{what}"));
        let export_as = |seq: usize, context: Option<usize>, out: &Path| {
            export(
                &Export {
                    script: &c.script,
                    model,
                    seq,
                    context,
                    quant: "dequantize",
                },
                out,
            )
        };
        let all: Vec<i32> = c.prompt.iter().chain(&c.more).copied().collect();
        assert!(all.len() <= CONTEXT);
        // Eager with the weights the export holds: f32 (a GGUF widened).
        let opts = mllm_runtime::model_files::LoadOptions {
            dequantize: true,
            ..Default::default()
        };
        let m = mllm_runtime::load_with(&c.script, model, opts)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        if graphs != Graphs::Cached {
            export_as(c.prompt.len(), None, &dir("nocache"));
            runs.push(Run::new(
                format!("{} no-cache", c.name),
                vec![(dir("nocache"), c.prompt.clone())],
            ));
            expected.push(data(&full_logits(&m.runner.model, &c.prompt)));
        }
        if graphs != Graphs::NoCache {
            export_as(3, Some(CONTEXT), &dir("chunk3"));
            export_as(1, Some(CONTEXT), &dir("decode"));
            runs.push(Run::new(
                format!("{} cached", c.name),
                cached_plan(&all, &dir("chunk3"), 3, 2, &dir("decode")),
            ));
            expected.push(data(&full_logits(&m.runner.model, &all)));
        }
    }
    compare(&runs, &expected, tmp.path());
}

/// Runs `runs` with onnxruntime and checks each against `expected`.
fn compare(runs: &[Run], expected: &[Vec<f32>], tmp: &Path) {
    let Some(outs) = run_ort(runs, 2, tmp) else {
        return;
    };
    for ((run, out), want) in runs.iter().zip(&outs).zip(expected) {
        assert_eq!(
            out.logits.len(),
            want.len(),
            "{}: onnxruntime gave {} rows of {}",
            run.name,
            out.rows,
            out.vocab
        );
        let err = max_abs(&out.logits, want);
        eprintln!(
            "{}: onnxruntime vs eager max-abs = {err:.3e} over {} rows ({} steps)",
            run.name,
            out.rows,
            run.steps.len()
        );
        assert!(
            err <= TOLERANCE,
            "{}: max-abs {err} > {TOLERANCE}",
            run.name
        );
    }
}

#[test]
fn qwen3_fixtures_match_eager() {
    let cases: Vec<Case> = QWEN3_CASES.iter().map(|c| golden("qwen3", c)).collect();
    check(&cases);
}

#[test]
fn qwen2_fixtures_match_eager() {
    let cases: Vec<Case> = ["qwen2/gqa_tied_f32", "qwen2/untied_bf16"]
        .iter()
        .map(|c| golden("qwen2", c))
        .collect();
    check(&cases);
}

#[test]
fn llama_fixtures_match_eager() {
    let cases: Vec<Case> = LLAMA_CASES
        .iter()
        .map(|c| golden("llama", &format!("llama/{c}")))
        .collect();
    check(&cases);
}

/// The Qwen3-VL text decoder (a text-only prompt: 1-D positions, the
/// multimodal rotary tables from them).
#[test]
fn qwen3_vl_text_decoder_matches_eager() {
    let case = "qwen3_vl/p16_m2_tied_published";
    let path = fixture(case).join("reference_text_only.safetensors");
    check(&[Case {
        name: case.into(),
        script: script("qwen3_vl"),
        model: fixture(case),
        prompt: ref_i32s(&path, "input_ids"),
        more: ref_i32s(&path, "greedy_ids"),
    }]);
}

/// The real SmolLM2-135M-Instruct Q4_1 GGUF (fetched by
/// tests/fetch_assets.sh), exported dequantized: 30 layers, 49152 tokens.
#[test]
fn smollm2_gguf_dequantized_matches_eager() {
    let gguf = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        gguf.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` first",
        gguf.display()
    );
    // The start of the fixture's lighthouse text (tests/fixtures/smollm2).
    let json = std::fs::read_to_string(root().join("tests/fixtures/smollm2/logits.json"))
        .expect("logits.json");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let ids: Vec<i32> = doc["input_ids"]
        .as_array()
        .expect("input_ids")
        .iter()
        .map(|v| v.as_i64().expect("id") as i32)
        .collect();
    let case = || Case {
        name: "SmolLM2-135M-Instruct.Q4_1 (dequantized)".into(),
        script: script("llama"),
        model: gguf.clone(),
        prompt: ids[..12].to_vec(),
        more: ids[12..16].to_vec(),
    };
    // One after the other: each export holds 650 MB of f32 weights.
    check_graphs(&[case()], Graphs::NoCache);
    check_graphs(&[case()], Graphs::Cached);
}

/// A graph after every pass (q/k/v and gate/up merged with their norm,
/// residual add + norm fused, gated activations) lowers as well: the fused
/// ops' decompositions agree with eager through the KV I/O. Captured with
/// last-row logits (the final norm then fuses with its residual add).
#[test]
fn fused_graphs_export_and_match_eager() {
    use mllm_graph::onnx::{export_prepared, ExportOptions};
    let case = "gqa_tied_f32";
    let files = mllm_runtime::model_files::open(fixture(case).to_str().expect("path"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let model = mllm_runtime::model_files::load_model(&files, Some(&qwen3_script()))
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut dirs = vec![];
    let mut texts = String::new();
    for seq in [3, 1] {
        let g = mllm_interpreter::compile::capture_with_kv(
            &model,
            &mllm_backends::CpuBackend,
            seq,
            CONTEXT,
            true,
            mllm_backends::DType::F32,
            false,
        )
        .expect("capture");
        let g = mllm_graph::passes::all(g).expect("passes");
        texts.push_str(&mllm_graph::text::to_text(&g));
        let dir = tmp.path().join(format!("fused_{seq}"));
        export_prepared(&g, files.weights.as_ref(), &ExportOptions::default(), &dir)
            .unwrap_or_else(|e| panic!("{e}"));
        dirs.push(dir);
    }
    for fused in ["merged_linear", "add_rms_norm", "gated_act"] {
        assert!(
            texts.contains(fused),
            "no {fused} after the passes:\n{texts}"
        );
    }
    let r = reference(case);
    let all: Vec<i32> = r.input_ids.iter().chain(&r.greedy).copied().collect();
    let runs = [Run::new(
        format!("{case} fused, cached"),
        cached_plan(&all, &dirs[0], 3, 2, &dirs[1]),
    )];
    // One row per step: the eager logits of each step's last token.
    let full = data(&full_logits(&model, &all));
    let vocab = full.len() / all.len();
    let mut end = 0;
    let mut rows = vec![];
    for (_, ids) in &runs[0].steps {
        end += ids.len();
        rows.extend_from_slice(&full[(end - 1) * vocab..end * vocab]);
    }
    let expected = [rows];
    compare(&runs, &expected, tmp.path());
}
