//! DeepSeek-OCR 2's preprocessing settings: `DeepseekOcr2ImageProcessor`'s
//! (transformers 5.24, `image_processing_deepseek_ocr2.py` lines 136-148)
//! and the two of `DeepseekOcr2Processor` that size the prompt
//! (`processing_deepseek_ocr2.py` lines 389-406).

use std::path::Path;

use serde_json::Value;

use super::config::positive;
use super::VisionPreprocessConfig;
use crate::error::{ConvertError, Result};

/// Most local tiles an image may be cut into (the published setting is 6);
/// bounds the work a config can ask for.
pub const MAX_TILES: usize = 64;
/// Largest global view or tile side accepted, in pixels.
pub const MAX_VIEW_SIDE: usize = 8192;

#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekOcr2PreprocessConfig {
    /// `size.height`: the global view's side when `crop_to_patches` (the
    /// processor never reads `size.width`).
    pub size: usize,
    /// Side of each local tile, and of the global view without cropping.
    pub tile_size: usize,
    pub min_patches: usize,
    pub max_patches: usize,
    pub crop_to_patches: bool,
    /// Fill of the global view's padding, in 8-bit levels.
    pub background_color: [u8; 3],
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub rescale_factor: f64,
    pub do_rescale: bool,
    pub do_normalize: bool,
    /// The processor's SAM patch size and downsampling (prompt sizing only).
    pub patch_size: usize,
    pub downsample_ratio: usize,
}

impl Default for DeepseekOcr2PreprocessConfig {
    /// transformers' class defaults (IMAGENET_STANDARD mean and std, 0.5).
    fn default() -> Self {
        DeepseekOcr2PreprocessConfig {
            size: 1024,
            tile_size: 768,
            min_patches: 2,
            max_patches: 6,
            crop_to_patches: true,
            background_color: [127; 3],
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            rescale_factor: 1.0 / 255.0,
            do_rescale: true,
            do_normalize: true,
            patch_size: 16,
            downsample_ratio: 4,
        }
    }
}

impl DeepseekOcr2PreprocessConfig {
    /// Reads the image processor settings of a model directory
    /// (`image_processor_settings`: `preprocessor_config.json`, or the
    /// object nested in `processor_config.json`, with the processor's
    /// patch_size and downsample_ratio); missing keys take the class
    /// defaults.
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let settings = super::config::image_processor_settings(dir)?
            .unwrap_or_else(|| Value::Object(Default::default()));
        Self::from_json(&settings, Some(&settings), &dir.display().to_string())
    }

    /// Parses a preprocessor_config.json object and an optional
    /// processor_config.json object (`what` names them in errors).
    pub fn from_json(image: &Value, processor: Option<&Value>, what: &str) -> Result<Self> {
        let obj = image
            .as_object()
            .ok_or_else(|| ConvertError::Corrupt(format!("{what}: expected a JSON object")))?;
        let mut c = Self::default();
        let get = |json: &Value, key: &str, default: usize| -> Result<usize> {
            match json.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => positive(v, key, what),
            }
        };
        if let Some(size) = image.get("size").filter(|s| !s.is_null()) {
            c.size = match size.get("height") {
                Some(v) => positive(v, "size.height", what)?,
                None => {
                    return Err(ConvertError::Corrupt(format!(
                        "{what}: `size` must have `height`, got {size}"
                    )))
                }
            };
        }
        c.tile_size = get(image, "tile_size", c.tile_size)?;
        c.max_patches = get(image, "max_patches", c.max_patches)?;
        c.min_patches = match image.get("min_patches") {
            None | Some(Value::Null) => c.min_patches,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{what}: min_patches must be an integer, got {v}"
                    ))
                })?,
        };
        c.crop_to_patches = match image.get("crop_to_patches") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(ConvertError::Corrupt(format!(
                    "{what}: crop_to_patches must be true or false, got {v}"
                )))
            }
        };
        if let Some(v) = image.get("background_color").filter(|v| !v.is_null()) {
            let bad = || {
                ConvertError::Corrupt(format!(
                    "{what}: background_color must be three integers 0..=255, got {v}"
                ))
            };
            let a = v.as_array().filter(|a| a.len() == 3).ok_or_else(bad)?;
            for (o, x) in c.background_color.iter_mut().zip(a) {
                *o = x
                    .as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(bad)?;
            }
        }
        // Mean, std, rescale, the do_* flags and resample: the shared parser
        // (over these defaults), without the keys it reads differently.
        let mut rest = obj.clone();
        for key in [
            "size",
            "min_pixels",
            "max_pixels",
            "patch_size",
            "merge_size",
            "temporal_patch_size",
        ] {
            rest.remove(key);
        }
        let base = VisionPreprocessConfig {
            image_mean: c.image_mean,
            image_std: c.image_std,
            ..VisionPreprocessConfig::qwen3_vl()
        };
        let v = VisionPreprocessConfig::from_json_over(&Value::Object(rest), what, base, false)?;
        c.image_mean = v.image_mean;
        c.image_std = v.image_std;
        c.rescale_factor = v.rescale_factor;
        c.do_rescale = v.do_rescale;
        c.do_normalize = v.do_normalize;
        if let Some(p) = processor {
            c.patch_size = get(p, "patch_size", c.patch_size)?;
            c.downsample_ratio = get(p, "downsample_ratio", c.downsample_ratio)?;
        }
        c.check(what)?;
        Ok(c)
    }

    pub fn check(&self, what: &str) -> Result<()> {
        if self.size == 0
            || self.tile_size == 0
            || self.patch_size == 0
            || self.downsample_ratio == 0
        {
            return Err(ConvertError::Corrupt(format!(
                "{what}: size, tile_size, patch_size and downsample_ratio must be positive"
            )));
        }
        if self.size > MAX_VIEW_SIDE
            || self.tile_size > MAX_VIEW_SIDE
            || self.max_patches > MAX_TILES
        {
            return Err(ConvertError::Unsupported(format!(
                "{what}: size {} / tile_size {} (at most {MAX_VIEW_SIDE}) or max_patches {} (at most {MAX_TILES}) out of range",
                self.size, self.tile_size, self.max_patches
            )));
        }
        Ok(())
    }

    /// The global view's side: `size` with cropping, else `tile_size`
    /// (line 262).
    pub fn global_size(&self) -> usize {
        if self.crop_to_patches {
            self.size
        } else {
            self.tile_size
        }
    }
}
