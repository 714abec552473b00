//! Qwen-VL image preprocessing against transformers' Qwen2VLImageProcessor
//! (torchvision backend) on the images in tests/fixtures/vision (made by
//! make_vision_fixtures.py), smart_resize against a table from the Python
//! function, and clear errors on bad files.

use std::path::{Path, PathBuf};

use mllm_converter::image_preprocess::{
    decode_bytes, preprocess_files, smart_resize, VisionPreprocessConfig,
};
use mllm_converter::ConvertError;
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vision")
}

fn cases() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(fixtures().join("cases.json")).expect("cases.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("cases.json is JSON");
    v["cases"].as_object().expect("cases").clone()
}

/// The reference of one case: HF's pixel_values rebuilt from the stored u8
/// levels (the fixture script asserted this is bit-exact) and the grid.
struct Reference {
    pixel_values: Vec<f32>,
    shape: Vec<usize>,
    grid: Vec<i64>,
}

fn reference(case: &str) -> Reference {
    let bytes = std::fs::read(fixtures().join("reference.safetensors")).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let levels = st.tensor(&format!("{case}.levels")).expect("levels");
    assert_eq!(levels.dtype(), safetensors::Dtype::U8);
    let grid = st.tensor(&format!("{case}.image_grid_thw")).expect("grid");
    assert_eq!(grid.dtype(), safetensors::Dtype::I64);
    Reference {
        pixel_values: levels
            .data()
            .iter()
            .map(|&l| (l as f32 - 127.5) / 127.5)
            .collect(),
        shape: levels.shape().to_vec(),
        grid: grid
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
    }
}

/// Allowed max-abs difference per case, in uint8 levels (one level is
/// 1/127.5 after normalization). PNG and lossless WebP decode to the same
/// pixels everywhere, and the resize and normalization are exact, so they
/// must match bit for bit. Lossy formats go through a different decoder than
/// torchvision's (libjpeg-turbo, libwebp); their bound is the measured
/// decoder difference plus margin.
///
/// Measured (transformers 5.24, torchvision 0.29.2, image 0.25.10): PNG and
/// WebP, lossy included, identical; JPEG at most 3 levels apart, on 17-29%
/// of the values, all of it from zune-jpeg vs libjpeg-turbo decoding (the
/// resize and normalization are exact, as the PNG cases show).
fn tolerance_levels(image: &str) -> f32 {
    if image.ends_with(".jpg") {
        4.0
    } else {
        0.0
    }
}

#[test]
fn parity_with_transformers_on_every_fixture() {
    let cases = cases();
    assert!(
        cases.len() >= 10,
        "expected the fixture cases, got {}",
        cases.len()
    );
    let mut report = Vec::new();
    for (case, meta) in &cases {
        let image = meta["image"].as_str().expect("image");
        let model = fixtures().join(meta["model"].as_str().expect("model"));
        let cfg = VisionPreprocessConfig::from_model_dir(&model).expect("config");
        let r = reference(case);
        let got = preprocess_files(&[fixtures().join(image)], &cfg)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let grid: Vec<i64> = got.grid_thw[0].iter().map(|&g| g as i64).collect();
        assert_eq!(grid, r.grid, "{case}: image_grid_thw");
        assert_eq!(got.shape().to_vec(), r.shape, "{case}: pixel_values shape");
        let (mut max_abs, mut sum_abs, mut differing) = (0f32, 0f64, 0usize);
        for (a, b) in got.pixel_values.iter().zip(&r.pixel_values) {
            let d = (a - b).abs();
            if d != 0.0 {
                differing += 1;
            }
            max_abs = max_abs.max(d);
            sum_abs += f64::from(d);
        }
        let frac = differing as f64 / r.pixel_values.len() as f64;
        let mean_levels = sum_abs / r.pixel_values.len() as f64 * 127.5;
        let tol = tolerance_levels(image) / 127.5 + 1e-6;
        report.push(format!(
            "{case:24} {image:28} grid {:?} max_abs {max_abs:.6} ({:.0} levels) \
             mean_abs {mean_levels:.3} levels, differing {:.2}%",
            got.grid_thw[0],
            max_abs * 127.5,
            100.0 * frac
        ));
        assert!(
            max_abs <= tol,
            "{case}: max-abs {max_abs} above {tol} ({differing} values differ)"
        );
        // Decoder rounding differences, not a shifted image: small on average.
        assert!(
            mean_levels <= 0.5,
            "{case}: mean difference {mean_levels} levels"
        );
    }
    println!("{}", report.join("\n"));
}

#[test]
fn several_images_concatenate_in_order() {
    let cfg = VisionPreprocessConfig::from_model_dir(&fixtures().join("small")).expect("config");
    let a = fixtures().join("images/coffee.jpg");
    let b = fixtures().join("images/tiny_5x3.png");
    let both = preprocess_files(&[&a, &b], &cfg).expect("both");
    let (sa, sb) = (
        preprocess_files(&[&a], &cfg).expect("a"),
        preprocess_files(&[&b], &cfg).expect("b"),
    );
    assert_eq!(both.grid_thw, vec![sa.grid_thw[0], sb.grid_thw[0]]);
    assert_eq!(both.num_patches, sa.num_patches + sb.num_patches);
    assert_eq!(
        both.pixel_values,
        [sa.pixel_values, sb.pixel_values].concat()
    );
}

