//! The vision half of a llama.cpp vision-language pair. llama.cpp writes a
//! VL checkpoint as two GGUFs: the text model and an `mmproj` file
//! (`general.architecture = clip`, from `convert_hf_to_gguf.py --mmproj`)
//! holding the vision tower and its projector. `VisionLanguage::pair` joins
//! them back into what a Hugging Face directory gives: the VL model's
//! config.json (text decoder under `text_config`, the tower's
//! `vision_config` read from the `clip.vision.*` keys and the tensors'
//! shapes, the image token ids found in the vocabulary), the image
//! processor settings, and one weight source under transformers' names
//! (mmproj_weights.rs). Read for Qwen3-VL's tower (projector type
//! `qwen3vl_merger`), which dense Qwen3-VL, Qwen3-VL-MoE and Qwen3.5 (dense
//! and MoE, without DeepStack) share, and DeepSeek-OCR 2's
//! (`deepseekocr2`, mmproj_deepseek.rs).

use serde_json::{json, Map, Value};

use super::family;
use super::mmproj_deepseek;
use super::mmproj_weights::{MmprojWeights, VisionLanguageWeights};
use super::{GgufFile, GgufWeights, MetaValue};
use crate::error::{ConvertError, Result};

/// The projector llama.cpp's converter names Qwen3-VL's merger.
const QWEN3VL_PROJECTOR: &str = "qwen3vl_merger";

/// The special tokens llama.cpp finds by their text (its converter writes no
/// image token id): (config key, token text as Qwen's tokenizers spell it).
const VL_TOKENS: &[(&str, &str)] = &[
    ("image_token_id", "<|image_pad|>"),
    ("video_token_id", "<|video_pad|>"),
    ("vision_start_token_id", "<|vision_start|>"),
    ("vision_end_token_id", "<|vision_end|>"),
];

/// llama.cpp's image budget for Qwen-VL projectors when the file names none
/// (`set_limit_image_tokens(8, 4096)` in tools/mtmd/clip.cpp): merged
/// tokens per image, each `(patch * merge)^2` pixels.
const LLAMA_CPP_MIN_TOKENS: u64 = 8;
const LLAMA_CPP_MAX_TOKENS: u64 = 4096;

/// A text GGUF and its mmproj, as one vision-language model.
pub struct VisionLanguage {
    /// config.json of the VL model (`Qwen3VLForConditionalGeneration`, ...).
    pub config: Value,
    /// preprocessor_config.json-style image processor settings.
    pub preprocessor_config: Value,
    /// Text and vision tensors under transformers' VL names.
    pub weights: VisionLanguageWeights,
}

impl VisionLanguage {
    /// Joins `text` (whose config `hf_config` made: `text_config`) with
    /// the mmproj file `mmproj`.
    pub fn pair(text: GgufWeights, text_config: Value, mmproj: GgufFile) -> Result<VisionLanguage> {
        let tf = text.file();
        let tpath = tf.path().display().to_string();
        let arch = tf.architecture().unwrap_or("");
        let projector = projector_type(&mmproj)?;
        let deepseek = mmproj_deepseek::TEXT_ARCH;
        match (arch == deepseek, projector == mmproj_deepseek::PROJECTOR) {
            (true, true) => return mmproj_deepseek::pair(text, text_config, mmproj),
            (false, false) => {}
            (true, false) | (false, true) => {
                return Err(ConvertError::Unsupported(format!(
                    "{tpath} (a `{arch}` text model) and {} (projector `{projector}`) are not a pair: DeepSeek-OCR 2's `{}` mmproj goes with its `{deepseek}` text model",
                    mmproj.path().display(),
                    mmproj_deepseek::PROJECTOR
                )))
            }
        }
        let Some((class, model_type)) = family::family(arch).and_then(|f| f.vision) else {
            let known: Vec<&str> = family::with_vision().map(|f| f.arch).collect();
            return Err(ConvertError::Unsupported(format!(
                "{tpath}: a `{arch}` text model takes no mmproj here (mmproj pairs are read for {}, {deepseek})",
                known.join(", ")
            )));
        };
        let tower = Tower::read(&mmproj)?;
        check_width(&tower.path, tower.projection_dim, &text_config, &tpath)?;
        let mut c = Map::new();
        c.insert("architectures".into(), json!([class]));
        c.insert("model_type".into(), json!(model_type));
        c.insert(
            "tie_word_embeddings".into(),
            text_config["tie_word_embeddings"].clone(),
        );
        c.insert("text_config".into(), vl_text_config(tf, text_config)?);
        c.insert("vision_config".into(), tower.vision_config(model_type));
        let tokens = tf
            .meta("tokenizer.ggml.tokens")
            .and_then(MetaValue::as_array);
        for &(key, text) in VL_TOKENS {
            let id = tokens.and_then(|t| t.iter().position(|v| v.as_str() == Some(text)));
            match (id, key) {
                (Some(id), _) => {
                    c.insert(key.into(), json!(id));
                }
                (None, "image_token_id") => {
                    return Err(ConvertError::Unsupported(format!(
                        "{tpath}: its vocabulary has no `{text}` token, which stands for an image's patches in a Qwen-VL prompt"
                    )))
                }
                (None, _) => {}
            }
        }
        let preprocessor_config = tower.preprocessor_config();
        let weights =
            VisionLanguageWeights::new(text, MmprojWeights::new(mmproj, &tower.deepstack)?);
        Ok(VisionLanguage {
            config: Value::Object(c),
            preprocessor_config,
            weights,
        })
    }
}

