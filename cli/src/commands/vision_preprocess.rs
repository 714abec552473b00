//! `mllm vision-preprocess --model DIR|FILE.mllm --image FILE [--image FILE ...] --out
//! FILE.safetensors`: runs the Qwen-VL image preprocessing and writes
//! `pixel_values` (f32 [num_patches, C*T*P*P]) and `image_grid_thw`
//! (i64 [num_images, 3]) for comparing against transformers.

use std::path::Path;

use mllm_runtime::image_preprocess::{preprocess_files, VisionPreprocessConfig};

use crate::{CliError, CliResult};

pub fn run(model: &str, images: &[String], out: &str) -> CliResult<()> {
    let dir = Path::new(model);
    let cfg = if dir.is_dir() {
        VisionPreprocessConfig::from_model_dir(dir)?
    } else if dir.is_file() && mllm_runtime::mllm_format::is_mllm_file(dir) {
        // A converted vision model carries its processor settings.
        let f = mllm_runtime::mllm_format::MllmFile::open(dir)?;
        let what = format!("the preprocessor config in {model}");
        match (f.preprocessor_config(), f.config().get("vision_config")) {
            (Some(p), _) => VisionPreprocessConfig::from_json(p, &what)?,
            (None, Some(v)) => VisionPreprocessConfig::from_vision_config(v, model)?,
            (None, None) => {
                return Err(CliError::invalid(format!(
                    "{model} is not a vision model (no preprocessor config, no vision_config)"
                )))
            }
        }
    } else {
        return Err(CliError::invalid(format!("{model}: --model takes a model directory with preprocessor_config.json or a .mllm file"
        )));
    };
    let patches = preprocess_files(images, &cfg)?;
    let pixels: Vec<u8> = patches
        .pixel_values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let grid: Vec<u8> = patches
        .grid_thw
        .iter()
        .flatten()
        .flat_map(|&g| (g as i64).to_le_bytes())
        .collect();
    let pixel_view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        patches.shape().to_vec(),
        &pixels,
    )
    .map_err(|e| CliError::invalid(e.to_string()))?;
    let grid_view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::I64,
        vec![patches.grid_thw.len(), 3],
        &grid,
    )
    .map_err(|e| CliError::invalid(e.to_string()))?;
    safetensors::serialize_to_file(
        [("pixel_values", pixel_view), ("image_grid_thw", grid_view)],
        None,
        Path::new(out),
    )
    .map_err(|e| CliError::io(format!("{out}: {e}")))?;
    let merge = cfg.merge_size * cfg.merge_size;
    for (path, g) in images.iter().zip(&patches.grid_thw) {
        println!(
            "{path}: image_grid_thw {},{},{} ({} patches, {} tokens)",
            g[0],
            g[1],
            g[2],
            g[0] * g[1] * g[2],
            g[0] * g[1] * g[2] / merge
        );
    }
    Ok(())
}
