//! Images in prompts (Qwen-VL style): the processor's output
//! (`pixel_values` + `image_grid_thw`) read from a file or made from image
//! files, placeholder expansion in prompt text, and the prefill that feeds
//! them to a script's `forward` at multimodal rotary positions.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_interpreter::mrope::{mrope_positions_multi, split_video_grids, Placeholders};
use mllm_interpreter::{Executor, ForwardInputs, KvCache, Model};
use serde_json::Value as Json;

use crate::engine::forward_logits;
use crate::model_files::ModelFiles;
use crate::tiled_images::{self, TiledViews};
use crate::videos::{self, Videos};
use crate::{Error, Result};

pub(crate) use crate::image_prompt::token_text;
pub use crate::image_prompt::{conversation_text, expand_placeholders, prompt_text, Turn};

/// Images of a prompt as the Hugging Face processor outputs them:
/// `pixel_values` f32 [patches, C*T*P*P] and one (t, h, w) patch grid each
/// (none: no rows, no grids), and the prompt's videos. A tiling processor
/// (DeepSeek-OCR 2, `tiled`) puts its global views `[images, 3, S, S]` in
/// `pixel_values` and leaves `grid_thw` empty.
pub struct Images {
    pub pixel_values: Tensor,
    pub grid_thw: Vec<[i64; 3]>,
    pub videos: Option<Videos>,
    pub tiled: Option<TiledViews>,
}

impl Images {
    /// No images (a prompt with videos only).
    pub fn none() -> Images {
        Images {
            pixel_values: Tensor::from_f32(vec![], vec![0, 0]).expect("an empty tensor"),
            grid_thw: vec![],
            videos: None,
            tiled: None,
        }
    }

    /// How many images (not counting videos).
    pub fn count(&self) -> usize {
        match &self.tiled {
            Some(t) => t.tokens.len(),
            None => self.grid_thw.len(),
        }
    }

    /// Placeholder tokens image `i` takes.
    pub fn tokens(&self, i: usize, spec: &ImageTokens) -> usize {
        match &self.tiled {
            Some(t) => t.tokens.get(i).copied().unwrap_or(0),
            None => self.grid_thw.get(i).map_or(0, |&g| spec.count(g)),
        }
    }
}

/// Reads `pixel_values` (f32) and `image_grid_thw` (i64 or i32 [images, 3]).
pub fn read_images(path: &str) -> Result<Images> {
    let err = |m: String| Error::invalid(format!("{path}: {m}"));
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| err(e.to_string()))?;
    let pv = st
        .tensor("pixel_values")
        .map_err(|_| err("no tensor `pixel_values`".into()))?;
    if pv.dtype() != safetensors::Dtype::F32 || pv.shape().len() != 2 {
        return Err(err(format!(
            "`pixel_values` must be f32 [patches, C*T*P*P], found {:?} {:?}",
            pv.dtype(),
            pv.shape()
        )));
    }
    let data = pv
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let pixel_values = Tensor::from_f32(data, pv.shape().to_vec())?;
    let g = st
        .tensor("image_grid_thw")
        .map_err(|_| err("no tensor `image_grid_thw`".into()))?;
    let flat: Vec<i64> = match g.dtype() {
        safetensors::Dtype::I64 => g
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        safetensors::Dtype::I32 => g
            .data()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        d => {
            return Err(err(format!(
                "`image_grid_thw` must be i64 or i32, found {d:?}"
            )))
        }
    };
    if g.shape().len() != 2 || g.shape()[1] != 3 || g.shape()[0] == 0 {
        return Err(err(format!(
            "`image_grid_thw` must be [images, 3], found {:?}",
            g.shape()
        )));
    }
    let grid_thw = flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    Ok(Images {
        pixel_values,
        grid_thw,
        videos: None,
        tiled: None,
    })
}

fn config_int(config: &Json, path: &[&str], default: Option<i64>) -> Result<i64> {
    let mut v = Some(config);
    for k in path {
        v = v.and_then(|x| x.get(k));
    }
    match (v.and_then(|x| x.as_i64()), default) {
        (Some(x), _) | (None, Some(x)) => Ok(x),
        (None, None) => Err(Error::invalid(format!(
            "config.json has no integer `{}`, which a prompt with images needs",
            path.join(".")
        ))),
    }
}

