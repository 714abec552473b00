//! Video preprocessing for Qwen3-VL, matching transformers 5's
//! `Qwen3VLVideoProcessor` (torchvision backend) and the timestamps
//! `Qwen3VLProcessor` writes into the prompt:
//!
//! 1. sample frame indices (`sample_indices`: `fps` frames per second of the
//!    video's frame rate, at least `min_frames`, at most `max_frames` and the
//!    frames there are, spread with `np.linspace(..).round()`);
//! 2. pick one size for all frames (`smart_resize_video`: the image rule with
//!    the frame count in the pixel budget) and resize each frame with the
//!    same antialiased bicubic as images;
//! 3. normalize, pad the frame count to a multiple of `temporal_patch_size`
//!    with copies of the last frame, and cut `[t, h, w]` patches in the
//!    image order with time outermost;
//! 4. one timestamp per temporal patch (`timestamps`): the mean time of its
//!    first and last frame, printed `<{:.1} seconds>` before its tokens.

use super::decode::RgbImage;
use super::resample::resize_bicubic_aa;
use super::smart_resize::MAX_ASPECT_RATIO;
use super::video_config::VideoPreprocessConfig;
use super::{level_table, MAX_RESIZED_PIXELS};
use crate::error::{ConvertError, Result};

/// Patches of one video plus what the prompt needs to describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct VideoPatches {
    /// Row-major `[num_patches, patch_dim]`.
    pub pixel_values: Vec<f32>,
    pub num_patches: usize,
    pub patch_dim: usize,
    /// `[t, h, w]` in patches (t counts temporal patches).
    pub grid_thw: [usize; 3],
    /// Indices of the sampled frames in the input.
    pub indices: Vec<usize>,
    /// Seconds, one per temporal patch.
    pub timestamps: Vec<f64>,
}

/// Frame indices transformers' `Qwen3VLVideoProcessor.sample_frames` picks
/// from `total` frames of a video at `video_fps` frames per second.
pub fn sample_indices(
    total: usize,
    video_fps: f64,
    cfg: &VideoPreprocessConfig,
) -> Result<Vec<usize>> {
    if total == 0 {
        return Err(ConvertError::Unsupported(
            "a video needs at least one frame".into(),
        ));
    }
    if !cfg.do_sample_frames {
        return Ok((0..total).collect());
    }
    if !(video_fps > 0.0 && video_fps.is_finite()) {
        return Err(ConvertError::Unsupported(format!(
            "video frame rate {video_fps} is not a positive number"
        )));
    }
    let n = match (cfg.num_frames, cfg.fps) {
        (Some(n), _) => n,
        (None, Some(fps)) => {
            // int(total / video_fps * fps), left to right in f64.
            let n = (total as f64 / video_fps * fps) as usize;
            n.max(cfg.min_frames).min(cfg.max_frames).min(total)
        }
        (None, None) => total.max(cfg.min_frames).min(cfg.max_frames),
    };
    Ok(linspace_round(total - 1, n))
}

/// `np.linspace(0, last, n).round().astype(int)`.
fn linspace_round(last: usize, n: usize) -> Vec<usize> {
    if n == 1 {
        return vec![0];
    }
    let step = last as f64 / (n - 1) as f64;
    (0..n)
        .map(|i| {
            if i == n - 1 {
                last
            } else {
                (i as f64 * step).round_ties_even() as usize
            }
        })
        .collect()
}

/// Seconds of each temporal patch: `Qwen3VLProcessor._calculate_timestamps`
/// (indices padded with the last one to whole patches; the mean of each
/// patch's first and last frame time).
pub fn timestamps(indices: &[usize], video_fps: f64, temporal_patch_size: usize) -> Vec<f64> {
    let tps = temporal_patch_size.max(1);
    let mut idx = indices.to_vec();
    if let Some(&last) = idx.last() {
        while !idx.len().is_multiple_of(tps) {
            idx.push(last);
        }
    }
    idx.chunks(tps)
        .map(|c| (c[0] as f64 / video_fps + c[c.len() - 1] as f64 / video_fps) / 2.0)
        .collect()
}

