//! `mllm exec SCRIPT --model DIR --input-ids a,b,c`: prefill, optional logits
//! dump, optional greedy decoding through the KV cache.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use mllm_backends::{CpuBackend, Op, Tensor};
use mllm_interpreter::mrope::mrope_positions;
use mllm_interpreter::{Eager, Executor, KvCache, Model, Value};
use serde_json::Value as Json;

use crate::engine::run_forward;
use crate::model_files;
use crate::{color, CliError, CliResult};

pub struct ExecArgs {
    pub script: String,
    pub model: String,
    pub input_ids: Vec<i32>,
    pub logits_out: Option<String>,
    pub max_new_tokens: usize,
    pub stop_at_eos: bool,
    pub load: model_files::LoadOptions,
    /// A safetensors file with `pixel_values` and `image_grid_thw`.
    pub pixel_values: Option<String>,
}

/// Images of a prompt as the Hugging Face processor outputs them:
/// `pixel_values` f32 [patches, C*T*P*P] and one (t, h, w) patch grid each.
pub struct Images {
    pub pixel_values: Tensor,
    pub grid_thw: Vec<[i64; 3]>,
}

/// Reads `pixel_values` (f32) and `image_grid_thw` (i64 or i32 [images, 3]).
pub fn read_images(path: &str) -> CliResult<Images> {
    let err = |m: String| CliError(format!("error: {path}: {m}"));
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| err(e.to_string()))?;
    let pv = st
        .tensor("pixel_values")
        .map_err(|_| err("no tensor `pixel_values`".into()))?;
    if pv.dtype() != safetensors::Dtype::F32 || pv.shape().len() != 2 {
        return Err(err(format!(
            "`pixel_values` must be f32 [patches, C*T*P*P], found {:?} {:?}",
            pv.dtype(),
            pv.shape()
        )));
    }
    let data = pv
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let pixel_values = Tensor::from_f32(data, pv.shape().to_vec())?;
    let g = st
        .tensor("image_grid_thw")
        .map_err(|_| err("no tensor `image_grid_thw`".into()))?;
    let flat: Vec<i64> = match g.dtype() {
        safetensors::Dtype::I64 => g
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        safetensors::Dtype::I32 => g
            .data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        d => {
            return Err(err(format!(
                "`image_grid_thw` must be i64 or i32, found {d:?}"
            )))
        }
    };
    if g.shape().len() != 2 || g.shape()[1] != 3 || g.shape()[0] == 0 {
        return Err(err(format!(
            "`image_grid_thw` must be [images, 3], found {:?}",
            g.shape()
        )));
    }
    let grid_thw = flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    Ok(Images {
        pixel_values,
        grid_thw,
    })
}

fn config_int(config: &Json, path: &[&str], default: Option<i64>) -> CliResult<i64> {
    let mut v = Some(config);
    for k in path {
        v = v.and_then(|x| x.get(k));
    }
    match (v.and_then(|x| x.as_i64()), default) {
        (Some(x), _) | (None, Some(x)) => Ok(x),
        (None, None) => Err(CliError(format!(
            "error: config.json has no integer `{}`, which a prompt with images needs",
            path.join(".")
        ))),
    }
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

/// A model loaded from a script and a checkpoint, ready to run.
pub struct Loaded {
    pub model: Model,
    pub exec: Eager<CpuBackend>,
    pub eos: Vec<u32>,
    pub config: Json,
}

pub fn load(script: &str, model_path: &str) -> CliResult<Loaded> {
    load_with(script, model_path, model_files::LoadOptions::default())
}

pub fn load_with(
    script: &str,
    model_path: &str,
    opts: model_files::LoadOptions,
) -> CliResult<Loaded> {
    let files = model_files::open_with(model_path, opts)?;
    let model = model_files::load_model(&files, Some(script))?;
    Ok(Loaded {
        model,
        exec: Eager {
            backend: CpuBackend,
        },
        eos: files.eos,
        config: files.config,
    })
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
        run_forward(&self.model, &mut self.exec, cache, ids, start, last_only)
    }

    /// Prefills a prompt with images (ids already hold each image's
    /// placeholder tokens) at multimodal rotary positions; returns the logits
    /// and the offset `delta` at which decoding continues (token `i` of the
    /// sequence sits at position `i + delta`).
    pub fn prefill_images(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        images: &Images,
        last_only: bool,
    ) -> CliResult<(Tensor, i64)> {
        let token = config_int(&self.config, &["image_token_id"], None)?;
        let merge = config_int(
            &self.config,
            &["vision_config", "spatial_merge_size"],
            Some(2),
        )?;
        let token = i32::try_from(token)
            .map_err(|_| CliError(format!("error: image_token_id {token} is out of range")))?;
        let p = mrope_positions(ids, token, &images.grid_thw, merge).map_err(|e| {
            CliError(format!(
                "error: image tokens and image_grid_thw disagree: {e}"
            ))
        })?;
        let n = ids.len();
        let rows: Vec<i32> = p.rows.concat();
        let grids: Vec<i32> = images
            .grid_thw
            .iter()
            .flatten()
            .map(|&v| i32::try_from(v).unwrap_or(i32::MAX))
            .collect();
        let k = images.grid_thw.len();
        let out = self
            .model
            .forward(
                &mut self.exec,
                vec![
                    (
                        "input_ids",
                        Value::Tensor(Tensor::from_i32(ids.to_vec(), vec![n])?),
                    ),
                    (
                        "positions",
                        Value::Tensor(Tensor::from_i32(rows, vec![3, n])?),
                    ),
                    ("cache", Value::Cache(cache.clone())),
                    ("pixel_values", Value::Tensor(images.pixel_values.clone())),
                    (
                        "image_grid_thw",
                        Value::Tensor(Tensor::from_i32(grids, vec![k, 3])?),
                    ),
                    ("last_only", Value::Bool(last_only)),
                ],
            )
            .map_err(|e| CliError(e.render(&self.model.program.sources, color())))?;
        match out {
            Value::Tensor(t) if t.rank() == 2 && t.shape()[0] >= 1 => Ok((t, p.delta)),
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
    let mut m = load_with(&a.script, &a.model, a.load)?;
    let load_s = t0.elapsed().as_secs_f64();
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let t1 = Instant::now();
    let need_all = a.logits_out.is_some();
    let images = a.pixel_values.as_deref().map(read_images).transpose()?;
    let (logits, delta) = match &images {
        Some(images) => m.prefill_images(&cache, &a.input_ids, images, !need_all)?,
        None => (m.step(&cache, &a.input_ids, 0, !need_all)?, 0),
    };
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
            let done =
                line.len() == a.max_new_tokens || (a.stop_at_eos && m.eos.contains(&(next as u32)));
            if done {
                break;
            }
            // After images, positions run `delta` from the token index.
            let rope_pos = usize::try_from(pos as i64 + delta)
                .map_err(|_| CliError("error: negative decode position".into()))?;
            let l = m.step(&cache, &[next], rope_pos, true)?;
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