/// Which tokens stand for images, from the model's config.
#[derive(Clone, Debug)]
pub struct ImageTokens {
    /// The placeholder (`<|image_pad|>`), repeated once per merged patch.
    pub image: i32,
    /// The video placeholder (`<|video_pad|>`), when the model takes videos.
    pub video: Option<i32>,
    pub vision_start: Option<i32>,
    pub vision_end: Option<i32>,
    /// Patches merged into one token per side.
    pub merge: i64,
    /// The processor cuts images into views (DeepSeek-OCR 2): placeholders
    /// count per image, positions are 1-D.
    pub tiled: bool,
}

impl ImageTokens {
    pub fn from_config(config: &Json) -> Result<ImageTokens> {
        let id = |path: &[&str]| -> Result<Option<i32>> {
            match config_int(config, path, Some(-1))? {
                -1 => Ok(None),
                v => i32::try_from(v)
                    .map(Some)
                    .map_err(|_| Error::invalid(format!("{} {v} is out of range", path.join(".")))),
            }
        };
        let image = id(&["image_token_id"])?.ok_or_else(|| {
            Error::invalid("config.json has no `image_token_id`; this model does not take images")
        })?;
        Ok(ImageTokens {
            image,
            video: id(&["video_token_id"])?,
            vision_start: id(&["vision_start_token_id"])?,
            vision_end: id(&["vision_end_token_id"])?,
            merge: config_int(config, &["vision_config", "spatial_merge_size"], Some(2))?,
            tiled: tiled_images::is_tiled(config),
        })
    }

    /// `from_config` for the model in `files`. A GGUF text model without
    /// a vision config is told where its tower is: llama.cpp writes it to a
    /// separate mmproj file, which `--mmproj` adds.
    pub fn for_files(files: &ModelFiles) -> Result<ImageTokens> {
        let gguf = files
            .path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if gguf && files.config.get("vision_config").is_none() {
            return Err(Error::invalid(format!("{} is a GGUF text model; images and videos need its vision tower, the mmproj GGUF llama.cpp's converter writes beside it (convert_hf_to_gguf.py --mmproj): pass it with --mmproj FILE",
                files.path.display()
            )));
        }
        ImageTokens::from_config(&files.config)
    }

    /// Placeholder tokens image `grid` takes: one per merged patch.
    pub fn count(&self, grid: [i64; 3]) -> usize {
        let m = self.merge.max(1);
        (grid[0].saturating_mul(grid[1]).saturating_mul(grid[2]) / (m * m)).max(0) as usize
    }
}

/// Runs the entry `forward` on a prompt with images at multimodal rotary
/// positions; returns the logits and the offset `delta` at which decoding
/// continues (token `i` of the sequence sits at position `i + delta`).
pub fn run_forward_images(
    model: &Model,
    exec: &mut dyn Executor,
    cache: &Rc<RefCell<KvCache>>,
    ids: &[i32],
    images: &Images,
    spec: &ImageTokens,
    last_only: bool,
) -> Result<(Tensor, i64)> {
    run_forward_images_from(model, exec, cache, ids, 0, images, spec, last_only)
}

