//! Helpers of the ONNX export tests: exporting through the `mllm export`
//! command's code, running exported graphs with onnxruntime (a pinned
//! PyPI wheel in `.cache/onnx-venv`, installed by `tests/onnx/setup.sh`)
//! through `tests/onnx/check.py`, and step plans that drive the KV cache
//! as a host would. `MLLM_SKIP_ONNX=1` skips the onnxruntime runs
//! knowingly (and says so); nothing else does.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use mllm_cli::commands::export::{run as export_run, ExportArgs};

use crate::common::root;

/// The venv's python, installed on first use; None when skipped.
pub fn python() -> Option<PathBuf> {
    static PY: OnceLock<Option<PathBuf>> = OnceLock::new();
    PY.get_or_init(|| {
        if std::env::var_os("MLLM_SKIP_ONNX").is_some() {
            eprintln!("MLLM_SKIP_ONNX is set: exported graphs were NOT run with onnxruntime");
            return None;
        }
        let setup = root().join("tests/onnx/setup.sh");
        let out = Command::new("bash")
            .arg(&setup)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", setup.display()));
        assert!(
            out.status.success(),
            "{} failed (set MLLM_SKIP_ONNX=1 to skip the onnxruntime checks knowingly):\n{}",
            setup.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let py = stdout.lines().last().unwrap_or("").trim().to_string();
        assert!(
            Path::new(&py).is_file(),
            "setup.sh printed no python: {stdout}"
        );
        Some(PathBuf::from(py))
    })
    .clone()
}

pub struct Export<'a> {
    pub script: &'a str,
    pub model: &'a str,
    pub seq: usize,
    /// None: `--no-cache`.
    pub context: Option<usize>,
    pub quant: &'a str,
}

/// Runs `mllm export` into `out`; panics with the command's message.
pub fn export(e: &Export, out: &Path) {
    export_try(e, out).unwrap_or_else(|msg| panic!("export of {} failed:\n{msg}", e.model));
}

pub fn export_try(e: &Export, out: &Path) -> Result<(), String> {
    export_target(e, "generic", out)
}

/// `export_try` for `--target TARGET`.
pub fn export_target(e: &Export, target: &str, out: &Path) -> Result<(), String> {
    export_run(ExportArgs {
        script: e.script.to_string(),
        model: e.model.to_string(),
        format: "onnx".into(),
        seq: e.seq,
        context: e.context,
        no_cache: e.context.is_none(),
        quant: e.quant.into(),
        target: target.into(),
        out: out.to_path_buf(),
    })
    .map(|_| ())
    .map_err(|e| e.render(false))
}

/// One run for check.py: `steps` are (graph dir, ids) fed in order.
pub struct Run {
    pub name: String,
    pub steps: Vec<(PathBuf, Vec<i32>)>,
    /// Times each step this many times (median), for speed measurements.
    pub repeat: usize,
    /// Inputs read from files instead of token ids (single-op graphs):
    /// `{input name: raw file}`, fed to every step.
    pub feeds: Option<serde_json::Value>,
    /// Re-quantize the weights with the export's QNN quantization
    /// overrides before running (check.py's fake quantization).
    pub fake_quant: bool,
}

impl Run {
    pub fn new(name: String, steps: Vec<(PathBuf, Vec<i32>)>) -> Run {
        Run {
            name,
            steps,
            repeat: 1,
            feeds: None,
            fake_quant: false,
        }
    }
}

/// What check.py returned for one run.
pub struct RunOut {
    pub logits: Vec<f32>,
    pub rows: usize,
    pub vocab: usize,
    pub step_seconds: Vec<f64>,
    /// With `fake_quant`: the largest change the overrides made to a weight.
    pub weight_change: Option<f64>,
}

/// Runs `runs` with onnxruntime (`threads` intra-op threads) in one python
/// process, collecting their `logits`; None when skipped.
pub fn run_ort(runs: &[Run], threads: usize, tmp: &Path) -> Option<Vec<RunOut>> {
    run_ort_with(runs, threads, tmp, "logits")
}

/// `run_ort` collecting output `output`.
pub fn run_ort_with(runs: &[Run], threads: usize, tmp: &Path, output: &str) -> Option<Vec<RunOut>> {
    let py = python()?;
    let jobs: Vec<serde_json::Value> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::json!({
                "name": r.name,
                "out": tmp.join(format!("logits_{i}.bin")),
                "repeat": r.repeat,
                "output": output,
                "fake_quant": r.fake_quant,
                "steps": r.steps.iter().map(|(m, ids)| match &r.feeds {
                    Some(f) => serde_json::json!({"model": m, "feeds": f}),
                    None => serde_json::json!({"model": m, "ids": ids}),
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    let job_file = tmp.join("jobs.json");
    let doc = serde_json::json!({"threads": threads, "runs": jobs});
    std::fs::write(&job_file, doc.to_string()).expect("write jobs.json");
    let script = root().join("tests/onnx/check.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(&job_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
    assert!(
        out.status.success(),
        "onnxruntime check failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("check.py prints JSON lines"))
        .collect();
    assert_eq!(lines.len(), runs.len(), "check.py output: {stdout}");
    Some(
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let bytes = std::fs::read(tmp.join(format!("logits_{i}.bin"))).expect("logits");
                RunOut {
                    logits: bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                    rows: l["rows"].as_u64().expect("rows") as usize,
                    vocab: l["vocab"].as_u64().expect("vocab") as usize,
                    step_seconds: l["step_seconds"]
                        .as_array()
                        .expect("times")
                        .iter()
                        .map(|t| t.as_f64().expect("seconds"))
                        .collect(),
                    weight_change: l["weight_change"].as_f64(),
                }
            })
            .collect(),
    )
}

/// Steps feeding `ids` through a cached chunk graph (`chunk` tokens a step)
/// for `chunks` steps, then the decode graph one token at a time.
pub fn cached_plan(
    ids: &[i32],
    chunk_graph: &Path,
    chunk: usize,
    chunks: usize,
    decode_graph: &Path,
) -> Vec<(PathBuf, Vec<i32>)> {
    let head = (chunk * chunks).min(ids.len() / chunk * chunk);
    let mut steps: Vec<(PathBuf, Vec<i32>)> = ids[..head]
        .chunks(chunk)
        .map(|c| (chunk_graph.to_path_buf(), c.to_vec()))
        .collect();
    steps.extend(
        ids[head..]
            .iter()
            .map(|&t| (decode_graph.to_path_buf(), vec![t])),
    );
    steps
}

/// Reads an export's io.json.
pub fn io_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("io.json")).expect("io.json");
    serde_json::from_str(&text).expect("io.json is JSON")
}
