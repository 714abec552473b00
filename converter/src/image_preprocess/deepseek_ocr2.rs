//! DeepSeek-OCR 2's image preprocessing and prompt expansion, matching
//! transformers 5.24's `DeepseekOcr2ImageProcessor` (torchvision backend,
//! `image_processing_deepseek_ocr2.py`) and `DeepseekOcr2Processor`
//! (`processing_deepseek_ocr2.py`) for images given as file paths.
//!
//! Per image (`_preprocess`, lines 208-286):
//! - local tiles, only when `crop_to_patches` and the longest side exceeds
//!   `tile_size`: the (columns, rows) grid of `min_patches..=max_patches`
//!   tiles whose width/height ratio is closest to the image's
//!   (`get_optimal_tiled_canvas`, lines 94-130, ties going to more tiles
//!   while the image covers more than half of them); the whole image is
//!   resized to `tile * columns` x `tile * rows` and cut row by row;
//! - the global view: resized so its longest side is `size` (`tile_size`
//!   without cropping), the other side `round(side * scale)` with Python's
//!   half-to-even, then padded to a square with `background_color`, the
//!   image centered (left/top get the smaller half);
//! - resizes are antialiased bicubic on uint8 (`resize_bicubic_aa`), then
//!   rescale and normalize in f32 per channel, channels first.
//!
//! The prompt: each `<image>` becomes `global_q^2 + tiles * local_q^2 + 1`
//! copies of itself, `q = ceil(side / patch_size / downsample_ratio)`
//! (lines 423-435): 256 + 144 per tile + 1 with the defaults. No newline or
//! separator tokens are inserted; the model places its own.

use std::path::Path;

use super::{decode_file, level_table, resize_bicubic_aa, RgbImage, VisionPreprocessConfig};
use super::{DeepseekOcr2PreprocessConfig, MAX_RESIZED_PIXELS};
use crate::error::{ConvertError, Result};

/// The views of one or more images, concatenated in order, as transformers'
/// `pixel_values`, `pixel_values_local` and `num_local_patches`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekOcr2Images {
    /// Side of the global views.
    pub global_size: usize,
    /// `[num_images, 3, global_size, global_size]`, row-major.
    pub pixel_values: Vec<f32>,
    /// Side of the local tiles.
    pub tile_size: usize,
    /// `[sum(num_local_patches), 3, tile_size, tile_size]`, row-major.
    pub pixel_values_local: Vec<f32>,
    pub num_local_patches: Vec<usize>,
    /// Per image the (columns, rows) tile grid; `None` without tiles.
    pub grids: Vec<Option<(usize, usize)>>,
}

/// The 8-bit views of one image before normalization.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekOcr2Views {
    /// The padded square global view.
    pub global: RgbImage,
    /// Local tiles, row by row; empty when none.
    pub tiles: Vec<RgbImage>,
    pub grid: Option<(usize, usize)>,
}

/// Tile grids `(columns, rows)` with `min..=max` tiles, fewest tiles first,
/// in transformers' order (`get_all_supported_aspect_ratios`, lines 59-91).
pub fn supported_tile_grids(min_tiles: usize, max_tiles: usize) -> Vec<(usize, usize)> {
    let mut grids = Vec::new();
    for w in 1..=max_tiles {
        for h in 1..=max_tiles {
            if (min_tiles..=max_tiles).contains(&(w * h)) {
                grids.push((w, h));
            }
        }
    }
    grids.sort_by_key(|&(w, h)| w * h); // stable, as Python's sorted
    grids
}

/// The (columns, rows) grid for an image of `height` x `width`
/// (`get_optimal_tiled_canvas`); (1, 1) when no grid is allowed.
pub fn optimal_tile_grid(
    height: usize,
    width: usize,
    tile_size: usize,
    min_tiles: usize,
    max_tiles: usize,
) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let area = (width * height) as f64;
    let tile_area = tile_size as f64 * tile_size as f64;
    let mut best_diff = f64::INFINITY;
    let mut best = (1, 1);
    for (c, r) in supported_tile_grids(min_tiles, max_tiles) {
        let diff = (aspect - c as f64 / r as f64).abs();
        if diff < best_diff {
            best_diff = diff;
            best = (c, r);
        } else if diff == best_diff && area > 0.5 * tile_area * c as f64 * r as f64 {
            best = (c, r);
        }
    }
    best
}

