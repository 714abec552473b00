//! Images in prompts (Qwen-VL style): the processor's output
//! (`pixel_values` + `image_grid_thw`) read from a file or made from image
//! files, placeholder expansion in prompt text, and the prefill that feeds
//! them to a script's `forward` at multimodal rotary positions.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_interpreter::mrope::{mrope_positions_multi, split_video_grids, Placeholders};
use mllm_interpreter::{Executor, ForwardInputs, KvCache, Model, Value};
use serde_json::Value as Json;

use crate::model_files::ModelFiles;
use crate::videos::{self, Videos};
use crate::{color, Error as CliError, Result as CliResult};

/// Images of a prompt as the Hugging Face processor outputs them:
/// `pixel_values` f32 [patches, C*T*P*P] and one (t, h, w) patch grid each
/// (none: no rows, no grids), and the prompt's videos.
pub struct Images {
    pub pixel_values: Tensor,
    pub grid_thw: Vec<[i64; 3]>,
    pub videos: Option<Videos>,
}

impl Images {
    /// No images (a prompt with videos only).
    pub fn none() -> Images {
        Images {
            pixel_values: Tensor::from_f32(vec![], vec![0, 0]).expect("an empty tensor"),
            grid_thw: vec![],
            videos: None,
        }
    }
}

/// Reads `pixel_values` (f32) and `image_grid_thw` (i64 or i32 [images, 3]).
pub fn read_images(path: &str) -> CliResult<Images> {
    let err = |m: String| CliError(format!("error: {path}: {m}"));
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
    })
}

fn config_int(config: &Json, path: &[&str], default: Option<i64>) -> CliResult<i64> {
    let mut v = Some(config);
    for k in path {
        v = v.and_then(|x| x.get(k));
    }
    match (v.and_then(|x| x.as_i64()), default) {
        (Some(x), _) | (None, Some(x)) => Ok(x),
        (None, None) => Err(CliError(format!(
            "error: config.json has no integer `{}`, which a prompt with images needs",
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
}

impl ImageTokens {
    pub fn from_config(config: &Json) -> CliResult<ImageTokens> {
        let id = |path: &[&str]| -> CliResult<Option<i32>> {
            match config_int(config, path, Some(-1))? {
                -1 => Ok(None),
                v => i32::try_from(v).map(Some).map_err(|_| {
                    CliError(format!("error: {} {v} is out of range", path.join(".")))
                }),
            }
        };
        let image = id(&["image_token_id"])?.ok_or_else(|| {
            CliError(
                "error: config.json has no `image_token_id`; this model does not take images"
                    .into(),
            )
        })?;
        Ok(ImageTokens {
            image,
            video: id(&["video_token_id"])?,
            vision_start: id(&["vision_start_token_id"])?,
            vision_end: id(&["vision_end_token_id"])?,
            merge: config_int(config, &["vision_config", "spatial_merge_size"], Some(2))?,
        })
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
) -> CliResult<(Tensor, i64)> {
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
        CliError(format!(
            "error: image/video tokens and image_grid_thw/video_grid_thw disagree: {e}"
        ))
    })?;
    let n = ids.len();
    let rows: Vec<i32> = p.rows.concat();
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
        input_ids: Tensor::from_i32(ids.to_vec(), vec![n])?,
        positions: Tensor::from_i32(rows, vec![3, n])?,
        cache: cache.clone(),
        images: image_inputs,
        videos: video_inputs,
        last_only,
    };
    let out = model
        .run(exec, inputs)
        .map_err(|e| CliError(e.render(&model.program.sources, color())))?;
    match out {
        Value::Tensor(t) if t.rank() == 2 && t.shape()[0] >= 1 => Ok((t, p.delta)),
        other => Err(CliError(format!(
            "error: the script's forward returned {other:?}, expected logits [seq, vocab]"
        ))),
    }
}

/// The image processor settings of the model in `files`: its
/// `preprocessor_config.json` (which a .mllm file carries), else its
/// `vision_config` with the published Qwen3-VL budget.
fn preprocess_config(
    files: &ModelFiles,
    spec: &ImageTokens,
) -> CliResult<mllm_converter::image_preprocess::VisionPreprocessConfig> {
    use mllm_converter::image_preprocess::VisionPreprocessConfig;
    let cfg = if let Some(p) = &files.preprocessor_config {
        let what = format!("the preprocessor config of {}", files.path.display());
        VisionPreprocessConfig::from_json(p, &what)?
    } else {
        let v = files.config.get("vision_config").ok_or_else(|| {
            CliError(format!(
                "error: {} has neither preprocessor_config.json nor a vision_config; it does not take images",
                files.path.display()
            ))
        })?;
        VisionPreprocessConfig::from_vision_config(v, &files.config_origin)?
    };
    if cfg.merge_size as i64 != spec.merge {
        return Err(CliError(format!(
            "error: the image processor merges {} patches per side but the model {}",
            cfg.merge_size, spec.merge
        )));
    }
    Ok(cfg)
}

fn to_images(p: mllm_converter::image_preprocess::ImagePatches) -> CliResult<Images> {
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
    })
}

