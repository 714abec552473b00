//! Where a video's frames come from: a directory of image files (sorted by
//! name) or an animated PNG / WebP file, and the frame rate assumed for
//! them.
//!
//! A directory carries no frame rate: like transformers given a list of
//! frames without metadata, 24 fps is assumed unless the caller says
//! otherwise (`mllm run --video-fps`). An animation's frame delays give its
//! rate (frames / total duration) unless overridden.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::codecs::png::PngDecoder;
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, ImageFormat, Limits};

use super::decode::{decode_file, max_pixels, RgbImage, MAX_SIDE};
use super::video::{check_same_size, preprocess_sampled, preprocess_video, sample_indices};
use super::video_config::{VideoPreprocessConfig, DEFAULT_LIST_FPS};
use super::VideoPatches;
use crate::error::{ConvertError, Result};

/// Frames decoded from an animation, with the rate its delays give.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedVideo {
    pub frames: Vec<RgbImage>,
    /// Frames per second from the frame delays (none when they are zero).
    pub fps: Option<f64>,
}

const FRAME_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp"];

/// The image files of a frame directory, sorted by file name.
pub fn decode_frames_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| ConvertError::io(dir, e))?;
    let mut files = vec![];
    for e in entries {
        let p = e.map_err(|e| ConvertError::io(dir, e))?.path();
        let ext = p
            .extension()
            .and_then(|x| x.to_str())
            .map(|x| x.to_ascii_lowercase());
        if p.is_file() && ext.is_some_and(|x| FRAME_EXTENSIONS.contains(&x.as_str())) {
            files.push(p);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    if files.is_empty() {
        return Err(ConvertError::NotFound(format!(
            "{}: no frames (.png, .jpg, .jpeg or .webp files) in this directory; a video is a \
             directory of frames named in time order, or an animated PNG/WebP file",
            dir.display()
        )));
    }
    Ok(files)
}

/// Decodes every frame of an animated PNG or WebP file (composited, alpha
/// dropped as for still images).
pub fn decode_animation(path: &Path) -> Result<DecodedVideo> {
    let what = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| ConvertError::io(path, e))?;
    let format = image::guess_format(&bytes).map_err(|e| {
        ConvertError::Unsupported(format!(
            "{what}: not an image ({e}); --video takes a directory of frames or an animated PNG/WebP file"
        ))
    })?;
    let budget = max_pixels()?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(budget.saturating_mul(8));
    let bad = |e: image::ImageError| ConvertError::Corrupt(format!("{what}: cannot decode: {e}"));
    let frames: Box<dyn Iterator<Item = image::ImageResult<image::Frame>>> = match format {
        ImageFormat::Png => {
            let d = PngDecoder::with_limits(Cursor::new(&bytes[..]), limits).map_err(bad)?;
            if !d.is_apng().map_err(bad)? {
                return Err(not_animated(&what));
            }
            Box::new(d.apng().map_err(bad)?.into_frames())
        }
        ImageFormat::WebP => {
            let d = WebPDecoder::new(Cursor::new(&bytes[..])).map_err(bad)?;
            if !d.has_animation() {
                return Err(not_animated(&what));
            }
            Box::new(d.into_frames())
        }
        other => {
            return Err(ConvertError::Unsupported(format!(
                "{what}: {other:?} animations are not supported; use an animated PNG or WebP file, \
                 or a directory of frames"
            )))
        }
    };
    let mut out = vec![];
    let (mut pixels, mut millis) = (0u64, 0f64);
    for f in frames {
        let f = f.map_err(bad)?;
        let (num, den) = f.delay().numer_denom_ms();
        millis += f64::from(num) / f64::from(den.max(1));
        let rgba = f.into_buffer();
        let (w, h) = rgba.dimensions();
        pixels += u64::from(w) * u64::from(h);
        if pixels > budget {
            return Err(ConvertError::Unsupported(format!(
                "{what}: the animation's frames hold more than {budget} pixels in all; refused \
                 (shorten or shrink it; MLLM_MAX_IMAGE_PIXELS raises the limit)"
            )));
        }
        let data = rgba
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        out.push(RgbImage {
            height: h as usize,
            width: w as usize,
            data,
        });
    }
    if out.is_empty() {
        return Err(ConvertError::Corrupt(format!(
            "{what}: the animation has no frames"
        )));
    }
    let fps = (millis > 0.0).then(|| out.len() as f64 * 1000.0 / millis);
    Ok(DecodedVideo { frames: out, fps })
}

fn not_animated(what: &str) -> ConvertError {
    ConvertError::Unsupported(format!(
        "{what}: a still image, not an animation; pass it with --image, or give --video a \
         directory of frames"
    ))
}

/// Preprocesses the video at `path` (a frame directory or an animated
/// file); `fps` overrides the frame rate (see the module docs). A directory
/// decodes only the frames sampling picks.
pub fn decode_video(
    path: &Path,
    fps: Option<f64>,
    cfg: &VideoPreprocessConfig,
) -> Result<VideoPatches> {
    if let Some(f) = fps {
        if !(f > 0.0 && f.is_finite()) {
            return Err(ConvertError::Unsupported(format!(
                "video frame rate {f} must be a positive number"
            )));
        }
    }
    if path.is_dir() {
        let files = decode_frames_dir(path)?;
        let fps = fps.unwrap_or(DEFAULT_LIST_FPS);
        let indices = sample_indices(files.len(), fps, cfg)?;
        let mut decoded: Vec<Option<RgbImage>> = vec![None; files.len()];
        for &i in &indices {
            if decoded[i].is_none() {
                decoded[i] = Some(decode_file(&files[i])?);
            }
        }
        let frames: Vec<&RgbImage> = indices
            .iter()
            .filter_map(|&i| decoded[i].as_ref())
            .collect();
        check_same_size(&frames)
            .map_err(|e| ConvertError::Unsupported(format!("{}: {e}", path.display())))?;
        return preprocess_sampled(&frames, indices, fps, cfg);
    }
    let v = decode_animation(path)?;
    let rate = fps.or(v.fps).unwrap_or(DEFAULT_LIST_FPS);
    preprocess_video(&v.frames, rate, cfg)
}
