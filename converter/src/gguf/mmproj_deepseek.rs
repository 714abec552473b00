//! DeepSeek-OCR 2 as llama.cpp writes it: the text decoder (arch
//! `deepseek2-ocr`, family/deepseek.rs) and an mmproj of projector type
//! `deepseekocr2` (conversion/deepseek.py `DeepseekOCR2VisionModel`): the
//! SAM encoder at `v.sam.*`, the Qwen2 encoder at `v.blk.N.*` / `v.post_ln`
//! with its learned queries `v.resample_query_{768,1024}`, the projector
//! `mm.model.fc` and `v.view_seperator`. Joined here into what the
//! checkpoint deepseek-ai publishes holds, read by models/deepseek_ocr2.mdl:
//! transformers' `DeepseekOcr2ForConditionalGeneration` config and the
//! original tensor names (`model.sam_model.*`, `model.qwen2_model.*`,
//! `model.projector.layers`, `model.view_seperator`; the decoder's stay as
//! the text file has them, `model.layers.N.*`).
//!
//! What the file does not store is what llama.cpp's runtime fixes
//! (tools/mtmd/clip.cpp, clip-model.h, models/deepseekocr2.cpp), taken
//! the same way: SAM's global attention at layers 2, 5, 8, 11, its
//! LayerNorm eps 1e-6, the encoder's rope base 1e6; the views' sides come
//! from the tensors (the position table's grid times the patch for the
//! global view; the 144-query set's 12x12 grid times the two stride-2
//! convolutions and the patch for a tile: 1024 and 768 px for the
//! published model, as llama.cpp's constants), so a file of another patch
//! size reads right too.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::mmproj::{check_width, clip_count, clip_triple, VisionLanguage};
use super::mmproj_weights::{MmprojWeights, Source, VisionLanguageWeights};
use super::{GgufFile, GgufWeights, MetaValue};
use crate::error::{ConvertError, Result};

/// The projector type llama.cpp's converter gives DeepSeek-OCR 2's tower.
pub(super) const PROJECTOR: &str = "deepseekocr2";
/// The text architecture it pairs with.
pub(super) const TEXT_ARCH: &str = "deepseek2-ocr";

/// SAM layers with global attention (`global_attn_indices` in llama.cpp's
/// clip-model.h, the published model's `global_attn_indexes`).
const GLOBAL_ATTENTION: [u64; 4] = [2, 5, 8, 11];
/// The encoder's rope base in llama.cpp's graph (Qwen2-0.5B's).
const ENCODER_ROPE_THETA: f64 = 1_000_000.0;
/// SAM's LayerNorm eps in llama.cpp's graph (the published config's).
const SAM_EPS: f64 = 1e-6;
/// SAM's output grid shrinks by this much (two stride-2 convolutions).
const DOWNSAMPLE: u64 = 4;
/// Queries of the tile-sized view (the 768 px tiles).
const TILE_QUERIES: u64 = 144;

/// Tensors of SAM block N: `v.sam.blk.N.{gguf}` is
/// `model.sam_model.blocks.N.{hf}` (suffix kept unless `None`: the
/// relative-position tables are bare parameters in the checkpoint).
const SAM_BLOCK: &[(&str, &str)] = &[
    ("pre_ln", "norm1"),
    ("post_ln", "norm2"),
    ("attn.qkv", "attn.qkv"),
    ("attn.out", "attn.proj"),
    ("mlp.lin1", "mlp.lin1"),
    ("mlp.lin2", "mlp.lin2"),
];

