//! Image preprocessing for Qwen-VL vision encoders: image files in,
//! `pixel_values [num_patches, C*T*P*P]` (f32) and `image_grid_thw` out,
//! matching transformers' `Qwen2VLImageProcessor` (the class Qwen3-VL's
//! `AutoProcessor` uses; torchvision backend, the transformers 5 default)
//! for images given as file paths.
//!
//! The steps, each in its own file: decode to 8-bit RGB (`decode`), pick the
//! target size (`smart_resize`), resize with antialiased bicubic in the
//! reference's integer arithmetic (`resample`), then here: rescale and
//! normalize in f32, repeat the image to `temporal_patch_size` frames and cut
//! it into patches in the reference's order. The settings come from the
//! checkpoint's preprocessor_config.json (`config`).
//!
//! Parity with transformers (tests/fixtures/vision): PNG and WebP images give
//! identical pixel_values; JPEG differs only where our decoder's pixels
//! differ from libjpeg-turbo's.

mod config;
mod decode;
mod deepseek_ocr2;
mod deepseek_ocr2_config;
mod resample;
mod smart_resize;
mod video;
mod video_config;
mod video_frames;

use std::path::Path;

pub use config::{image_processor_settings, VisionPreprocessConfig};
pub use decode::{decode_bytes, decode_file, max_pixels, RgbImage, DEFAULT_MAX_PIXELS, MAX_SIDE};
pub use deepseek_ocr2::{
    expand_image_placeholders, expand_image_tokens, global_resize_size, image_token_count,
    make_views, optimal_tile_grid, preprocess_deepseek_ocr2, preprocess_deepseek_ocr2_files,
    supported_tile_grids, DeepseekOcr2Images, DeepseekOcr2Views,
};
pub use deepseek_ocr2_config::DeepseekOcr2PreprocessConfig;
pub use resample::resize_bicubic_aa;
pub use smart_resize::{smart_resize, MAX_ASPECT_RATIO};
pub use video::{preprocess_video, sample_indices, smart_resize_video, timestamps, VideoPatches};
pub use video_config::{VideoPreprocessConfig, DEFAULT_LIST_FPS};
pub use video_frames::{decode_animation, decode_frames_dir, decode_video, DecodedVideo};

use crate::error::{ConvertError, Result};

/// The largest resized image we build, in pixels (Qwen3-VL's own ceiling is
/// 16777216 = 4096 x 4096); guards against configs that would allocate
/// gigabytes.
pub const MAX_RESIZED_PIXELS: usize = 1 << 26;

/// Patches of one or more images, concatenated in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ImagePatches {
    /// Row-major `[num_patches, patch_dim]`.
    pub pixel_values: Vec<f32>,
    pub num_patches: usize,
    /// channels * temporal_patch_size * patch_size^2.
    pub patch_dim: usize,
    /// One `[t, h, w]` per image, in patches (t is 1 for a still image).
    pub grid_thw: Vec<[usize; 3]>,
}

impl ImagePatches {
    pub fn shape(&self) -> [usize; 2] {
        [self.num_patches, self.patch_dim]
    }
}

