//! `mllm exec SCRIPT --model DIR --input-ids a,b,c`: prefill, optional logits
//! dump, optional greedy decoding through the KV cache.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use mllm_backends::{CpuBackend, Op, Tensor};
use mllm_converter::HfModelDir;
use mllm_interpreter::{Eager, Executor, KvCache, Model, Value};

use crate::commands::check::check_script;
use crate::{color, CliError, CliResult};

pub struct ExecArgs {
    pub script: String,
    pub model: String,
    pub input_ids: Vec<i32>,
    pub logits_out: Option<String>,
    pub max_new_tokens: usize,
    pub stop_at_eos: bool,
}

/// Parses `1,2,3` into token ids.
pub fn parse_ids(s: &str) -> Result<Vec<i32>, String> {
    let ids: Result<Vec<i32>, String> = s
        .split(',')
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<i32>()
                .ok()
                .filter(|v| *v >= 0)
                .ok_or_else(|| format!("`{t}` is not a token id (a non-negative integer)"))
        })
        .collect();
    let ids = ids?;
    if ids.is_empty() {
        return Err("--input-ids needs at least one id, e.g. --input-ids 9707,11,1879".into());
    }
    Ok(ids)
}

/// A model loaded from a script and a Hugging Face directory, ready to run.
pub struct Loaded {
    pub model: Model,
    pub exec: Eager<CpuBackend>,
    pub eos: Vec<i32>,
}

pub fn load(script: &str, model_dir: &str) -> CliResult<Loaded> {
    let prog = check_script(script)?;
    let dir = HfModelDir::open(Path::new(model_dir))?;
    let mut exec = Eager {
        backend: CpuBackend,
    };
    let prog = Rc::new(prog);
    let origin = dir.config_path.display().to_string();
    let model = Model::load(
        prog.clone(),
        &dir.config,
        &origin,
        Some(&dir.weights),
        &mut exec,
    )
    .map_err(|errs| {
        let n = errs.len();
        let mut out: Vec<String> = errs
            .iter()
            .take(20)
            .map(|e| e.render(&prog.sources, color()))
            .collect();
        if n > 20 {
            out.push(format!("... and {} more", n - 20));
        }
        out.push(format!(
            "error: cannot load {model_dir} with {script} ({n} problem{})",
            if n == 1 { "" } else { "s" }
        ));
        CliError(out.join("\n"))
    })?;
    let eos = eos_ids(&dir.config);
    Ok(Loaded { model, exec, eos })
}

fn eos_ids(config: &serde_json::Value) -> Vec<i32> {
    match config.get("eos_token_id") {
        Some(serde_json::Value::Number(n)) => {
            n.as_i64().map(|v| vec![v as i32]).unwrap_or_default()
        }
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_i64())
            .map(|v| v as i32)
            .collect(),
        _ => vec![],
    }
}

impl Loaded {
    /// Runs the entry forward on `ids` at positions `start..`; returns logits.
    pub fn step(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        last_only: bool,
    ) -> CliResult<Tensor> {
        let n = ids.len();
        let input = Tensor::from_i32(ids.to_vec(), vec![n])?;
        let pos = Tensor::from_i32((start..start + n).map(|p| p as i32).collect(), vec![n])?;
        let out = self
            .model
            .forward(
                &mut self.exec,
                vec![
                    ("input_ids", Value::Tensor(input)),
                    ("positions", Value::Tensor(pos)),
                    ("cache", Value::Cache(cache.clone())),
                    ("last_only", Value::Bool(last_only)),
                ],
            )
            .map_err(|e| CliError(e.render(&self.model.program.sources, color())))?;
        match out {
            Value::Tensor(t) if t.rank() == 2 => Ok(t),
            other => Err(CliError(format!(
                "error: the script's forward returned {other:?}, expected logits [seq, vocab]"
            ))),
        }
    }

    pub fn argmax_last(&mut self, logits: &Tensor) -> CliResult<i32> {
        let rows = logits.shape()[0];
        let last = logits.narrow0(rows - 1, rows)?;
        let idx = self.exec.run(&Op::Argmax { dim: 1 }, &[&last])?;
        Ok(idx.i32s()?[0])
    }
}

pub fn write_logits(path: &str, logits: &Tensor) -> CliResult<()> {
    let data = logits.to_f32_vec()?;
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        logits.shape().to_vec(),
        &bytes,
    )?;
    safetensors::serialize_to_file([("logits", view)], None, Path::new(path))?;
    Ok(())
}

pub fn run(a: ExecArgs) -> CliResult<()> {
    let t0 = Instant::now();
    let mut m = load(&a.script, &a.model)?;
    let load_s = t0.elapsed().as_secs_f64();
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let t1 = Instant::now();
    let need_all = a.logits_out.is_some();
    let logits = m.step(&cache, &a.input_ids, 0, !need_all)?;
    let prefill_s = t1.elapsed().as_secs_f64();
    if let Some(path) = &a.logits_out {
        write_logits(path, &logits)?;
    }
    let mut line = vec![];
    let t2 = Instant::now();
    if a.max_new_tokens > 0 {
        let mut next = m.argmax_last(&logits)?;
        let start = a.input_ids.len();
        for pos in start..start + a.max_new_tokens {
            line.push(next);
            let done = line.len() == a.max_new_tokens || (a.stop_at_eos && m.eos.contains(&next));
            if done {
                break;
            }
            let l = m.step(&cache, &[next], pos, true)?;
            next = m.argmax_last(&l)?;
        }
        println!(
            "{}",
            line.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    let decode_s = t2.elapsed().as_secs_f64();
    let n = a.input_ids.len();
    eprintln!(
        "load {:.2}s | prefill {n} tok in {:.1} ms ({:.1} tok/s) | decode {} tok ({:.1} tok/s)",
        load_s,
        prefill_s * 1e3,
        n as f64 / prefill_s.max(1e-9),
        line.len(),
        line.len().saturating_sub(1) as f64 / decode_s.max(1e-9),
    );
    Ok(())
}