/// Tensors of encoder block N: `v.blk.N.{gguf}` is
/// `model.qwen2_model.model.model.layers.N.{hf}`.
const ENCODER_BLOCK: &[(&str, &str)] = &[
    ("ln1", "input_layernorm"),
    ("ln2", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_out", "self_attn.o_proj"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Tensors outside the blocks, suffix kept: (GGUF stem, HF stem).
const GLOBAL: &[(&str, &str)] = &[
    ("v.sam.patch_embd", "model.sam_model.patch_embed.proj"),
    ("v.sam.net_2", "model.sam_model.net_2"),
    ("v.sam.net_3", "model.sam_model.net_3"),
    ("v.post_ln", "model.qwen2_model.model.model.norm"),
    ("v.resample_query_768", "model.qwen2_model.query_768"),
    ("v.resample_query_1024", "model.qwen2_model.query_1024"),
    ("mm.model.fc", "model.projector.layers"),
];

/// The checkpoint's name and source of mmproj tensor `g`.
fn hf_name(g: &str) -> Option<(String, Source)> {
    let src = Source::Tensor(g.to_string());
    match g {
        "v.sam.pos_embd.weight" => return Some(("model.sam_model.pos_embed".into(), src)),
        // Stored as [1, hidden]; the checkpoint's is [hidden].
        "v.view_seperator" => return Some(("model.view_seperator".into(), Source::Flat(g.into()))),
        _ => {}
    }
    let (stem, suffix) = g.rsplit_once('.')?;
    if !matches!(suffix, "weight" | "bias") {
        return None;
    }
    if let Some(&(_, hf)) = GLOBAL.iter().find(|(s, _)| *s == stem) {
        return Some((format!("{hf}.{suffix}"), src));
    }
    if let Some(rest) = stem.strip_prefix("v.sam.neck.") {
        let n: usize = rest.parse().ok()?;
        return Some((format!("model.sam_model.neck.{n}.{suffix}"), src));
    }
    if let Some(rest) = stem.strip_prefix("v.sam.blk.") {
        let (n, part) = rest.split_once('.')?;
        let n: usize = n.parse().ok()?;
        let block = format!("model.sam_model.blocks.{n}");
        return match (part, suffix) {
            ("attn.pos_h", "weight") => Some((format!("{block}.attn.rel_pos_h"), src)),
            ("attn.pos_w", "weight") => Some((format!("{block}.attn.rel_pos_w"), src)),
            _ => {
                let &(_, hf) = SAM_BLOCK.iter().find(|(s, _)| *s == part)?;
                Some((format!("{block}.{hf}.{suffix}"), src))
            }
        };
    }
    let rest = stem.strip_prefix("v.blk.")?;
    let (n, part) = rest.split_once('.')?;
    let n: usize = n.parse().ok()?;
    let &(_, hf) = ENCODER_BLOCK.iter().find(|(s, _)| *s == part)?;
    Some((
        format!("model.qwen2_model.model.model.layers.{n}.{hf}.{suffix}"),
        src,
    ))
}

/// Joins a `deepseek2-ocr` text model with its `deepseekocr2` mmproj.
pub(super) fn pair(
    text: GgufWeights,
    text_config: Value,
    mmproj: GgufFile,
) -> Result<VisionLanguage> {
    let tf = text.file();
    let tpath = tf.path().display().to_string();
    let tower = Tower::read(&mmproj)?;
    check_width(&tower.path, tower.projection_dim, &text_config, &tpath)?;
    let image_token_id = tf
        .meta("tokenizer.ggml.tokens")
        .and_then(MetaValue::as_array)
        .and_then(|t| t.iter().position(|v| v.as_str() == Some("<image>")))
        .ok_or_else(|| {
            ConvertError::Unsupported(format!(
                "{tpath}: its vocabulary has no `<image>` token, which stands for an image's rows in a DeepSeek-OCR 2 prompt"
            ))
        })?;
    let mut t = match text_config {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    t.remove("architectures");
    t.insert("model_type".into(), json!("deepseek_ocr2_text"));
    let config = json!({
        "architectures": ["DeepseekOcr2ForConditionalGeneration"],
        "model_type": "deepseek_ocr2",
        "image_token_id": image_token_id,
        "tie_word_embeddings": t.get("tie_word_embeddings").cloned().unwrap_or(json!(false)),
        "text_config": Value::Object(t),
        "vision_config": tower.vision_config(),
    });
    let preprocessor_config = tower.preprocessor_config();
    let path = mmproj.path().display().to_string();
    let mut map = BTreeMap::new();
    for info in mmproj.tensor_infos() {
        let (hf, src) = hf_name(&info.name).ok_or_else(|| {
            ConvertError::Unsupported(format!(
                "{path}: tensor `{}` has no place in DeepSeek-OCR 2's vision tower",
                info.name
            ))
        })?;
        map.insert(hf, src);
    }
    let vision = MmprojWeights::from_map(GgufWeights::new(mmproj)?, map);
    Ok(VisionLanguage {
        config,
        preprocessor_config,
        weights: VisionLanguageWeights::with_text_prefix(text, vision, None),
    })
}

/// What the mmproj says about the tower.
struct Tower {
    path: String,
    projection_dim: u64,
    sam: Value,
    encoder: Value,
    /// Global view and tile sides, SAM's patch.
    global: u64,
    tile: u64,
    patch: u64,
    mean: Value,
    std: Value,
    tiles: (u64, u64),
}

impl Tower {
    fn read(g: &GgufFile) -> Result<Tower> {
        let path = g.path().display().to_string();
        let corrupt = |m: String| ConvertError::Corrupt(format!("{path}: {m}"));
        let u = |key: &str, default: Option<u64>| clip_count(g, key, default, &corrupt);
        // PyTorch-order shape of a tensor the tower cannot do without.
        let shape = |name: &str, rank: usize| -> Result<Vec<u64>> {
            let t = g
                .tensor_info(name)
                .ok_or_else(|| corrupt(format!("no tensor {name}")))?;
            if t.shape.len() != rank || t.shape.contains(&0) {
                return Err(corrupt(format!(
                    "{name} is {:?}, expected {rank} nonzero dimensions",
                    t.shape
                )));
            }
            Ok(t.shape.iter().map(|&d| d as u64).collect())
        };
        let sam_hidden = u("sam.embedding_length", None)?;
        let sam_layers = u("sam.block_count", None)?;
        let sam_heads = u("sam.head_count", None)?;
        let hidden = u("embedding_length", None)?;
        let heads = u("attention.head_count", None)?;
        let kv_heads = u("attention.head_count_kv", None)?;
        if sam_hidden % sam_heads != 0 || hidden % heads != 0 || heads % kv_heads != 0 {
            return Err(corrupt(format!(
                "the heads do not divide the widths: SAM {sam_hidden} / {sam_heads}, encoder {hidden} / {heads} with {kv_heads} KV heads"
            )));
        }
        // [out, in, p, p]; the position table [1, grid, grid, C].
        let kernel = shape("v.sam.patch_embd.weight", 4)?;
        let pos = shape("v.sam.pos_embd.weight", 4)?;
        let (patch, grid) = (kernel[2], pos[1]);
        if kernel[0] != sam_hidden || kernel[3] != patch || pos[2] != grid || pos[3] != sam_hidden {
            return Err(corrupt(format!(
                "the patch kernel {kernel:?} and position table {pos:?} do not fit SAM's width {sam_hidden}"
            )));
        }
        let mlp = shape("v.sam.blk.0.mlp.lin1.weight", 2)?[0];
        let neck = shape("v.sam.neck.0.weight", 4)?[0];
        let net2 = shape("v.sam.net_2.weight", 4)?[0];
        let net3 = shape("v.sam.net_3.weight", 4)?[0];
        let global_queries = shape("v.resample_query_1024.weight", 2)?[0];
        let tile_queries = shape("v.resample_query_768.weight", 2)?[0];
        let side = grid / DOWNSAMPLE;
        if net3 != hidden || global_queries != side * side || tile_queries != TILE_QUERIES {
            return Err(corrupt(format!(
                "SAM's last convolution gives {net3} channels and a {side}x{side} grid, but the encoder is {hidden} wide with {global_queries} global and {tile_queries} tile queries (DeepSeek-OCR 2: the width, {} and {TILE_QUERIES})",
                side * side
            )));
        }
        let tile_side = (TILE_QUERIES as f64).sqrt() as u64;
        let global_attn: Vec<u64> = GLOBAL_ATTENTION
            .iter()
            .copied()
            .filter(|&l| l < sam_layers)
            .collect();
        let sam = json!({
            "hidden_size": sam_hidden,
            "num_hidden_layers": sam_layers,
            "num_attention_heads": sam_heads,
            "num_channels": kernel[1],
            "image_size": grid * patch,
            "patch_size": patch,
            "hidden_act": "gelu",
            "layer_norm_eps": SAM_EPS,
            "mlp_dim": mlp,
            "output_channels": neck,
            "window_size": u("window_size", Some(14))?,
            "global_attn_indexes": global_attn,
            "downsample_channels": [net2, net3],
        });
        let encoder = json!({
            "hidden_size": hidden,
            "intermediate_size": u("feed_forward_length", None)?,
            "num_hidden_layers": u("block_count", None)?,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "hidden_act": "silu",
            "rms_norm_eps": eps(g, &corrupt)?,
            "rope_parameters": {"rope_type": "default", "rope_theta": ENCODER_ROPE_THETA},
        });
        Ok(Tower {
            projection_dim: u("projection_dim", None)?,
            sam,
            encoder,
            global: grid * patch,
            tile: tile_side * DOWNSAMPLE * patch,
            patch,
            mean: clip_triple(g, "image_mean", &corrupt)?,
            std: clip_triple(g, "image_std", &corrupt)?,
            tiles: (
                g.meta("clip.vision.preproc_min_tiles")
                    .and_then(MetaValue::as_u64)
                    .unwrap_or(2),
                u("preproc_max_tiles", Some(6))?,
            ),
            path,
        })
    }

    fn vision_config(&self) -> Value {
        json!({
            "model_type": "deepseek_ocr2_vision",
            "sam_config": self.sam,
            "encoder_config": self.encoder,
        })
    }

    /// `DeepseekOcr2ImageProcessor`'s settings with the processor's patch
    /// and downsampling (what `processor_config.json` nests); the padding
    /// grey and bicubic resampling are the processor's and llama.cpp's.
    fn preprocessor_config(&self) -> Value {
        json!({
            "image_processor_type": "DeepseekOcr2ImageProcessor",
            "size": {"height": self.global, "width": self.global},
            "tile_size": self.tile,
            "min_patches": self.tiles.0,
            "max_patches": self.tiles.1,
            "crop_to_patches": true,
            "background_color": [127, 127, 127],
            "resample": 3,
            "image_mean": self.mean,
            "image_std": self.std,
            "patch_size": self.patch,
            "downsample_ratio": DOWNSAMPLE,
        })
    }
}

/// The encoder's RMSNorm eps (`clip.vision.attention.layer_norm_epsilon`,
/// which the converter writes from the config, default 1e-6), as the
/// shortest decimal of its f32.
fn eps(g: &GgufFile, corrupt: &dyn Fn(String) -> ConvertError) -> Result<f64> {
    let key = "clip.vision.attention.layer_norm_epsilon";
    match g.meta(key) {
        None => Ok(1e-6),
        Some(v) => v
            .as_f64()
            .filter(|e| e.is_finite() && *e > 0.0)
            .map(|e| format!("{}", e as f32).parse::<f64>().unwrap_or(e))
            .ok_or_else(|| corrupt(format!("{key} should be a positive number, found {v:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmproj_names_map_to_the_checkpoint() {
        for (g, h) in [
            ("v.sam.pos_embd.weight", Some("model.sam_model.pos_embed")),
            (
                "v.sam.patch_embd.bias",
                Some("model.sam_model.patch_embed.proj.bias"),
            ),
            (
                "v.sam.blk.11.attn.pos_h.weight",
                Some("model.sam_model.blocks.11.attn.rel_pos_h"),
            ),
            (
                "v.sam.blk.0.attn.out.weight",
                Some("model.sam_model.blocks.0.attn.proj.weight"),
            ),
            (
                "v.sam.blk.3.pre_ln.bias",
                Some("model.sam_model.blocks.3.norm1.bias"),
            ),
            ("v.sam.neck.3.weight", Some("model.sam_model.neck.3.weight")),
            ("v.sam.net_3.weight", Some("model.sam_model.net_3.weight")),
            (
                "v.blk.7.attn_k.bias",
                Some("model.qwen2_model.model.model.layers.7.self_attn.k_proj.bias"),
            ),
            (
                "v.blk.0.ffn_gate.weight",
                Some("model.qwen2_model.model.model.layers.0.mlp.gate_proj.weight"),
            ),
            (
                "v.post_ln.weight",
                Some("model.qwen2_model.model.model.norm.weight"),
            ),
            (
                "v.resample_query_768.weight",
                Some("model.qwen2_model.query_768.weight"),
            ),
            ("mm.model.fc.bias", Some("model.projector.layers.bias")),
            ("v.view_seperator", Some("model.view_seperator")),
            // Unknown roles, suffixes and Qwen3-VL's names.
            ("v.sam.blk.0.attn.pos_h.bias", None),
            ("v.sam.blk.x.pre_ln.weight", None),
            ("v.blk.0.ffn_up.scale", None),
            ("v.patch_embd.weight", None),
            ("mm.0.weight", None),
        ] {
            assert_eq!(hf_name(g).map(|(n, _)| n).as_deref(), h, "{g}");
        }
    }
}
