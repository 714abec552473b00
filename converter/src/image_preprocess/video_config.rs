//! The video processor's settings, read the way transformers 5 builds
//! `Qwen3VLVideoProcessor`: from `video_preprocessor_config.json`, else from
//! `preprocessor_config.json` (transformers falls back to it), over the
//! class defaults.

use std::path::Path;

use serde_json::Value;

use super::config::{positive, read_json, VisionPreprocessConfig};
use crate::error::{ConvertError, Result};

/// The frame rate transformers assumes for frames given without metadata
/// (a list of images or an array): `Qwen3VLVideoProcessor.sample_frames`
/// and `Qwen3VLProcessor.replace_video_token` both default to 24.
pub const DEFAULT_LIST_FPS: f64 = 24.0;

/// Most frames we sample from one video (the published `max_frames`).
const MAX_FRAMES_CEILING: usize = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct VideoPreprocessConfig {
    /// Patch sizes, pixel budget (`size`), normalization and flags.
    pub base: VisionPreprocessConfig,
    /// Frames to sample per second of video (`fps`, default 2; `null`
    /// turns fps sampling off).
    pub fps: Option<f64>,
    /// A fixed number of frames to sample instead (`num_frames`).
    pub num_frames: Option<usize>,
    pub min_frames: usize,
    pub max_frames: usize,
    pub do_sample_frames: bool,
    /// qwen-vl-utils' per-frame pixel cap (`cap_pixels_per_frame`; off by
    /// default in transformers 5.24).
    pub cap_pixels_per_frame: bool,
    pub max_video_tokens: usize,
}

impl VideoPreprocessConfig {
    /// `Qwen3VLVideoProcessor`'s class defaults.
    pub fn qwen3_vl_defaults() -> VideoPreprocessConfig {
        let mut base = VisionPreprocessConfig::qwen3_vl();
        base.min_pixels = 128 * 32 * 32;
        base.max_pixels = 32 * 32 * 768;
        VideoPreprocessConfig {
            base,
            fps: Some(2.0),
            num_frames: None,
            min_frames: 4,
            max_frames: 768,
            do_sample_frames: true,
            cap_pixels_per_frame: false,
            max_video_tokens: 768,
        }
    }

    /// Parses a video (or image) processor config object.
    pub fn from_json(json: &Value, what: &str) -> Result<VideoPreprocessConfig> {
        let mut c = Self::qwen3_vl_defaults();
        c.base = VisionPreprocessConfig::from_json_over(json, what, c.base, false)?;
        let count = |key: &str, default: usize| -> Result<usize> {
            match json.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => positive(v, key, what),
            }
        };
        c.min_frames = count("min_frames", c.min_frames)?;
        c.max_frames = count("max_frames", c.max_frames)?.min(MAX_FRAMES_CEILING);
        c.max_video_tokens = count("max_video_tokens", c.max_video_tokens)?;
        c.num_frames = match json.get("num_frames") {
            None | Some(Value::Null) => None,
            Some(v) => Some(positive(v, "num_frames", what)?),
        };
        c.fps = match json.get("fps") {
            None => c.fps,
            Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|f| *f > 0.0 && f.is_finite())
                    .ok_or_else(|| {
                        ConvertError::Corrupt(format!(
                            "{what}: fps must be a positive number, got {v}"
                        ))
                    })?,
            ),
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match json.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(ConvertError::Corrupt(format!(
                    "{what}: {key} must be true or false, got {v}"
                ))),
            }
        };
        c.do_sample_frames = flag("do_sample_frames", c.do_sample_frames)?;
        c.cap_pixels_per_frame = flag("cap_pixels_per_frame", c.cap_pixels_per_frame)?;
        if c.do_sample_frames && c.fps.is_some() && c.num_frames.is_some() {
            return Err(ConvertError::Corrupt(format!(
                "{what}: `num_frames` and `fps` are mutually exclusive (as in transformers); \
                 set one of them to null"
            )));
        }
        Ok(c)
    }

    /// The class defaults with config.json's `vision_config` patch sizes
    /// (a checkpoint without processor files).
    pub fn from_vision_config(v: &Value, what: &str) -> Result<VideoPreprocessConfig> {
        let mut c = Self::qwen3_vl_defaults();
        let b = VisionPreprocessConfig::from_vision_config(v, what)?;
        c.base.patch_size = b.patch_size;
        c.base.temporal_patch_size = b.temporal_patch_size;
        c.base.merge_size = b.merge_size;
        Ok(c)
    }

    /// `DIR/video_preprocessor_config.json`, else `preprocessor_config.json`,
    /// else config.json's `vision_config`.
    pub fn from_model_dir(dir: &Path) -> Result<VideoPreprocessConfig> {
        for name in ["video_preprocessor_config.json", "preprocessor_config.json"] {
            let p = dir.join(name);
            if p.is_file() {
                return Self::from_json(&read_json(&p)?, &p.display().to_string());
            }
        }
        let config = dir.join("config.json");
        if config.is_file() {
            if let Some(v) = read_json(&config)?.get("vision_config") {
                return Self::from_vision_config(v, &config.display().to_string());
            }
        }
        Err(ConvertError::NotFound(format!(
            "{}: no video_preprocessor_config.json, preprocessor_config.json or config.json \
             with a vision_config; video preprocessing needs one of them",
            dir.display()
        )))
    }
}
