//! Images of models whose processor cuts each image into views instead of
//! patches (DeepSeek-OCR 2): a padded global view per image plus local
//! tiles, handed to the script's `forward` as `pixel_values`
//! `[images, 3, S, S]`, `pixel_values_local` `[tiles, 3, T, T]` (absent
//! when no image has tiles) and `num_local_patches` (a list), at plain 1-D
//! positions. Each image's `<image>` placeholder becomes as many tokens as
//! its views yield (global and per-tile queries plus one separator).

use mllm_backends::Tensor;
use mllm_converter::image_preprocess::{
    image_token_count, preprocess_deepseek_ocr2, DeepseekOcr2PreprocessConfig, RgbImage,
};
use mllm_interpreter::Value;
use serde_json::Value as Json;

use crate::images::Images;
use crate::model_files::ModelFiles;
use crate::{Error, Result};

/// The views of a prompt's images beyond `Images::pixel_values` (which
/// holds the global views).
#[derive(Clone, Debug)]
pub struct TiledViews {
    /// `[tiles, 3, T, T]` of every image's local tiles, in order.
    pub local: Option<Tensor>,
    /// Local tiles per image.
    pub num_local: Vec<usize>,
    /// Placeholder tokens per image.
    pub tokens: Vec<usize>,
}

/// Whether the model in `config` takes tiled views (its family's processor
/// is DeepSeek-OCR 2's, families.rs).
pub fn is_tiled(config: &Json) -> bool {
    crate::families::image_processor(config) == crate::families::ImageProcessor::Tiles
}

/// The processor settings: the model's image processor object (which
/// carries the processor's `patch_size` and `downsample_ratio`, see
/// `image_processor_settings`), else the class defaults.
fn settings(files: &ModelFiles) -> Result<DeepseekOcr2PreprocessConfig> {
    let empty = Json::Object(Default::default());
    let image = files.preprocessor_config.as_ref().unwrap_or(&empty);
    let what = format!("the image processor config of {}", files.path.display());
    Ok(DeepseekOcr2PreprocessConfig::from_json(
        image,
        Some(image),
        &what,
    )?)
}

/// Preprocesses decoded images for the model in `files`.
pub fn preprocess(files: &ModelFiles, images: &[RgbImage]) -> Result<Images> {
    let cfg = settings(files)?;
    let p = preprocess_deepseek_ocr2(images, &cfg)?;
    let n = p.num_local_patches.len();
    let (g, t) = (p.global_size, p.tile_size);
    let tiles: usize = p.num_local_patches.iter().sum();
    let local = if tiles == 0 {
        None
    } else {
        Some(Tensor::from_f32(
            p.pixel_values_local,
            vec![tiles, 3, t, t],
        )?)
    };
    Ok(Images {
        pixel_values: Tensor::from_f32(p.pixel_values, vec![n, 3, g, g])?,
        grid_thw: vec![],
        videos: None,
        tiled: Some(TiledViews {
            local,
            tokens: p
                .num_local_patches
                .iter()
                .map(|&k| image_token_count(&cfg, k))
                .collect(),
            num_local: p.num_local_patches,
        }),
    })
}

/// The named inputs of `forward` for these views.
pub fn forward_args(global: &Tensor, views: &TiledViews) -> Vec<(&'static str, Value)> {
    let mut args = vec![("pixel_values", Value::Tensor(global.clone()))];
    if let Some(local) = &views.local {
        args.push(("pixel_values_local", Value::Tensor(local.clone())));
    }
    let counts = views
        .num_local
        .iter()
        .map(|&k| Value::Int(k as i64))
        .collect();
    args.push(("num_local_patches", Value::List(std::rc::Rc::new(counts))));
    args
}

/// The views of several preprocessing calls, in order, as one batch.
pub fn concat(parts: &[&Images]) -> Result<Images> {
    let mut global = vec![];
    let mut local = vec![];
    let mut shapes: (Option<Vec<usize>>, Option<Vec<usize>>) = (None, None);
    let mut views = TiledViews {
        local: None,
        num_local: vec![],
        tokens: vec![],
    };
    let same = |seen: &mut Option<Vec<usize>>, shape: &[usize]| -> Result<()> {
        match seen {
            Some(s) if s[1..] != shape[1..] => Err(Error::invalid(
                "images preprocessed with different view sizes",
            )),
            Some(s) => {
                s[0] += shape[0];
                Ok(())
            }
            None => {
                *seen = Some(shape.to_vec());
                Ok(())
            }
        }
    };
    for p in parts {
        let Some(v) = &p.tiled else {
            return Err(Error::invalid("tiled and patch images in one prompt"));
        };
        same(&mut shapes.0, p.pixel_values.shape())?;
        global.extend(p.pixel_values.to_f32_vec()?);
        if let Some(l) = &v.local {
            same(&mut shapes.1, l.shape())?;
            local.extend(l.to_f32_vec()?);
        }
        views.num_local.extend(&v.num_local);
        views.tokens.extend(&v.tokens);
    }
    let global_shape = shapes.0.unwrap_or_else(|| vec![0, 3, 0, 0]);
    if let Some(shape) = shapes.1 {
        views.local = Some(Tensor::from_f32(local, shape)?);
    }
    Ok(Images {
        pixel_values: Tensor::from_f32(global, global_shape)?,
        grid_thw: vec![],
        videos: None,
        tiled: Some(views),
    })
}