/// The text model's config as a VL `text_config`: the decoder's keys plus
/// its interleaved multimodal rope (llama.cpp's `imrope`: the sections of
/// `rope.dimension_sections`, whose 4th entry these models leave 0), added
/// to the rope parameters `hf_config` gave (Qwen3.5's partial rotary).
fn vl_text_config(tf: &GgufFile, text_config: Value) -> Result<Value> {
    let path = tf.path().display();
    let mut t = match text_config {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    for k in ["architectures", "model_type"] {
        t.remove(k);
    }
    let key = "rope.dimension_sections";
    let sections: Vec<u64> = match tf.arch_meta(key) {
        Some(MetaValue::Array(a)) => a.iter().filter_map(MetaValue::as_u64).collect(),
        _ => vec![],
    };
    let arch = tf.architecture().unwrap_or("");
    let head_dim = t["head_dim"].as_u64().unwrap_or(0);
    let section: Vec<u64> = sections.iter().take(3).copied().collect();
    // Qwen3-VL's sections split every rotary pair; Qwen3.5's may name more
    // pairs than its partial rotary has (transformers' default [11, 11, 10]
    // with 2 pairs), which transformers and the script allow.
    let partial_rotary = family::family(arch).is_some_and(|f| f.partial_rotary);
    let fills = section.iter().sum::<u64>() * 2 == head_dim || partial_rotary;
    if section.len() != 3 || !fills {
        return Err(ConvertError::Corrupt(format!(
            "{path}: {arch}.{key} is {sections:?}; the multimodal rope needs 3 sections of rotary pairs that fill the {head_dim}-wide heads"
        )));
    }
    let theta = t.get("rope_theta").cloned().unwrap_or(json!(10000.0));
    let mut rope = match t.remove("rope_parameters") {
        Some(Value::Object(r)) => r,
        _ => Map::new(),
    };
    rope.entry("rope_type").or_insert(json!("default"));
    rope.entry("rope_theta").or_insert(theta);
    rope.insert("mrope_section".into(), json!(section));
    rope.insert("mrope_interleaved".into(), json!(true));
    t.insert("rope_parameters".into(), Value::Object(rope));
    Ok(Value::Object(t))
}

/// What the mmproj says about the tower.
struct Tower {
    path: String,
    depth: u64,
    hidden: u64,
    intermediate: u64,
    heads: u64,
    patch: u64,
    merge: u64,
    projection_dim: u64,
    /// Vision blocks whose output feeds a DeepStack merger, in order.
    deepstack: Vec<usize>,
    in_channels: usize,
    temporal: usize,
    positions: usize,
    mean: Value,
    std: Value,
    pixels: Option<(u64, u64)>,
}

/// The projector type of mmproj file `g`, refusing a file that is no
/// mmproj.
fn projector_type(g: &GgufFile) -> Result<&str> {
    let path = g.path().display();
    let arch = g.architecture().unwrap_or("none");
    if arch != "clip" {
        return Err(ConvertError::Unsupported(format!(
            "{path}: not an mmproj file (general.architecture is `{arch}`, an mmproj's is `clip`); --model takes the text GGUF and --mmproj the vision GGUF llama.cpp's converter writes with --mmproj"
        )));
    }
    Ok(g.meta("clip.projector_type")
        .or_else(|| g.meta("clip.vision.projector_type"))
        .and_then(MetaValue::as_str)
        .unwrap_or("none"))
}

/// Refuses an mmproj (`path`) whose projector's output is not the text
/// model's width.
pub(super) fn check_width(
    path: &str,
    projection_dim: u64,
    text_config: &Value,
    tpath: &str,
) -> Result<()> {
    let hidden = text_config["hidden_size"].as_u64().unwrap_or(0);
    if projection_dim != hidden {
        return Err(ConvertError::Corrupt(format!(
            "{path}: the projector outputs {projection_dim} values per token (clip.vision.projection_dim) but the text model {tpath} is {hidden} wide: not its mmproj"
        )));
    }
    Ok(())
}

/// `clip.vision.{key}` as a positive integer; `default` when absent, or an
/// error if there is none.
pub(super) fn clip_count(
    g: &GgufFile,
    key: &str,
    default: Option<u64>,
    corrupt: &dyn Fn(String) -> ConvertError,
) -> Result<u64> {
    let full = format!("clip.vision.{key}");
    match (g.meta(&full), default) {
        (Some(v), _) => v
            .as_u64()
            .filter(|&n| n > 0)
            .ok_or_else(|| corrupt(format!("{full} should be a positive integer, found {v:?}"))),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(corrupt(format!("metadata {full} is missing"))),
    }
}

/// Three per-channel numbers (`clip.vision.{key}`), each as its f32's
/// shortest decimal (0.5, 0.48145466).
pub(super) fn clip_triple(
    g: &GgufFile,
    key: &str,
    corrupt: &dyn Fn(String) -> ConvertError,
) -> Result<Value> {
    let full = format!("clip.vision.{key}");
    let v: Vec<f64> = g
        .meta(&full)
        .and_then(MetaValue::as_array)
        .map(|a| a.iter().filter_map(MetaValue::as_f64).collect())
        .unwrap_or_default();
    if v.len() != 3 || v.iter().any(|x| !x.is_finite()) {
        return Err(corrupt(format!(
            "{full} should be 3 numbers (per RGB channel)"
        )));
    }
    Ok(json!(v
        .iter()
        .map(|&x| format!("{}", x as f32).parse::<f64>().unwrap_or(x))
        .collect::<Vec<f64>>()))
}

impl Tower {
    fn read(g: &GgufFile) -> Result<Tower> {
        let path = g.path().display().to_string();
        let corrupt = |m: String| ConvertError::Corrupt(format!("{path}: {m}"));
        let projector = projector_type(g)?;
        if projector != QWEN3VL_PROJECTOR {
            return Err(ConvertError::Unsupported(format!(
                "{path}: projector type `{projector}` is not supported (mmproj files of Qwen3-VL, `{QWEN3VL_PROJECTOR}`, and DeepSeek-OCR 2, `{}`, are)",
                mmproj_deepseek::PROJECTOR
            )));
        }
        let u = |key: &str, default: Option<u64>| clip_count(g, key, default, &corrupt);
        let depth = u("block_count", None)?;
        let hidden = u("embedding_length", None)?;
        let heads = u("attention.head_count", None)?;
        if hidden % heads != 0 {
            return Err(corrupt(format!(
                "{heads} vision heads do not divide the width {hidden}"
            )));
        }
        let key = "clip.vision.is_deepstack_layers";
        let deepstack = match g.meta(key) {
            None => vec![],
            Some(MetaValue::Array(a)) if a.len() as u64 == depth => {
                let flags: Vec<bool> = a.iter().filter_map(MetaValue::as_bool).collect();
                if flags.len() != a.len() {
                    return Err(corrupt(format!("{key} should hold bools, found {a:?}")));
                }
                (0..flags.len()).filter(|&i| flags[i]).collect()
            }
            Some(v) => {
                return Err(corrupt(format!(
                    "{key} should be {depth} bools (one per vision block), found {v:?}"
                )))
            }
        };
        // llama.cpp's converter splits the Conv3d's temporal kernel into 2-D
        // kernels `v.patch_embd.weight`, `.weight.1`, ...; their count is the
        // temporal patch size and their shape [hidden, channels, p, p].
        let kernel = g
            .tensor_info("v.patch_embd.weight")
            .ok_or_else(|| corrupt("no tensor v.patch_embd.weight (the patch embedding)".into()))?;
        let temporal = 1
            + (1..)
                .take_while(|i| g.tensor_info(&format!("v.patch_embd.weight.{i}")).is_some())
                .count();
        let in_channels = match kernel.shape[..] {
            [_, c, _, _] => c,
            _ => {
                return Err(corrupt(format!(
                    "v.patch_embd.weight is {:?}, not a 2-D convolution kernel [out, in, p, p]",
                    kernel.shape
                )))
            }
        };
        let positions = g
            .tensor_info("v.position_embd.weight")
            .and_then(|t| t.shape.first().copied())
            .ok_or_else(|| {
                corrupt("no tensor v.position_embd.weight (the learned positions)".into())
            })?;
        let triple = |key: &str| clip_triple(g, key, &corrupt);
        let pixels = match (
            g.meta("clip.vision.image_min_pixels"),
            g.meta("clip.vision.image_max_pixels"),
        ) {
            (Some(_), Some(_)) => {
                Some((u("image_min_pixels", None)?, u("image_max_pixels", None)?))
            }
            _ => None,
        };
        // Qwen3-VL's tower runs the tanh GELU; a file asking for another
        // activation is not this tower.
        if g.meta("clip.use_silu").and_then(MetaValue::as_bool) == Some(true) {
            return Err(ConvertError::Unsupported(format!(
                "{path}: clip.use_silu is set; Qwen3-VL's vision tower uses GELU"
            )));
        }
        Ok(Tower {
            depth,
            hidden,
            intermediate: u("feed_forward_length", None)?,
            heads,
            patch: u("patch_size", None)?,
            // llama.cpp's default for Qwen-VL projectors.
            merge: u("spatial_merge_size", Some(2))?,
            projection_dim: u("projection_dim", None)?,
            deepstack,
            in_channels,
            temporal,
            positions,
            mean: triple("image_mean")?,
            std: triple("image_std")?,
            pixels,
            path,
        })
    }

    /// Qwen3-VL's `vision_config`. Not stored, as transformers fixes them:
    /// the rope base 10000 and the LayerNorm eps 1e-6 (the script's; the
    /// file's `attention.layer_norm_epsilon` is the text model's RMSNorm
    /// eps, which llama.cpp's converter copies there and llama.cpp then
    /// uses for the tower). The activation: `clip.use_gelu` is the
    /// tanh-approximated GELU Qwen3-VL's tower uses.
    fn vision_config(&self, model_type: &str) -> Value {
        json!({
            "model_type": model_type,
            "depth": self.depth,
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_heads": self.heads,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": self.in_channels,
            "patch_size": self.patch,
            "spatial_merge_size": self.merge,
            "temporal_patch_size": self.temporal,
            "out_hidden_size": self.projection_dim,
            "num_position_embeddings": self.positions,
            "deepstack_visual_indexes": self.deepstack,
        })
    }

    /// The image processor settings: the file's mean, std and sizes, and
    /// its pixel budget (`image_min_pixels` / `image_max_pixels`), else the
    /// one llama.cpp applies to Qwen-VL models (8 to 4096 merged tokens;
    /// the checkpoint's own preprocessor_config.json is not in the file).
    fn preprocessor_config(&self) -> Value {
        let token = (self.patch * self.merge).pow(2);
        let (min, max) = self
            .pixels
            .unwrap_or((LLAMA_CPP_MIN_TOKENS * token, LLAMA_CPP_MAX_TOKENS * token));
        json!({
            "image_processor_type": "Qwen2VLImageProcessor",
            "patch_size": self.patch,
            "temporal_patch_size": self.temporal,
            "merge_size": self.merge,
            "size": {"shortest_edge": min, "longest_edge": max},
            "image_mean": self.mean,
            "image_std": self.std,
        })
    }
}