/// Decodes and preprocesses image files for the model in `files`, with the
/// model's image tokens.
pub fn from_files(files: &ModelFiles, paths: &[String]) -> CliResult<(Images, ImageTokens)> {
    let spec = ImageTokens::from_config(&files.config)?;
    let cfg = preprocess_config(files, &spec)?;
    let p = mllm_converter::image_preprocess::preprocess_files(paths, &cfg)?;
    Ok((to_images(p)?, spec))
}

/// Preprocesses images already decoded (a server's data URIs) for the
/// model in `files`, with the model's image tokens.
pub fn from_decoded(
    files: &ModelFiles,
    images: &[mllm_converter::image_preprocess::RgbImage],
) -> CliResult<(Images, ImageTokens)> {
    let spec = ImageTokens::from_config(&files.config)?;
    let cfg = preprocess_config(files, &spec)?;
    let p = mllm_converter::image_preprocess::preprocess_images(images, &cfg)?;
    Ok((to_images(p)?, spec))
}

/// A deterministic `side` x `side` test pattern, preprocessed as a photo of
/// that size would be (for `mllm bench --image-size`).
pub fn synthetic(files: &ModelFiles, side: usize) -> CliResult<(Images, ImageTokens)> {
    use mllm_converter::image_preprocess::{preprocess_images, RgbImage};
    let spec = ImageTokens::from_config(&files.config)?;
    let cfg = preprocess_config(files, &spec)?;
    let data = (0..side * side * 3)
        .map(|i| ((i * 2_654_435_761usize) >> 13) as u8)
        .collect();
    let img = RgbImage {
        height: side,
        width: side,
        data,
    };
    Ok((to_images(preprocess_images(&[img], &cfg)?)?, spec))
}

/// The prompt text for a user turn with images, placeholders expanded to
/// one token per merged patch (see `conversation_text`).
pub fn prompt_text(
    files: &ModelFiles,
    system: Option<&str>,
    prompt: &str,
    images: &Images,
    spec: &ImageTokens,
    raw: bool,
    enable_thinking: Option<bool>,
) -> CliResult<String> {
    let mut turns = vec![];
    if let Some(s) = system {
        turns.push(Turn::new("system", s, 0));
    }
    turns.push(Turn::new("user", prompt, images.grid_thw.len()).with_videos(videos::count(images)));
    if raw {
        let inline = inline_placeholders(files, spec, images.grid_thw.len())?;
        let inline_v = inline_video_placeholders(files, spec, videos::count(images))?;
        let pad = token_text(files, Some(spec.image))?;
        let text = expand_placeholders(&format!("{inline}{inline_v}{prompt}"), &pad, images, spec)?;
        return videos::expand_video_placeholders(files, &text, images, spec);
    }
    conversation_text(files, &turns, images, spec, enable_thinking)
}

/// One message of a conversation with the number of images and videos
/// shown in it (they come before its text, images first, in order).
#[derive(Clone, Debug)]
pub struct Turn {
    pub role: String,
    pub text: String,
    pub images: usize,
    pub videos: usize,
}

impl Turn {
    pub fn new(role: &str, text: &str, images: usize) -> Turn {
        Turn {
            role: role.to_string(),
            text: text.to_string(),
            images,
            videos: 0,
        }
    }

    /// The turn showing `videos` videos (after its images).
    pub fn with_videos(mut self, videos: usize) -> Turn {
        self.videos = videos;
        self
    }
}

pub(crate) fn token_text(files: &ModelFiles, id: Option<i32>) -> CliResult<String> {
    let tok = files.tokenizer()?;
    match id {
        None => Ok(String::new()),
        Some(id) => tok.id_to_token(id as u32).ok_or_else(|| {
            CliError(format!(
                "error: the tokenizer has no token {id}, which config.json names for images"
            ))
        }),
    }
}

/// `n` images written out: `<|vision_start|><|image_pad|><|vision_end|>` each.
fn inline_placeholders(files: &ModelFiles, spec: &ImageTokens, n: usize) -> CliResult<String> {
    let one = format!(
        "{}{}{}",
        token_text(files, spec.vision_start)?,
        token_text(files, Some(spec.image))?,
        token_text(files, spec.vision_end)?
    );
    Ok(one.repeat(n))
}