/// `run_forward_images` for `ids[start..]` after a cache holding the
/// first `start` ids (text before the first image, shared from another
/// sequence): every placeholder lies at or after `start`; positions are the
/// whole prompt's. Not for tiled images.
#[allow(clippy::too_many_arguments)]
pub fn run_forward_images_from(
    model: &Model,
    exec: &mut dyn Executor,
    cache: &Rc<RefCell<KvCache>>,
    ids: &[i32],
    start: usize,
    images: &Images,
    spec: &ImageTokens,
    last_only: bool,
) -> Result<(Tensor, i64)> {
    if let Some(views) = &images.tiled {
        if start > 0 {
            return Err(Error::invalid(
                "tiled images start their prompt: no cached text before them",
            ));
        }
        return run_forward_tiled(model, exec, cache, ids, images, views, last_only);
    }
    let held = if start > 0 { cache.borrow().len(0) } else { 0 };
    if start >= ids.len().max(1) || held != start {
        return Err(Error::invalid(format!(
            "a prompt of {} ids with images continues a cache of {held} positions from {start}",
            ids.len()
        )));
    }
    let frames = images
        .videos
        .as_ref()
        .map(|v| split_video_grids(&v.grid_thw))
        .unwrap_or_default();
    let mut kinds = vec![Placeholders {
        token: spec.image,
        what: "image",
        grids: &images.grid_thw,
    }];
    if let (Some(token), Some(_)) = (spec.video, &images.videos) {
        kinds.push(Placeholders {
            token,
            what: "video frame",
            grids: &frames,
        });
    }
    let p = mrope_positions_multi(ids, &kinds, spec.merge).map_err(|e| {
        Error::invalid(format!(
            "image/video tokens and image_grid_thw/video_grid_thw disagree: {e}"
        ))
    })?;
    // The positions of the part computed now: row r of `p.rows` from `start`.
    let n = ids.len() - start;
    let rows: Vec<i32> = p.rows.iter().flat_map(|r| r[start..].to_vec()).collect();
    let grid_tensor = |g: &[[i64; 3]]| {
        let flat: Vec<i32> = g
            .iter()
            .flatten()
            .map(|&v| i32::try_from(v).unwrap_or(i32::MAX))
            .collect();
        Tensor::from_i32(flat, vec![g.len(), 3])
    };
    let image_inputs = if images.grid_thw.is_empty() {
        None
    } else {
        Some((images.pixel_values.clone(), grid_tensor(&images.grid_thw)?))
    };
    let video_inputs = match &images.videos {
        Some(v) if !v.grid_thw.is_empty() => {
            Some((v.pixel_values.clone(), grid_tensor(&v.grid_thw)?))
        }
        _ => None,
    };
    let inputs = ForwardInputs {
        batch: vec![],
        input_ids: Tensor::from_i32(ids[start..].to_vec(), vec![n])?,
        positions: Tensor::from_i32(rows, vec![3, n])?,
        cache: cache.clone(),
        images: image_inputs,
        videos: video_inputs,
        extra: vec![],
        last_only,
    };
    Ok((forward_logits(model, exec, inputs)?, p.delta))
}

/// `run_forward_images` for tiled views: the views as named inputs, the
/// prompt at 1-D positions from 0 (decoding continues at `i`, delta 0).
fn run_forward_tiled(
    model: &Model,
    exec: &mut dyn Executor,
    cache: &Rc<RefCell<KvCache>>,
    ids: &[i32],
    images: &Images,
    views: &TiledViews,
    last_only: bool,
) -> Result<(Tensor, i64)> {
    let mut inputs = ForwardInputs::text(ids, 0, cache.clone(), last_only)?;
    inputs.extra = tiled_images::forward_args(&images.pixel_values, views);
    Ok((forward_logits(model, exec, inputs)?, 0))
}

/// The image processor settings of the model in `files`: its
/// `preprocessor_config.json` (which a .mllm file carries), else its
/// `vision_config` with the published Qwen3-VL budget.
fn preprocess_config(
    files: &ModelFiles,
    spec: &ImageTokens,
) -> Result<mllm_converter::image_preprocess::VisionPreprocessConfig> {
    use mllm_converter::image_preprocess::VisionPreprocessConfig;
    let cfg = if let Some(p) = &files.preprocessor_config {
        let what = format!("the preprocessor config of {}", files.path.display());
        VisionPreprocessConfig::from_json(p, &what)?
    } else {
        let v = files.config.get("vision_config").ok_or_else(|| {
            Error::invalid(format!("{} has neither preprocessor_config.json nor a vision_config; it does not take images",
                files.path.display()
            ))
        })?;
        VisionPreprocessConfig::from_vision_config(v, &files.config_origin)?
    };
    if cfg.merge_size as i64 != spec.merge {
        return Err(Error::invalid(format!(
            "the image processor merges {} patches per side but the model {}",
            cfg.merge_size, spec.merge
        )));
    }
    Ok(cfg)
}

