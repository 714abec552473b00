//! Image decoding and preprocessing: the input is an image file (PNG, JPEG,
//! WebP, or anything else) and optionally a preprocessor_config.json
//! (`PART`-separated; without one, or when it does not parse, Qwen3-VL's
//! defaults with a small pixel budget). Decodes the image, resizes it for
//! the model and cuts it into patches; then DeepSeek-OCR 2's views (global
//! view and tiles) from the same config when it has a `tile_size`, else
//! from small views of 64 and 48 pixels.

use mllm_converter::image_preprocess::{
    decode_bytes, preprocess_deepseek_ocr2, preprocess_images, resize_for_model,
    DeepseekOcr2PreprocessConfig, VisionPreprocessConfig,
};

/// One fuzz input.
pub fn run(data: &[u8]) {
    let p = super::parts(data, 2);
    let json = p
        .get(1)
        .and_then(|c| serde_json::from_slice::<serde_json::Value>(c).ok());
    let cfg = json
        .as_ref()
        .and_then(|j| VisionPreprocessConfig::from_json(j, "fuzz config").ok());
    let tiled = json
        .as_ref()
        .filter(|j| j.get("tile_size").is_some())
        .and_then(|j| DeepseekOcr2PreprocessConfig::from_json(j, Some(j), "fuzz config").ok())
        .unwrap_or_else(|| DeepseekOcr2PreprocessConfig {
            size: 64,
            tile_size: 48,
            ..Default::default()
        });
    let cfg = cfg.unwrap_or_else(|| {
        // A small budget keeps each run fast; sizes are still any the
        // decoder accepts.
        let mut c = VisionPreprocessConfig::qwen3_vl();
        c.min_pixels = c.factor() * c.factor();
        c.max_pixels = 64 * c.factor() * c.factor();
        c
    });
    let Ok(img) = decode_bytes(p[0], "fuzz image") else {
        return;
    };
    if resize_for_model(&img, &cfg).is_ok() {
        let _ = preprocess_images(std::slice::from_ref(&img), &cfg);
    }
    let _ = preprocess_deepseek_ocr2(std::slice::from_ref(&img), &tiled);
}
