//! What the runtime does differently per model family, keyed by the
//! config's `model_type`: today, which image processor prepares a prompt's
//! images. (The script is found by the module names scripts declare,
//! assets.rs; a GGUF file's family by the converter's registry,
//! converter/src/gguf/family/.) A family that brings a new processor adds
//! its module (as tiled_images.rs is DeepSeek-OCR 2's) and its rows here.

use serde_json::Value as Json;

/// How a family's images become model inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageProcessor {
    /// Qwen-VL: patches with a (t, h, w) grid per image or video, one
    /// placeholder per merged patch, multimodal rotary positions
    /// (interpreter/src/mrope.rs). images.rs.
    Patches,
    /// DeepSeek-OCR 2: a global view and local tiles per image, plain 1-D
    /// positions. tiled_images.rs.
    Tiles,
}

/// `model_type` -> processor, for the families that take images.
const IMAGE_PROCESSORS: &[(&str, ImageProcessor)] = &[
    ("qwen3_vl", ImageProcessor::Patches),
    ("qwen3_vl_moe", ImageProcessor::Patches),
    ("qwen3_5", ImageProcessor::Patches),
    ("qwen3_5_moe", ImageProcessor::Patches),
    ("deepseek_ocr2", ImageProcessor::Tiles),
];

/// The image processor of the model in `config`: its family's, else
/// Qwen-VL's patches (what a config with an `image_token_id` and a
/// `vision_config` of that shape means for a family not listed).
pub fn image_processor(config: &Json) -> ImageProcessor {
    let model_type = config.get("model_type").and_then(Json::as_str);
    IMAGE_PROCESSORS
        .iter()
        .find(|(t, _)| Some(*t) == model_type)
        .map_or(ImageProcessor::Patches, |&(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_has_its_processor() {
        let of = |t: &str| image_processor(&serde_json::json!({ "model_type": t }));
        assert_eq!(of("deepseek_ocr2"), ImageProcessor::Tiles);
        assert_eq!(of("qwen3_vl_moe"), ImageProcessor::Patches);
        assert_eq!(of("deepseek_ocr2_text"), ImageProcessor::Patches);
        assert_eq!(
            image_processor(&serde_json::json!({})),
            ImageProcessor::Patches
        );
    }

    /// Every listed model_type is one a built-in script is chosen for.
    #[test]
    fn listed_families_have_scripts() {
        for (t, _) in IMAGE_PROCESSORS {
            let config = serde_json::json!({ "model_type": t });
            assert!(crate::assets::script_for_config(&config).is_ok(), "{t}");
        }
    }
}
