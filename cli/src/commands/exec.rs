//! `mllm exec [SCRIPT] --model DIR --input-ids a,b,c`: prefill, optional logits
//! dump, optional greedy decoding through the KV cache.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use mllm_runtime::images::{read_images, ImageTokens};
use mllm_runtime::{model_files, Loaded};
use mllm_runtime::{KvCache, Tensor};

use crate::{CliError, CliResult};

pub struct ExecArgs {
    /// None: the built-in script for the checkpoint's architecture.
    pub script: Option<String>,
    pub model: String,
    /// The vision tower of a GGUF `model` (`--mmproj`): llama.cpp's mmproj file.
    pub mmproj: Option<String>,
    pub input_ids: Vec<i32>,
    pub logits_out: Option<String>,
    pub max_new_tokens: usize,
    pub stop_at_eos: bool,
    pub load: model_files::LoadOptions,
    /// A safetensors file with `pixel_values` and `image_grid_thw`.
    pub pixel_values: Option<String>,
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

pub fn write_logits(path: &str, logits: &Tensor) -> CliResult<()> {
    let data = logits.to_f32_vec()?;
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        logits.shape().to_vec(),
        &bytes,
    )
    .map_err(|e| CliError::invalid(e.to_string()))?;
    safetensors::serialize_to_file([("logits", view)], None, Path::new(path))
        .map_err(|e| CliError::io(format!("{path}: {e}")))?;
    Ok(())
}

/// `mllm_runtime::load_with` with the model's mmproj, if any; a prompt
/// with images on a model that takes none stops here, before any work.
fn load(a: &ExecArgs) -> CliResult<Loaded> {
    let files = model_files::open_with_mmproj(&a.model, a.mmproj.as_deref(), a.load)?;
    if a.pixel_values.is_some() {
        ImageTokens::for_files(&files)?;
    }
    mllm_runtime::loaded::from_files(a.script.as_deref(), files, a.load)
}

pub fn run(a: ExecArgs) -> CliResult<()> {
    let t0 = Instant::now();
    let mut m = load(&a)?;
    let load_s = t0.elapsed().as_secs_f64();
    let cache = KvCache::with_dtype(a.load.kv.0).map_err(|e| CliError::invalid(e.to_string()))?;
    let cache = Rc::new(RefCell::new(cache));
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
                .map_err(|_| CliError::invalid("negative decode position"))?;
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
