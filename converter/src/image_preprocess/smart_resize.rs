//! `smart_resize`: the target size of an image, as transformers'
//! `qwen2_vl.image_processing_qwen2_vl.smart_resize` computes it (Qwen3-VL
//! uses the same function with factor = patch_size * merge_size = 32).

use crate::error::{ConvertError, Result};

/// transformers refuses images whose long side exceeds 200 times the short one.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// Returns `(height, width)`: both multiples of `factor`, the pixel count
/// brought into `[min_pixels, max_pixels]` with the aspect ratio kept as well
/// as rounding allows. Like the reference, the result can exceed `max_pixels`
/// when the short side is already at `factor` (very wide or tall images).
///
/// Every step mirrors the Python arithmetic: `round` is Python's round-half-
/// to-even on the f64 quotient, the products are exact integers, and
/// `sqrt`/`floor`/`ceil` see the same f64 values (pixel counts stay far below
/// 2^53, so the integer-to-float conversions are exact).
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    if height == 0 || width == 0 {
        return Err(ConvertError::Unsupported(format!(
            "image of {width}x{height} pixels: an image needs at least one pixel"
        )));
    }
    if factor == 0 {
        return Err(ConvertError::Unsupported(
            "resize factor (patch_size * merge_size) is 0".into(),
        ));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > MAX_ASPECT_RATIO {
        return Err(ConvertError::Unsupported(format!(
            "image of {width}x{height} pixels: aspect ratio {ratio:.1} is above {MAX_ASPECT_RATIO} \
             (the Qwen-VL processor's limit)"
        )));
    }
    let mut h_bar = (h / f).round_ties_even() as usize * factor;
    let mut w_bar = (w / f).round_ties_even() as usize * factor;
    let pixels = (height as u128) * (width as u128);
    let bar_pixels = (h_bar as u128) * (w_bar as u128);
    if bar_pixels > max_pixels as u128 {
        let beta = (pixels as f64 / max_pixels as f64).sqrt();
        h_bar = factor.max((h / beta / f).floor() as usize * factor);
        w_bar = factor.max((w / beta / f).floor() as usize * factor);
    } else if bar_pixels < min_pixels as u128 {
        let beta = (min_pixels as f64 / pixels as f64).sqrt();
        h_bar = (h * beta / f).ceil() as usize * factor;
        w_bar = (w * beta / f).ceil() as usize * factor;
    }
    if h_bar == 0 || w_bar == 0 {
        // Only reachable with min_pixels == 0 and a side below factor / 2.
        return Err(ConvertError::Unsupported(format!(
            "image of {width}x{height} pixels resizes to {w_bar}x{h_bar}: raise min pixels"
        )));
    }
    Ok((h_bar, w_bar))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_qwen3_vl_budget() {
        // Already aligned and inside the budget: unchanged.
        assert_eq!(
            smart_resize(512, 768, 32, 65536, 16777216).unwrap(),
            (512, 768)
        );
        // 300/32 = 9.375 -> 9, 500/32 = 15.625 -> 16; 288*512 >= 65536.
        assert_eq!(
            smart_resize(300, 500, 32, 65536, 16777216).unwrap(),
            (288, 512)
        );
        // Ties go to even, as Python's round: 80/32 = 2.5 -> 2, 112/32 = 3.5 -> 4.
        assert_eq!(smart_resize(80, 112, 32, 1, 1 << 30).unwrap(), (64, 128));
    }

    #[test]
    fn refuses_extreme_aspect_and_empty_images() {
        assert!(smart_resize(1, 201, 32, 4096, 1 << 24).is_err());
        assert!(smart_resize(1, 200, 32, 4096, 1 << 24).is_ok());
        assert!(smart_resize(0, 10, 32, 4096, 1 << 24).is_err());
    }
}