fn to_images(p: mllm_converter::image_preprocess::ImagePatches) -> Result<Images> {
    let shape = p.shape().to_vec();
    let grid_thw = p
        .grid_thw
        .iter()
        .map(|g| [g[0] as i64, g[1] as i64, g[2] as i64])
        .collect();
    Ok(Images {
        pixel_values: Tensor::from_f32(p.pixel_values, shape)?,
        grid_thw,
        videos: None,
        tiled: None,
    })
}

/// Decodes and preprocesses image files for the model in `files`, with the
/// model's image tokens.
pub fn from_files(files: &ModelFiles, paths: &[String]) -> Result<(Images, ImageTokens)> {
    let spec = ImageTokens::for_files(files)?;
    if spec.tiled {
        let decoded = paths
            .iter()
            .map(|p| mllm_converter::image_preprocess::decode_file(std::path::Path::new(p)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        return Ok((tiled_images::preprocess(files, &decoded)?, spec));
    }
    let cfg = preprocess_config(files, &spec)?;
    let p = mllm_converter::image_preprocess::preprocess_files(paths, &cfg)?;
    Ok((to_images(p)?, spec))
}

/// Preprocesses images already decoded (a server's data URIs) for the
/// model in `files`, with the model's image tokens.
pub fn from_decoded(
    files: &ModelFiles,
    images: &[mllm_converter::image_preprocess::RgbImage],
) -> Result<(Images, ImageTokens)> {
    let spec = ImageTokens::for_files(files)?;
    if spec.tiled {
        return Ok((tiled_images::preprocess(files, images)?, spec));
    }
    let cfg = preprocess_config(files, &spec)?;
    let p = mllm_converter::image_preprocess::preprocess_images(images, &cfg)?;
    Ok((to_images(p)?, spec))
}

/// A deterministic `side` x `side` test pattern, preprocessed as a photo of
/// that size would be (for `mllm bench --image-size`).
pub fn synthetic(files: &ModelFiles, side: usize) -> Result<(Images, ImageTokens)> {
    use mllm_converter::image_preprocess::{preprocess_images, RgbImage};
    let spec = ImageTokens::for_files(files)?;
    let data = (0..side * side * 3)
        .map(|i| ((i * 2_654_435_761usize) >> 13) as u8)
        .collect();
    let img = RgbImage {
        height: side,
        width: side,
        data,
    };
    if spec.tiled {
        return Ok((tiled_images::preprocess(files, &[img])?, spec));
    }
    let cfg = preprocess_config(files, &spec)?;
    Ok((to_images(preprocess_images(&[img], &cfg)?)?, spec))
}

/// The images of several preprocessing calls, in order, as one batch.
pub fn concat(parts: &[Images]) -> Result<Option<Images>> {
    let Some(first) = parts.first() else {
        return Ok(None);
    };
    if parts.iter().any(|p| p.tiled.is_some()) {
        let refs: Vec<&Images> = parts.iter().collect();
        return tiled_images::concat(&refs).map(Some);
    }
    let width = parts
        .iter()
        .find(|p| !p.grid_thw.is_empty())
        .unwrap_or(first)
        .pixel_values
        .shape()
        .get(1)
        .copied()
        .unwrap_or(0);
    let mut data = vec![];
    let mut grid_thw = vec![];
    for p in parts {
        if !p.grid_thw.is_empty() && p.pixel_values.shape().get(1).copied().unwrap_or(0) != width {
            return Err(Error::invalid("images with different patch sizes"));
        }
        data.extend(p.pixel_values.to_f32_vec()?);
        grid_thw.extend(p.grid_thw.iter().copied());
    }
    let rows = data.len() / width.max(1);
    let vids: Vec<&Videos> = parts.iter().filter_map(|p| p.videos.as_ref()).collect();
    Ok(Some(Images {
        pixel_values: Tensor::from_f32(data, vec![rows, width])?,
        grid_thw,
        videos: videos::concat(&vids)?,
        tiled: None,
    }))
}
