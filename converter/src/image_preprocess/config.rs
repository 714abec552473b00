//! The image processor's settings, read from a checkpoint's
//! `preprocessor_config.json` the way transformers reads them into
//! `Qwen2VLImageProcessor` (which Qwen2-VL, Qwen2.5-VL and Qwen3-VL share).

use std::path::Path;

use serde_json::Value;

use crate::error::{ConvertError, Result};

/// PIL's resampling ids as stored in `"resample"`; only bicubic is implemented
/// (the value every Qwen-VL checkpoint uses).
pub const RESAMPLE_BICUBIC: u64 = 3;

/// transformers' defaults when a config has no mean/std (Python floats,
/// rounded to f32 when torch builds the tensors, as here).
const OPENAI_CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const OPENAI_CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

#[derive(Clone, Debug, PartialEq)]
pub struct VisionPreprocessConfig {
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    /// `size.shortest_edge` (or legacy `min_pixels`): the least number of pixels
    /// after resizing, despite its name.
    pub min_pixels: usize,
    /// `size.longest_edge` (or legacy `max_pixels`).
    pub max_pixels: usize,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub rescale_factor: f64,
    pub do_resize: bool,
    pub do_rescale: bool,
    pub do_normalize: bool,
}

impl VisionPreprocessConfig {
    /// The published Qwen3-VL values (Qwen3-VL-2B/4B/8B-Instruct
    /// preprocessor_config.json).
    pub fn qwen3_vl() -> VisionPreprocessConfig {
        VisionPreprocessConfig {
            patch_size: 16,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 65536,
            max_pixels: 16777216,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
        }
    }

    /// transformers' class defaults of `Qwen2VLImageProcessor`, used for keys a
    /// preprocessor_config.json leaves out (as transformers does).
    fn hf_class_defaults() -> VisionPreprocessConfig {
        VisionPreprocessConfig {
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            image_mean: OPENAI_CLIP_MEAN.map(|x| x as f32),
            image_std: OPENAI_CLIP_STD.map(|x| x as f32),
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
        }
    }

    /// The resize factor: both sides of a resized image are multiples of it.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }

    /// Reads `DIR/preprocessor_config.json`; without one, falls back to
    /// `config.json`'s `vision_config` (patch_size, temporal_patch_size,
    /// spatial_merge_size) with the published Qwen3-VL pixel budget and
    /// normalization. transformers itself would need the preprocessor file.
    pub fn from_model_dir(dir: &Path) -> Result<VisionPreprocessConfig> {
        let pre = dir.join("preprocessor_config.json");
        if pre.is_file() {
            return Self::from_json(&read_json(&pre)?, &pre.display().to_string());
        }
        let config = dir.join("config.json");
        if config.is_file() {
            let json = read_json(&config)?;
            if let Some(v) = json.get("vision_config") {
                return Self::from_vision_config(v, &config.display().to_string());
            }
        }
        Err(ConvertError::NotFound(format!(
            "{}: no preprocessor_config.json, and no config.json with a vision_config; \
             image preprocessing needs one of them",
            dir.display()
        )))
    }

    /// Parses a preprocessor_config.json object (`what` names it in errors).
    pub fn from_json(json: &Value, what: &str) -> Result<VisionPreprocessConfig> {
        Self::from_json_over(json, what, Self::hf_class_defaults(), true)
    }