/// The global view's size before padding: the longest side becomes
/// `target`, the other `round(side * target / longest)` (half to even).
pub fn global_resize_size(height: usize, width: usize, target: usize) -> (usize, usize) {
    let scale = target as f64 / height.max(width) as f64;
    (
        (height as f64 * scale).round_ties_even() as usize,
        (width as f64 * scale).round_ties_even() as usize,
    )
}

/// How many image tokens one image with `num_tiles` local tiles takes.
pub fn image_token_count(cfg: &DeepseekOcr2PreprocessConfig, num_tiles: usize) -> usize {
    let queries = |side: usize| {
        (side as f64 / cfg.patch_size as f64 / cfg.downsample_ratio as f64).ceil() as usize
    };
    let (g, l) = (queries(cfg.size), queries(cfg.tile_size));
    g * g + l * l * num_tiles + 1
}

/// Replaces the i-th `image_token_id` of `ids` with `counts[i]` copies of
/// it; the number of image tokens must equal the number of images.
pub fn expand_image_tokens(ids: &[u32], image_token_id: u32, counts: &[usize]) -> Result<Vec<u32>> {
    let found = ids.iter().filter(|&&t| t == image_token_id).count();
    if found != counts.len() {
        return Err(ConvertError::Unsupported(format!(
            "the prompt has {found} image tokens but {} images were given",
            counts.len()
        )));
    }
    let mut out = Vec::with_capacity(ids.len() + counts.iter().sum::<usize>());
    let mut next = counts.iter();
    for &t in ids {
        match (t == image_token_id).then(|| next.next()).flatten() {
            Some(&n) => out.extend(std::iter::repeat_n(t, n)),
            None => out.push(t),
        }
    }
    Ok(out)
}

/// The same on text: the i-th `image_token` of `text` becomes `counts[i]`
/// copies of it.
pub fn expand_image_placeholders(
    text: &str,
    image_token: &str,
    counts: &[usize],
) -> Result<String> {
    let parts: Vec<&str> = text.split(image_token).collect();
    if image_token.is_empty() || parts.len() != counts.len() + 1 {
        return Err(ConvertError::Unsupported(format!(
            "the prompt has {} {image_token:?} placeholders but {} images were given",
            parts.len().saturating_sub(1),
            counts.len()
        )));
    }
    let mut out = String::from(parts[0]);
    for (part, &n) in parts[1..].iter().zip(counts) {
        out.push_str(&image_token.repeat(n));
        out.push_str(part);
    }
    Ok(out)
}

fn check_image(img: &RgbImage) -> Result<()> {
    if img.height == 0 || img.width == 0 || img.data.len() != img.height * img.width * 3 {
        return Err(ConvertError::Corrupt(format!(
            "RGB image of {}x{} pixels has {} bytes",
            img.width,
            img.height,
            img.data.len()
        )));
    }
    Ok(())
}

