//! `mllm vision-preprocess --model DIR --image FILE [--image FILE ...] --out
//! FILE.safetensors`: runs the Qwen-VL image preprocessing and writes
//! `pixel_values` (f32 [num_patches, C*T*P*P]) and `image_grid_thw`
//! (i64 [num_images, 3]) for comparing against transformers.

use std::path::Path;

use mllm_converter::image_preprocess::{preprocess_files, VisionPreprocessConfig};

use crate::{CliError, CliResult};

pub fn run(model: &str, images: &[String], out: &str) -> CliResult<()> {
    let dir = Path::new(model);
    if !dir.is_dir() {
        return Err(CliError(format!(
            "error: {model} is not a directory; --model takes a model directory with preprocessor_config.json"
        )));
    }
    let cfg = VisionPreprocessConfig::from_model_dir(dir)?;
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
    )?;
    let grid_view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::I64,
        vec![patches.grid_thw.len(), 3],
        &grid,
    )?;
    safetensors::serialize_to_file(
        [("pixel_values", pixel_view), ("image_grid_thw", grid_view)],
        None,
        Path::new(out),
    )
    .map_err(|e| CliError(format!("error: {out}: {e}")))?;
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