    /// Parses a processor config over `defaults` (the class defaults of the
    /// processor it configures); `legacy_pixels`: whether top-level
    /// `min_pixels`/`max_pixels` override `size` (the image processor's
    /// rule; Qwen3-VL's video processor has no such keys).
    pub(crate) fn from_json_over(
        json: &Value,
        what: &str,
        defaults: VisionPreprocessConfig,
        legacy_pixels: bool,
    ) -> Result<VisionPreprocessConfig> {
        if !json.is_object() {
            return Err(ConvertError::Corrupt(format!(
                "{what}: expected a JSON object"
            )));
        }
        let mut c = defaults;
        let get_usize = |key: &str, default: usize| -> Result<usize> {
            match json.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => positive(v, key, what),
            }
        };
        c.patch_size = get_usize("patch_size", c.patch_size)?;
        c.temporal_patch_size = get_usize("temporal_patch_size", c.temporal_patch_size)?;
        c.merge_size = get_usize("merge_size", c.merge_size)?;
        // `size` replaces the default budget; top-level min_pixels/max_pixels
        // override it, as Qwen2VLImageProcessor.__init__ does.
        if let Some(size) = json.get("size").filter(|s| !s.is_null()) {
            let edge = |key: &str| -> Result<usize> {
                match size.get(key) {
                    Some(v) => positive(v, &format!("size.{key}"), what),
                    None => Err(ConvertError::Corrupt(format!(
                        "{what}: `size` must have `shortest_edge` and `longest_edge` (min and max pixels)"
                    ))),
                }
            };
            c.min_pixels = edge("shortest_edge")?;
            c.max_pixels = edge("longest_edge")?;
        }
        if legacy_pixels {
            c.min_pixels = get_usize("min_pixels", c.min_pixels)?;
            c.max_pixels = get_usize("max_pixels", c.max_pixels)?;
        }
        if let Some(v) = json.get("image_mean").filter(|v| !v.is_null()) {
            c.image_mean = triple(v, "image_mean", what)?;
        }
        if let Some(v) = json.get("image_std").filter(|v| !v.is_null()) {
            c.image_std = triple(v, "image_std", what)?;
            if c.image_std.contains(&0.0) {
                return Err(ConvertError::Corrupt(format!(
                    "{what}: image_std has a zero entry"
                )));
            }
        }
        if let Some(v) = json.get("rescale_factor").filter(|v| !v.is_null()) {
            c.rescale_factor = v
                .as_f64()
                .filter(|f| *f > 0.0 && f.is_finite())
                .ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{what}: rescale_factor must be a positive number, got {v}"
                    ))
                })?;
        }
        let flag = |key: &str| -> Result<bool> {
            match json.get(key) {
                None | Some(Value::Null) => Ok(true),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(ConvertError::Corrupt(format!(
                    "{what}: {key} must be true or false, got {v}"
                ))),
            }
        };
        c.do_resize = flag("do_resize")?;
        c.do_rescale = flag("do_rescale")?;
        c.do_normalize = flag("do_normalize")?;
        if let Some(v) = json.get("resample").filter(|v| !v.is_null()) {
            if v.as_u64() != Some(RESAMPLE_BICUBIC) {
                return Err(ConvertError::Unsupported(format!(
                    "{what}: resample {v} is not supported; only 3 (bicubic, the Qwen-VL setting) is implemented"
                )));
            }
        }
        c.check(what)?;
        Ok(c)
    }

    /// The fallback from config.json's `vision_config`.
    pub fn from_vision_config(v: &Value, what: &str) -> Result<VisionPreprocessConfig> {
        let mut c = Self::qwen3_vl();
        let get = |key: &str, default: usize| -> Result<usize> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => positive(x, &format!("vision_config.{key}"), what),
            }
        };
        c.patch_size = get("patch_size", c.patch_size)?;
        c.temporal_patch_size = get("temporal_patch_size", c.temporal_patch_size)?;
        c.merge_size = get("spatial_merge_size", c.merge_size)?;
        c.check(what)?;
        Ok(c)
    }

    pub(crate) fn check(&self, what: &str) -> Result<()> {
        if self.min_pixels > self.max_pixels {
            return Err(ConvertError::Corrupt(format!(
                "{what}: min pixels {} exceed max pixels {}",
                self.min_pixels, self.max_pixels
            )));
        }
        // Keeps every later product (factor^2, patch dims) far from overflow.
        let factor_ok =
            matches!(self.patch_size.checked_mul(self.merge_size), Some(f) if f <= 4096);
        if !factor_ok || self.temporal_patch_size > 64 {
            return Err(ConvertError::Unsupported(format!(
                "{what}: patch_size {} x merge_size {} / temporal_patch_size {} are out of range",
                self.patch_size, self.merge_size, self.temporal_patch_size
            )));
        }
        Ok(())
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError::io(path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| ConvertError::Corrupt(format!("{}: not valid JSON: {e}", path.display())))
}

pub(crate) fn positive(v: &Value, key: &str, what: &str) -> Result<usize> {
    v.as_u64()
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            ConvertError::Corrupt(format!("{what}: {key} must be a positive integer, got {v}"))
        })
}

fn triple(v: &Value, key: &str, what: &str) -> Result<[f32; 3]> {
    let bad = || ConvertError::Corrupt(format!("{what}: {key} must be three numbers, got {v}"));
    // A single number applies to every channel, as in transformers.
    if let Some(x) = v.as_f64() {
        return Ok([x as f32; 3]);
    }
    let a = v.as_array().filter(|a| a.len() == 3).ok_or_else(bad)?;
    let mut out = [0f32; 3];
    for (o, x) in out.iter_mut().zip(a) {
        *o = x.as_f64().ok_or_else(bad)? as f32;
    }
    Ok(out)
}

/// The image processor settings of a model directory, as one object:
/// `preprocessor_config.json`, else the `image_processor` object that
/// transformers 5 nests in `processor_config.json`. Processor-level sizes
/// the prompt needs (`patch_size`, `downsample_ratio`: DeepSeek-OCR 2) are
/// copied in where the image processor has none, so a converted `.mllm`
/// that carries this one object keeps them. `None` without either file.
pub fn image_processor_settings(dir: &Path) -> Result<Option<Value>> {
    let pre = dir.join("preprocessor_config.json");
    let proc_path = dir.join("processor_config.json");
    let processor = if proc_path.is_file() {
        Some(read_json(&proc_path)?)
    } else {
        None
    };
    let mut settings = if pre.is_file() {
        read_json(&pre)?
    } else {
        match processor.as_ref().and_then(|p| p.get("image_processor")) {
            Some(v) => v.clone(),
            None => return Ok(None),
        }
    };
    if let (Some(Value::Object(s)), Some(p)) = (Some(&mut settings), &processor) {
        for key in ["patch_size", "downsample_ratio"] {
            if let (false, Some(v)) = (s.contains_key(key), p.get(key)) {
                s.insert(key.into(), v.clone());
            }
        }
    }
    Ok(Some(settings))
}