/// The global view and local tiles of one image, still 8-bit.
pub fn make_views(img: &RgbImage, cfg: &DeepseekOcr2PreprocessConfig) -> Result<DeepseekOcr2Views> {
    check_image(img)?;
    cfg.check("DeepSeek-OCR 2 preprocessing")?;
    let (h, w) = (img.height, img.width);
    let t = cfg.tile_size;
    let mut tiles = Vec::new();
    let mut grid = None;
    if cfg.crop_to_patches && h.max(w) > t {
        let (cols, rows) = optimal_tile_grid(h, w, t, cfg.min_patches, cfg.max_patches);
        let (th, tw) = (t * rows, t * cols);
        if th * tw > MAX_RESIZED_PIXELS {
            return Err(ConvertError::Unsupported(format!(
                "{cols}x{rows} tiles of {t} pixels exceed {MAX_RESIZED_PIXELS} pixels"
            )));
        }
        let big = resize_bicubic_aa(&img.data, h, w, 3, th, tw);
        for i in 0..cols * rows {
            let (r, c) = (i / cols, i % cols);
            let mut data = Vec::with_capacity(t * t * 3);
            for y in r * t..(r + 1) * t {
                let start = (y * tw + c * t) * 3;
                data.extend_from_slice(&big[start..start + t * 3]);
            }
            tiles.push(RgbImage {
                height: t,
                width: t,
                data,
            });
        }
        grid = Some((cols, rows));
    }
    let side = cfg.global_size();
    let (gh, gw) = global_resize_size(h, w, side);
    if gh == 0 || gw == 0 || gh.max(gw) != side {
        return Err(ConvertError::Unsupported(format!(
            "image of {w}x{h} pixels: its global view would be {gw}x{gh}; \
             transformers cannot resize a side to 0 pixels"
        )));
    }
    let resized = resize_bicubic_aa(&img.data, h, w, 3, gh, gw);
    let (left, top) = ((side - gw) / 2, (side - gh) / 2);
    let mut data: Vec<u8> = cfg
        .background_color
        .iter()
        .copied()
        .cycle()
        .take(side * side * 3)
        .collect();
    for y in 0..gh {
        let dst = ((top + y) * side + left) * 3;
        data[dst..dst + gw * 3].copy_from_slice(&resized[y * gw * 3..(y + 1) * gw * 3]);
    }
    let global = RgbImage {
        height: side,
        width: side,
        data,
    };
    Ok(DeepseekOcr2Views {
        global,
        tiles,
        grid,
    })
}

/// Appends an 8-bit image, normalized, channels first, to `out`.
fn push_normalized(img: &RgbImage, table: &[[f32; 256]; 3], out: &mut Vec<f32>) {
    out.reserve(img.data.len());
    for (c, lut) in table.iter().enumerate() {
        out.extend(img.data.chunks_exact(3).map(|rgb| lut[rgb[c] as usize]));
    }
}

/// Preprocesses decoded images, concatenating their views in order.
pub fn preprocess_deepseek_ocr2(
    images: &[RgbImage],
    cfg: &DeepseekOcr2PreprocessConfig,
) -> Result<DeepseekOcr2Images> {
    let table = level_table(&VisionPreprocessConfig {
        image_mean: cfg.image_mean,
        image_std: cfg.image_std,
        rescale_factor: cfg.rescale_factor,
        do_rescale: cfg.do_rescale,
        do_normalize: cfg.do_normalize,
        ..VisionPreprocessConfig::qwen3_vl()
    });
    let mut out = DeepseekOcr2Images {
        global_size: cfg.global_size(),
        pixel_values: Vec::new(),
        tile_size: cfg.tile_size,
        pixel_values_local: Vec::new(),
        num_local_patches: Vec::with_capacity(images.len()),
        grids: Vec::with_capacity(images.len()),
    };
    for img in images {
        let views = make_views(img, cfg)?;
        push_normalized(&views.global, &table, &mut out.pixel_values);
        for tile in &views.tiles {
            push_normalized(tile, &table, &mut out.pixel_values_local);
        }
        out.num_local_patches.push(views.tiles.len());
        out.grids.push(views.grid);
    }
    Ok(out)
}

/// Decodes image files (as transformers' torchvision backend reads paths)
/// and preprocesses them.
pub fn preprocess_deepseek_ocr2_files<P: AsRef<Path>>(
    paths: &[P],
    cfg: &DeepseekOcr2PreprocessConfig,
) -> Result<DeepseekOcr2Images> {
    let images = paths
        .iter()
        .map(|p| decode_file(p.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    preprocess_deepseek_ocr2(&images, cfg)
}
