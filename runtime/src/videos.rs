//! Videos in prompts (Qwen3-VL): frames from a directory or an animated
//! PNG/WebP preprocessed into `pixel_values_videos` + `video_grid_thw`, and
//! the prompt text transformers' `Qwen3VLProcessor` writes for them: each
//! `<|video_pad|>` of the chat template becomes, per temporal patch,
//! `<{t:.1} seconds><|vision_start|>` + one pad per merged patch +
//! `<|vision_end|>` (the template's own start/end tokens stay around it).
//!
//! The videos ride along with a prompt's images (`Images::videos`), so every
//! path that prefills images (run, chat, engine, sequence) carries them.

use mllm_backends::Tensor;
use mllm_converter::image_preprocess::{decode_video, VideoPreprocessConfig};

use crate::images::{ImageTokens, Images};
use crate::model_files::ModelFiles;
use crate::{Error, Result};

/// The videos of a prompt, as the Hugging Face video processor outputs them.
#[derive(Clone, Debug)]
pub struct Videos {
    /// f32 `[patches, C*T*P*P]`, videos concatenated in order.
    pub pixel_values: Tensor,
    /// One `[t, h, w]` per video (t counts temporal patches).
    pub grid_thw: Vec<[i64; 3]>,
    /// Seconds of each temporal patch, per video.
    pub timestamps: Vec<Vec<f64>>,
}

/// The video processor settings of the model in `files`:
/// `video_preprocessor_config.json`, else `preprocessor_config.json` (as
/// transformers falls back), else `vision_config` with the class defaults.
pub fn video_config(files: &ModelFiles, spec: &ImageTokens) -> Result<VideoPreprocessConfig> {
    let what = |name: &str| format!("the {name} of {}", files.path.display());
    let cfg = if let Some(v) = &files.video_preprocessor_config {
        VideoPreprocessConfig::from_json(v, &what("video_preprocessor_config.json"))?
    } else if let Some(p) = &files.preprocessor_config {
        VideoPreprocessConfig::from_json(p, &what("preprocessor config"))?
    } else {
        let v = files.config.get("vision_config").ok_or_else(|| {
            Error::invalid(format!("{} has no video/image processor config and no vision_config; it does not take videos",
                files.path.display()
            ))
        })?;
        VideoPreprocessConfig::from_vision_config(v, &files.config_origin)?
    };
    if cfg.base.merge_size as i64 != spec.merge {
        return Err(Error::invalid(format!(
            "the video processor merges {} patches per side but the model {}",
            cfg.base.merge_size, spec.merge
        )));
    }
    Ok(cfg)
}

/// Preprocesses videos (frame directories or animated PNG/WebP files) for
/// the model in `files`. `fps`: the frames' rate (default: an animation's
/// own, else 24 as transformers assumes for frames without metadata).
pub fn from_paths(
    files: &ModelFiles,
    spec: &ImageTokens,
    paths: &[String],
    fps: Option<f64>,
) -> Result<Videos> {
    if spec.video.is_none() {
        return Err(Error::invalid(
            "config.json has no `video_token_id`; this model does not take videos",
        ));
    }
    let cfg = video_config(files, spec)?;
    let mut data = vec![];
    let mut width = 0;
    let mut grid_thw = vec![];
    let mut timestamps = vec![];
    for p in paths {
        let v = decode_video(std::path::Path::new(p), fps, &cfg)
            .map_err(|e| Error::invalid(format!("video {p}: {e}")))?;
        width = v.patch_dim;
        data.extend(v.pixel_values);
        grid_thw.push(v.grid_thw.map(|x| x as i64));
        timestamps.push(v.timestamps);
    }
    let rows = data.len() / width.max(1);
    Ok(Videos {
        pixel_values: Tensor::from_f32(data, vec![rows, width])?,
        grid_thw,
        timestamps,
    })
}

/// Images and videos for a prompt: `images` (already preprocessed, or
/// none) with `videos` attached. None when there are neither.
pub fn with_videos(
    files: &ModelFiles,
    images: Option<(Images, ImageTokens)>,
    videos: &[String],
    fps: Option<f64>,
) -> Result<Option<(Images, ImageTokens)>> {
    if videos.is_empty() {
        return Ok(images);
    }
    let (mut imgs, spec) = match images {
        Some(x) => x,
        None => {
            let spec = ImageTokens::for_files(files)?;
            (Images::none(), spec)
        }
    };
    imgs.videos = Some(from_paths(files, &spec, videos, fps)?);
    Ok(Some((imgs, spec)))
}

/// The text one video's `<|video_pad|>` becomes.
fn video_text(
    files: &ModelFiles,
    spec: &ImageTokens,
    grid: [i64; 3],
    stamps: &[f64],
) -> Result<String> {
    let pad = crate::images::token_text(files, spec.video)?;
    let start = crate::images::token_text(files, spec.vision_start)?;
    let end = crate::images::token_text(files, spec.vision_end)?;
    let per_frame = spec.count([1, grid[1], grid[2]]);
    if stamps.len() != grid[0].max(0) as usize {
        return Err(Error::invalid(format!(
            "a video of {} temporal patches has {} timestamps",
            grid[0],
            stamps.len()
        )));
    }
    Ok(stamps
        .iter()
        .map(|t| format!("<{t:.1} seconds>{start}{}{end}", pad.repeat(per_frame)))
        .collect())
}

/// Replaces the `i`-th `<|video_pad|>` of `text` by video `i`'s frames.
pub fn expand_video_placeholders(
    files: &ModelFiles,
    text: &str,
    images: &Images,
    spec: &ImageTokens,
) -> Result<String> {
    let Some(v) = &images.videos else {
        return Ok(text.to_string());
    };
    let pad = crate::images::token_text(files, spec.video)?;
    let pieces: Vec<&str> = text.split(pad.as_str()).collect();
    if pieces.len() != v.grid_thw.len() + 1 {
        return Err(Error::invalid(format!(
            "the prompt has {} video placeholders ({pad}) for {} videos",
            pieces.len() - 1,
            v.grid_thw.len()
        )));
    }
    let mut out = String::with_capacity(text.len());
    for (i, piece) in pieces.iter().enumerate() {
        out.push_str(piece);
        if let (Some(g), Some(t)) = (v.grid_thw.get(i), v.timestamps.get(i)) {
            out.push_str(&video_text(files, spec, *g, t)?);
        }
    }
    Ok(out)
}

/// Number of videos in `images`.
pub fn count(images: &Images) -> usize {
    images.videos.as_ref().map_or(0, |v| v.grid_thw.len())
}

/// The videos of several prompts' parts, in order, as one batch.
pub fn concat(parts: &[&Videos]) -> Result<Option<Videos>> {
    let Some(first) = parts.first() else {
        return Ok(None);
    };
    let width = first.pixel_values.shape().get(1).copied().unwrap_or(0);
    let (mut data, mut grid_thw, mut timestamps) = (vec![], vec![], vec![]);
    for p in parts {
        if p.pixel_values.shape().get(1).copied().unwrap_or(0) != width {
            return Err(Error::invalid("videos with different patch sizes"));
        }
        data.extend(p.pixel_values.to_f32_vec()?);
        grid_thw.extend(p.grid_thw.iter().copied());
        timestamps.extend(p.timestamps.iter().cloned());
    }
    let rows = data.len() / width.max(1);
    Ok(Some(Videos {
        pixel_values: Tensor::from_f32(data, vec![rows, width])?,
        grid_thw,
        timestamps,
    }))
}