#[test]
fn configs_read_like_transformers() {
    let published = VisionPreprocessConfig::from_model_dir(&fixtures().join("default")).unwrap();
    assert_eq!(published, VisionPreprocessConfig::qwen3_vl());
    let dir = tempfile::tempdir().unwrap();
    // Top-level min/max_pixels override `size`; missing keys take the class
    // defaults (CLIP mean/std, patch 14).
    std::fs::write(
        dir.path().join("preprocessor_config.json"),
        r#"{"size": {"shortest_edge": 100, "longest_edge": 200}, "max_pixels": 5000}"#,
    )
    .unwrap();
    let c = VisionPreprocessConfig::from_model_dir(dir.path()).unwrap();
    assert_eq!((c.min_pixels, c.max_pixels, c.patch_size), (100, 5000, 14));
    assert_eq!(c.image_mean[0], 0.48145466_f64 as f32);
    // Without a preprocessor config: config.json's vision_config.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}"#,
    )
    .unwrap();
    let c = VisionPreprocessConfig::from_model_dir(dir.path()).unwrap();
    assert_eq!((c.patch_size, c.factor(), c.min_pixels), (14, 28, 65536));
    // Neither: a clear error. A bad value: named.
    let empty = tempfile::tempdir().unwrap();
    let e = VisionPreprocessConfig::from_model_dir(empty.path()).unwrap_err();
    assert!(e.to_string().contains("preprocessor_config.json"), "{e}");
    std::fs::write(
        empty.path().join("preprocessor_config.json"),
        r#"{"patch_size": -3}"#,
    )
    .unwrap();
    let e = VisionPreprocessConfig::from_model_dir(empty.path()).unwrap_err();
    assert!(e.to_string().contains("patch_size"), "{e}");
    std::fs::write(
        empty.path().join("preprocessor_config.json"),
        r#"{"resample": 2}"#,
    )
    .unwrap();
    let e = VisionPreprocessConfig::from_model_dir(empty.path()).unwrap_err();
    assert!(matches!(e, ConvertError::Unsupported(_)), "{e}");
}

// ---- bad inputs: clear errors, no panics ----

fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
    out
}

/// A PNG header (signature + IHDR, 8-bit RGB) claiming the given size.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(png_chunk(b"IHDR", &ihdr));
    out
}

fn decode_err(bytes: &[u8]) -> ConvertError {
    match decode_bytes(bytes, "test.img") {
        Ok(img) => panic!("decoded {}x{} from bad bytes", img.width, img.height),
        Err(e) => {
            assert!(e.to_string().starts_with("test.img: "), "{e}");
            e
        }
    }
}

#[test]
fn corrupt_truncated_and_foreign_files_are_refused() {
    let png = std::fs::read(fixtures().join("images/astronaut.png")).unwrap();
    // Truncated in the middle of the image data.
    let e = decode_err(&png[..png.len() / 2]);
    assert!(matches!(e, ConvertError::Corrupt(_)), "{e}");
    // The right signature, then garbage.
    let mut garbage = png[..8].to_vec();
    garbage.extend((0..500u32).map(|i| (i * 7919 % 251) as u8));
    decode_err(&garbage);
    // Bit flips inside the compressed data (the CRC no longer matches).
    let mut flipped = png.clone();
    for i in (100..flipped.len()).step_by(97) {
        flipped[i] ^= 0x55;
    }
    decode_err(&flipped);
    // A JPEG cut short.
    let jpg = std::fs::read(fixtures().join("images/coffee.jpg")).unwrap();
    decode_err(&jpg[..jpg.len() / 3]);
    // Not an image at all, an empty file, a format we do not take.
    let e = decode_err(b"{\"this is\": \"json, not an image\"}");
    assert!(e.to_string().contains("PNG, JPEG or WebP"), "{e}");
    decode_err(b"");
    let e = decode_err(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;");
    assert!(e.to_string().contains("PNG, JPEG or WebP"), "{e}");
}

#[test]
fn empty_and_absurd_sizes_are_refused() {
    // A 0x0 and a 0x5 PNG.
    for (w, h) in [(0, 0), (0, 5)] {
        let mut bytes = png_header(w, h);
        bytes.extend(png_chunk(b"IEND", &[]));
        decode_err(&bytes);
    }
    // 100000 x 100000 claimed in the header: refused before allocating.
    let mut bytes = png_header(100_000, 100_000);
    bytes.extend(png_chunk(b"IEND", &[]));
    let e = decode_err(&bytes);
    assert!(e.to_string().contains("too large"), "{e}");
    // A real but 1 x 300 image: aspect ratio above 200, refused by the resize.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strip.png");
    write_gray_png(&path, 300, 1);
    let cfg = VisionPreprocessConfig::qwen3_vl();
    let e = preprocess_files(&[&path], &cfg).unwrap_err();
    assert!(e.to_string().contains("aspect ratio"), "{e}");
    // A missing file names the path.
    let e = preprocess_files(&[dir.path().join("nope.png")], &cfg).unwrap_err();
    assert!(e.to_string().contains("nope.png"), "{e}");
}

/// An uncompressed-deflate (stored) 8-bit gray PNG of zeros.
fn write_gray_png(path: &Path, width: u32, height: u32) {
    let mut bytes = png_header(width, height);
    // Color type 0 (gray) instead of 2 (RGB): patch IHDR and its CRC.
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]);
    bytes.truncate(8);
    bytes.extend(png_chunk(b"IHDR", &ihdr));
    // Each row: filter byte 0 (none), then `width` zero pixels.
    let raw = vec![0u8; (width as usize + 1) * height as usize];
    // zlib stream with one stored block (raw is < 65536 bytes here).
    let mut z = vec![0x78, 0x01, 0x01];
    z.extend_from_slice(&(raw.len() as u16).to_le_bytes());
    z.extend_from_slice(&(!(raw.len() as u16)).to_le_bytes());
    z.extend_from_slice(&raw);
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + x as u32) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    bytes.extend(png_chunk(b"IDAT", &z));
    bytes.extend(png_chunk(b"IEND", &[]));
    std::fs::write(path, bytes).unwrap();
}