/// `n` videos written out: `<|vision_start|><|video_pad|><|vision_end|>` each.
fn inline_video_placeholders(
    files: &ModelFiles,
    spec: &ImageTokens,
    n: usize,
) -> CliResult<String> {
    if n == 0 {
        return Ok(String::new());
    }
    let one = format!(
        "{}{}{}",
        token_text(files, spec.vision_start)?,
        token_text(files, spec.video)?,
        token_text(files, spec.vision_end)?
    );
    Ok(one.repeat(n))
}

/// Both kinds of placeholders of a turn, images first.
fn inline_all(files: &ModelFiles, spec: &ImageTokens, t: &Turn) -> CliResult<String> {
    Ok(inline_placeholders(files, spec, t.images)?
        + &inline_video_placeholders(files, spec, t.videos)?)
}

/// A conversation through the chat template (with a generation prompt),
/// each image placeholder expanded to one token per merged patch (as the
/// Hugging Face processor does before tokenizing). Turns with images reach
/// the template as content parts (`{"type": "image"}` per image, then the
/// text), as Qwen-VL templates expect; a template that ignores image parts
/// gets the placeholders written in front of the turn's text instead.
pub fn conversation_text(
    files: &ModelFiles,
    turns: &[Turn],
    images: &Images,
    spec: &ImageTokens,
    enable_thinking: Option<bool>,
) -> CliResult<String> {
    let shown: usize = turns.iter().map(|t| t.images).sum();
    let shown_v: usize = turns.iter().map(|t| t.videos).sum();
    if shown != images.grid_thw.len() || shown_v != videos::count(images) {
        return Err(CliError(format!(
            "error: the conversation shows {shown} images and {shown_v} videos but {} and {} were preprocessed",
            images.grid_thw.len(),
            videos::count(images)
        )));
    }
    let pad = token_text(files, Some(spec.image))?;
    let vpad = token_text(files, spec.video)?;
    let expand = |text: &str| -> CliResult<String> {
        let text = expand_placeholders(text, &pad, images, spec)?;
        videos::expand_video_placeholders(files, &text, images, spec)
    };
    let Some(t) = &files.chat_template else {
        let text: String = turns
            .iter()
            .map(|t| Ok(format!("{}{}", inline_all(files, spec, t)?, t.text)))
            .collect::<CliResult<Vec<_>>>()?
            .concat();
        return expand(&text);
    };
    let messages: Vec<Json> = turns
        .iter()
        .map(|t| {
            if t.images == 0 && t.videos == 0 {
                return serde_json::json!({"role": t.role, "content": t.text});
            }
            let mut parts = vec![serde_json::json!({"type": "image"}); t.images];
            parts.extend(vec![serde_json::json!({"type": "video"}); t.videos]);
            parts.push(serde_json::json!({"type": "text", "text": t.text}));
            serde_json::json!({"role": t.role, "content": parts})
        })
        .collect();
    let mut extra = vec![];
    if let Some(e) = enable_thinking {
        extra.push(("enable_thinking", Json::Bool(e)));
    }
    let text = match t.render_json(&Json::Array(messages), true, &extra) {
        Ok(r)
            if r.matches(pad.as_str()).count() == shown
                && (shown_v == 0 || r.matches(vpad.as_str()).count() == shown_v) =>
        {
            r
        }
        _ => {
            // A text-only template: the images go before each turn's text.
            let msgs = turns
                .iter()
                .map(|t| {
                    let inline = inline_all(files, spec, t)?;
                    Ok(crate::prompt::Message::new(
                        &t.role,
                        format!("{inline}{}", t.text),
                    ))
                })
                .collect::<CliResult<Vec<_>>>()?;
            crate::prompt::render(files, &msgs, true, enable_thinking)?
        }
    };
    expand(&text)
}

/// The images of several preprocessing calls, in order, as one batch.
pub fn concat(parts: &[Images]) -> CliResult<Option<Images>> {
    let Some(first) = parts.first() else {
        return Ok(None);
    };
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
            return Err(CliError("error: images with different patch sizes".into()));
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
    }))
}

/// Replaces the `i`-th `pad` in `text` by as many pads as image `i` has
/// merged patches.
pub fn expand_placeholders(
    text: &str,
    pad: &str,
    images: &Images,
    spec: &ImageTokens,
) -> CliResult<String> {
    let pieces: Vec<&str> = text.split(pad).collect();
    if pieces.len() != images.grid_thw.len() + 1 {
        return Err(CliError(format!(
            "error: the prompt has {} image placeholders ({pad}) for {} images",
            pieces.len() - 1,
            images.grid_thw.len()
        )));
    }
    let mut out = String::with_capacity(text.len());
    for (i, piece) in pieces.iter().enumerate() {
        out.push_str(piece);
        if let Some(g) = images.grid_thw.get(i) {
            out.push_str(&pad.repeat(spec.count(*g)));
        }
    }
    Ok(out)
}
