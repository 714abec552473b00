//! Image decoding and Qwen-VL preprocessing: the input is an image file
//! (PNG, JPEG, WebP, or anything else) and optionally a
//! preprocessor_config.json (`PART`-separated; without one, or when it does
//! not parse, Qwen3-VL's defaults with a small pixel budget). Decodes the
//! image, resizes it for the model and cuts it into patches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mllm_converter::image_preprocess::{
    decode_bytes, preprocess_images, resize_for_model, VisionPreprocessConfig,
};

fuzz_target!(|data: &[u8]| {
    let p = mllm_fuzz::parts(data, 2);
    let cfg = p
        .get(1)
        .and_then(|c| serde_json::from_slice::<serde_json::Value>(c).ok())
        .and_then(|j| VisionPreprocessConfig::from_json(&j, "fuzz config").ok());
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
});