// ---- smart_resize ----

#[test]
fn smart_resize_equals_transformers_on_the_table() {
    let text = std::fs::read_to_string(fixtures().join("smart_resize_table.json")).unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert!(rows.len() >= 400);
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap() as usize;
    let mut refused = 0;
    for r in &rows {
        let (h, w) = (n(r, "h"), n(r, "w"));
        let got = smart_resize(h, w, n(r, "factor"), n(r, "min_pixels"), n(r, "max_pixels"));
        match r["out"].as_array() {
            Some(o) => {
                let want = (
                    o[0].as_u64().unwrap() as usize,
                    o[1].as_u64().unwrap() as usize,
                );
                assert_eq!(got.ok(), Some(want), "{r}");
            }
            None => {
                refused += 1;
                assert!(got.is_err(), "{r}: HF refused, we gave {got:?}");
            }
        }
    }
    assert!(refused > 0 && refused < rows.len() / 2, "{refused} refused");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn smart_resize_invariants(
        h in 1usize..20000,
        w in 1usize..20000,
        (factor, min_pixels, max_pixels) in prop_oneof![
            Just((32usize, 65536usize, 16777216usize)),
            Just((32, 4096, 12288)),
            Just((28, 3136, 1003520)),
            (1usize..64, 1usize..5000, 5000usize..2_000_000),
        ],
    ) {
        let ratio = h.max(w) as f64 / h.min(w) as f64;
        let r = smart_resize(h, w, factor, min_pixels, max_pixels);
        if ratio > 200.0 {
            prop_assert!(r.is_err());
            return Ok(());
        }
        let (rh, rw) = r.unwrap();
        prop_assert!(rh % factor == 0 && rw % factor == 0 && rh >= factor && rw >= factor);
        let pixels = rh * rw;
        // Above max only when a side is pinned at factor.
        prop_assert!(pixels <= max_pixels || rh == factor || rw == factor, "{rh}x{rw}");
        // Below min only after shrinking from above max.
        let rounded = |x: usize| (x as f64 / factor as f64).round_ties_even() as usize * factor;
        if rounded(h) * rounded(w) <= max_pixels {
            prop_assert!(pixels >= min_pixels, "{rh}x{rw} < {min_pixels}");
        }
        // Aspect ratio: each side is the scaled side moved by less than one
        // factor, so the log aspect moves by at most 2f/(h'-f) + 2f/(w'-f).
        if rh >= 3 * factor && rw >= 3 * factor {
            let f = factor as f64;
            let bound = 2.0 * f / (rh as f64 - f) + 2.0 * f / (rw as f64 - f);
            let moved = ((rh as f64 / rw as f64).ln() - (h as f64 / w as f64).ln()).abs();
            prop_assert!(moved <= bound, "{h}x{w} -> {rh}x{rw}: {moved} > {bound}");
        }
    }

    #[test]
    fn mutated_real_files_never_panic(
        file in prop::sample::select(vec![
            "tiny_5x3.png", "rocket_exif6.jpg", "chelsea.webp", "lossless_61x45.webp",
        ]),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = std::fs::read(fixtures().join("images").join(file)).unwrap();
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        // Either an image or an error; a panic fails the test.
        if let Ok(img) = decode_bytes(&bytes, "fuzz") {
            prop_assert_eq!(img.data.len(), img.height * img.width * 3);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode_bytes(&bytes, "fuzz");
        let signatures: [&[u8]; 3] = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"RIFF\x00\x01\x00\x00WEBPVP8 "];
        for sig in signatures {
            let data = [sig, &bytes[..]].concat();
            let _ = decode_bytes(&data, "fuzz");
        }
    }
}