/// Preprocesses image files, concatenating their patches as transformers
/// does for a list of images.
pub fn preprocess_files<P: AsRef<Path>>(
    paths: &[P],
    cfg: &VisionPreprocessConfig,
) -> Result<ImagePatches> {
    let images = paths
        .iter()
        .map(|p| decode_file(p.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    preprocess_images(&images, cfg)
}

/// Preprocesses decoded images (see `preprocess_files`).
pub fn preprocess_images(
    images: &[RgbImage],
    cfg: &VisionPreprocessConfig,
) -> Result<ImagePatches> {
    let patch_dim = 3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
    let mut out = ImagePatches {
        pixel_values: Vec::new(),
        num_patches: 0,
        patch_dim,
        grid_thw: Vec::with_capacity(images.len()),
    };
    for img in images {
        let grid = preprocess_into(img, cfg, &mut out.pixel_values)?;
        out.num_patches += grid[1] * grid[2];
        out.grid_thw.push(grid);
    }
    Ok(out)
}

/// Resizes one image to its target size (the uint8 image transformers
/// normalizes next).
pub fn resize_for_model(img: &RgbImage, cfg: &VisionPreprocessConfig) -> Result<RgbImage> {
    if img.data.len() != img.height * img.width * 3 {
        return Err(ConvertError::Corrupt(format!(
            "RGB image of {}x{} pixels has {} bytes",
            img.width,
            img.height,
            img.data.len()
        )));
    }
    let (h, w) = if cfg.do_resize {
        smart_resize(
            img.height,
            img.width,
            cfg.factor(),
            cfg.min_pixels,
            cfg.max_pixels,
        )?
    } else {
        (img.height, img.width)
    };
    if h % cfg.factor() != 0 || w % cfg.factor() != 0 {
        return Err(ConvertError::Unsupported(format!(
            "image of {}x{} pixels: with do_resize false both sides must be multiples of {}",
            img.width,
            img.height,
            cfg.factor()
        )));
    }
    if h.saturating_mul(w) > MAX_RESIZED_PIXELS {
        return Err(ConvertError::Unsupported(format!(
            "image of {}x{} pixels would be resized to {w}x{h}, above {MAX_RESIZED_PIXELS} pixels; \
             lower max pixels in preprocessor_config.json",
            img.width, img.height
        )));
    }
    Ok(RgbImage {
        height: h,
        width: w,
        data: resize_bicubic_aa(&img.data, img.height, img.width, 3, h, w),
    })
}

/// The f32 value of each 8-bit level per channel, computed as transformers
/// does: with rescale and normalize both on it folds the rescale into mean
/// and std (`mean * (1 / rescale_factor)` in f32, so 127.5 for Qwen3-VL) and
/// evaluates `(x - mean') / std'` in f32.
pub(crate) fn level_table(cfg: &VisionPreprocessConfig) -> [[f32; 256]; 3] {
    let mut t = [[0f32; 256]; 3];
    let inv = (1.0 / cfg.rescale_factor) as f32;
    for (c, row) in t.iter_mut().enumerate() {
        let (mean, std) = (cfg.image_mean[c] * inv, cfg.image_std[c] * inv);
        for (x, v) in row.iter_mut().enumerate() {
            let x = x as f32;
            *v = match (cfg.do_rescale, cfg.do_normalize) {
                (true, true) => (x - mean) / std,
                (false, true) => (x - cfg.image_mean[c]) / cfg.image_std[c],
                (true, false) => x * cfg.rescale_factor as f32,
                (false, false) => x,
            };
        }
    }
    t
}

/// Appends one image's patches to `out`; returns its grid `[1, h, w]`.
///
/// Patch order (transformers' `patchify`): for each merge block row, merge
/// block column, row and column inside the block; within a patch: channel,
/// temporal copy, pixel row, pixel column. A still image is repeated to
/// `temporal_patch_size` identical frames.
fn preprocess_into(
    img: &RgbImage,
    cfg: &VisionPreprocessConfig,
    out: &mut Vec<f32>,
) -> Result<[usize; 3]> {
    let resized = resize_for_model(img, cfg)?;
    let table = level_table(cfg);
    let (p, m, t) = (cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size);
    let (gh, gw) = (resized.height / p, resized.width / p);
    let width = resized.width;
    let px = &resized.data;
    out.reserve(gh * gw * 3 * t * p * p);
    for bh in 0..gh / m {
        for bw in 0..gw / m {
            for mh in 0..m {
                for mw in 0..m {
                    let y0 = (bh * m + mh) * p;
                    let x0 = (bw * m + mw) * p;
                    for (c, lut) in table.iter().enumerate() {
                        for _ in 0..t {
                            for y in y0..y0 + p {
                                let row = &px[(y * width + x0) * 3..(y * width + x0 + p) * 3];
                                out.extend(row.chunks_exact(3).map(|rgb| lut[rgb[c] as usize]));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok([1, gh, gw])
}