/// The target `(height, width)` of every frame: transformers'
/// `qwen3_vl.video_processing_qwen3_vl.smart_resize`.
pub fn smart_resize_video(
    num_frames: usize,
    height: usize,
    width: usize,
    temporal_factor: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    if num_frames < temporal_factor {
        return Err(ConvertError::Unsupported(format!(
            "a video of {num_frames} sampled frame(s): Qwen3-VL's video processor needs at least \
             temporal_patch_size = {temporal_factor} frames; give more frames (or pass one picture \
             as an image)"
        )));
    }
    if height == 0 || width == 0 || factor == 0 {
        return Err(ConvertError::Unsupported(format!(
            "video frames of {width}x{height} pixels: a frame needs at least one pixel"
        )));
    }
    let (mut h, mut w) = (height, width);
    if h < factor || w < factor {
        // Small frames are scaled up (in f64, truncated) before the rule.
        let scale = (factor as f64 / h as f64).max(factor as f64 / w as f64);
        h = (h as f64 * scale) as usize;
        w = (w as f64 * scale) as usize;
    }
    let ratio = h.max(w) as f64 / h.min(w).max(1) as f64;
    if h == 0 || w == 0 || ratio > MAX_ASPECT_RATIO {
        return Err(ConvertError::Unsupported(format!(
            "video frames of {width}x{height} pixels: aspect ratio above {MAX_ASPECT_RATIO} \
             (the Qwen-VL processor's limit)"
        )));
    }
    let (hf, wf, f) = (h as f64, w as f64, factor as f64);
    let mut h_bar = (hf / f).round_ties_even() as usize * factor;
    let mut w_bar = (wf / f).round_ties_even() as usize * factor;
    let t_bar = (num_frames as f64 / temporal_factor as f64).round_ties_even() as u128
        * temporal_factor as u128;
    let volume = t_bar * h_bar as u128 * w_bar as u128;
    let pixels = num_frames as f64 * hf * wf;
    if volume > max_pixels as u128 {
        let beta = (pixels / max_pixels as f64).sqrt();
        h_bar = factor.max((hf / beta / f).floor() as usize * factor);
        w_bar = factor.max((wf / beta / f).floor() as usize * factor);
    } else if volume < min_pixels as u128 {
        let beta = (min_pixels as f64 / pixels).sqrt();
        h_bar = (hf * beta / f).ceil() as usize * factor;
        w_bar = (wf * beta / f).ceil() as usize * factor;
    }
    if h_bar == 0 || w_bar == 0 {
        return Err(ConvertError::Unsupported(format!(
            "video frames of {width}x{height} pixels resize to {w_bar}x{h_bar}: raise min pixels"
        )));
    }
    Ok((h_bar, w_bar))
}

/// Preprocesses the frames of one video (all of one size, in time order)
/// recorded at `video_fps` frames per second.
pub fn preprocess_video(
    frames: &[RgbImage],
    video_fps: f64,
    cfg: &VideoPreprocessConfig,
) -> Result<VideoPatches> {
    check_same_size(&frames.iter().collect::<Vec<_>>())?;
    let indices = sample_indices(frames.len(), video_fps, cfg)?;
    let sampled: Vec<&RgbImage> = indices.iter().map(|&i| &frames[i]).collect();
    preprocess_sampled(&sampled, indices, video_fps, cfg)
}

/// Preprocesses frames already sampled (`frames[k]` is input frame
/// `indices[k]`; all of one size).
pub(crate) fn preprocess_sampled(
    frames: &[&RgbImage],
    indices: Vec<usize>,
    video_fps: f64,
    cfg: &VideoPreprocessConfig,
) -> Result<VideoPatches> {
    let Some(first) = frames.first() else {
        return Err(ConvertError::Unsupported(
            "a video needs at least one frame".into(),
        ));
    };
    let (height, width) = (first.height, first.width);
    check_same_size(frames)?;
    let b = &cfg.base;
    let n = indices.len();
    let (h, w) = if b.do_resize {
        let mut max_pixels = b.max_pixels;
        if cfg.cap_pixels_per_frame {
            let f2 = b.factor() * b.factor();
            let frame_cap = cfg.max_video_tokens.saturating_mul(f2);
            let floor = (b.min_pixels as f64 * 1.05) as usize;
            let per_frame = frame_cap.min(b.max_pixels / n.max(1)).max(floor);
            max_pixels = per_frame.saturating_mul(n);
        }
        smart_resize_video(
            n,
            height,
            width,
            b.temporal_patch_size,
            b.factor(),
            b.min_pixels,
            max_pixels,
        )?
    } else {
        if n < b.temporal_patch_size {
            smart_resize_video(n, 1, 1, b.temporal_patch_size, 1, 1, 1)?;
        }
        (height, width)
    };
    if h % b.factor() != 0 || w % b.factor() != 0 {
        return Err(ConvertError::Unsupported(format!(
            "video frames of {width}x{height} pixels: with do_resize false both sides must be \
             multiples of {}",
            b.factor()
        )));
    }
    if h.saturating_mul(w).saturating_mul(n) > MAX_RESIZED_PIXELS {
        return Err(ConvertError::Unsupported(format!(
            "a video of {n} frames of {w}x{h} pixels after resizing is above {MAX_RESIZED_PIXELS} \
             pixels in all; sample fewer frames (a lower fps) or lower the video processor's size"
        )));
    }
    let resized: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            if (h, w) == (height, width) {
                f.data.clone()
            } else {
                resize_bicubic_aa(&f.data, height, width, 3, h, w)
            }
        })
        .collect();
    let table = level_table(b);
    let (p, m, tps) = (b.patch_size, b.merge_size, b.temporal_patch_size);
    let gt = n.div_ceil(tps);
    let (gh, gw) = (h / p, w / p);
    let patch_dim = 3 * tps * p * p;
    let mut out = Vec::with_capacity(gt * gh * gw * patch_dim);
    // Frame `k` of the padded clip: the last frame repeats.
    let frame = |k: usize| &resized[k.min(n - 1)];
    for t in 0..gt {
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let y0 = (bh * m + mh) * p;
                        let x0 = (bw * m + mw) * p;
                        for (c, lut) in table.iter().enumerate() {
                            for dt in 0..tps {
                                let px = frame(t * tps + dt);
                                for y in y0..y0 + p {
                                    let row = &px[(y * w + x0) * 3..(y * w + x0 + p) * 3];
                                    out.extend(row.chunks_exact(3).map(|rgb| lut[rgb[c] as usize]));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(VideoPatches {
        pixel_values: out,
        num_patches: gt * gh * gw,
        patch_dim,
        grid_thw: [gt, gh, gw],
        timestamps: timestamps(&indices, video_fps, tps),
        indices,
    })
}

/// Errors unless all frames have frame 0's size.
pub(crate) fn check_same_size(frames: &[&RgbImage]) -> Result<()> {
    let Some(first) = frames.first() else {
        return Ok(());
    };
    let (height, width) = (first.height, first.width);
    for (i, f) in frames.iter().enumerate() {
        if (f.height, f.width) != (height, width) || f.data.len() != height * width * 3 {
            return Err(ConvertError::Unsupported(format!(
                "video frame {i} is {}x{} pixels but frame 0 is {width}x{height}; all frames of a \
                 video must have one size",
                f.width, f.height
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_follows_transformers() {
        let cfg = VideoPreprocessConfig::qwen3_vl_defaults();
        // 24 fps assumed: int(5 / 24 * 2) = 0 -> min_frames 4.
        assert_eq!(sample_indices(5, 24.0, &cfg).unwrap(), [0, 1, 3, 4]);
        assert_eq!(sample_indices(5, 2.0, &cfg).unwrap(), [0, 1, 2, 3, 4]);
        // 10 s at 30 fps, 2 fps: 20 frames over 0..=299.
        let idx = sample_indices(300, 30.0, &cfg).unwrap();
        assert_eq!(idx.len(), 20);
        assert_eq!((idx[0], idx[1], idx[19]), (0, 16, 299));
        assert_eq!(sample_indices(3, 24.0, &cfg).unwrap(), [0, 1, 2]);
    }

    #[test]
    fn timestamps_average_each_temporal_patch() {
        assert_eq!(timestamps(&[0, 1, 2, 3, 4], 2.0, 2), [0.25, 1.25, 2.0]);
        let t = timestamps(&[0, 1, 3, 4], 24.0, 2);
        assert_eq!(format!("{:.1} {:.1}", t[0], t[1]), "0.0 0.1");
    }

    #[test]
    fn video_resize_counts_frames() {
        assert_eq!(
            smart_resize_video(4, 56, 96, 2, 32, 4096, 16384).unwrap(),
            (32, 64)
        );
        assert!(smart_resize_video(1, 56, 96, 2, 32, 4096, 16384).is_err());
        // Small frames are scaled up first.
        assert_eq!(
            smart_resize_video(2, 10, 20, 2, 32, 4096, 1 << 20).unwrap(),
            (32, 64)
        );
        assert_eq!(
            smart_resize_video(2, 10, 20, 2, 32, 8192, 1 << 20).unwrap(),
            (64, 96)
        );
    }
}
