//! Image files to 8-bit RGB, the way transformers' torchvision backend reads
//! an image given as a path: `torchvision.io.decode_image(mode=RGB,
//! apply_exif_orientation=True)`. That means: gray is replicated to three
//! channels, an alpha channel is dropped (not composited), and the EXIF
//! orientation of PNG and JPEG files is applied (torchvision ignores it in
//! WebP files, so we do too).

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};

use crate::error::{ConvertError, Result};

/// Sides beyond this are refused before decoding (JPEG's own limit is 65535;
/// the resize budget of Qwen3-VL tops out at 4096x4096).
pub const MAX_SIDE: u32 = 32768;
/// Pixels an image may have, checked against the header before any pixel
/// is decoded (a PNG of a few KB can claim 100k x 100k): PIL's
/// decompression-bomb limit, 2 x 89478485, ten 50-megapixel photos' worth.
/// `MLLM_MAX_IMAGE_PIXELS` changes it.
pub const DEFAULT_MAX_PIXELS: u64 = 178_956_970;
/// Decoder memory per pixel allowed (16-bit RGBA is 8 bytes).
const ALLOC_PER_PIXEL: u64 = 8;

/// The pixel limit in force: `MLLM_MAX_IMAGE_PIXELS`, else the default.
pub fn max_pixels() -> Result<u64> {
    mllm_backends::env_limit::read_or("MLLM_MAX_IMAGE_PIXELS", DEFAULT_MAX_PIXELS)
        .map_err(ConvertError::Unsupported)
}

/// An 8-bit RGB image, rows top to bottom, pixels interleaved.
#[derive(Clone, Debug, PartialEq)]
pub struct RgbImage {
    pub height: usize,
    pub width: usize,
    pub data: Vec<u8>,
}

/// Reads and decodes a PNG, JPEG or WebP file.
pub fn decode_file(path: &Path) -> Result<RgbImage> {
    // No image within the pixel limit is larger than its raw pixels (plus
    // metadata), so a bigger file is refused before it is read.
    let len = std::fs::metadata(path)
        .map_err(|e| ConvertError::io(path, e))?
        .len();
    let most = max_pixels()?.saturating_mul(ALLOC_PER_PIXEL) + (16 << 20);
    if len > most {
        return Err(ConvertError::Unsupported(format!(
            "{}: a {len}-byte file is larger than any image within the pixel limit could be ({most} bytes); \
             MLLM_MAX_IMAGE_PIXELS raises the limit",
            path.display()
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| ConvertError::io(path, e))?;
    decode_bytes(&bytes, &path.display().to_string())
}

/// Decodes PNG, JPEG or WebP bytes; `what` names the source in errors.
pub fn decode_bytes(bytes: &[u8], what: &str) -> Result<RgbImage> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| ConvertError::Corrupt(format!("{what}: {e}")))?;
    let format = match reader.format() {
        Some(f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP)) => f,
        Some(other) => {
            return Err(ConvertError::Unsupported(format!(
                "{what}: {other:?} images are not supported; use PNG, JPEG or WebP"
            )))
        }
        None => {
            return Err(ConvertError::Unsupported(format!(
                "{what}: not a PNG, JPEG or WebP image (unrecognized file signature)"
            )))
        }
    };
    if format == ImageFormat::Jpeg {
        // The JPEG decoder fills a file cut short with gray instead of
        // failing; a photo half missing must not pass silently.
        check_jpeg_complete(bytes).map_err(|e| ConvertError::Corrupt(format!("{what}: {e}")))?;
    }
    let max_pixels = max_pixels()?;
    let mut reader = reader;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(max_pixels.saturating_mul(ALLOC_PER_PIXEL));
    reader.limits(limits);
    let bad = |e: image::ImageError| {
        match e {
        image::ImageError::Limits(l) => ConvertError::Unsupported(format!(
            "{what}: image too large to decode, refused ({l}; sides up to {MAX_SIDE} pixels and {max_pixels} pixels in all are accepted)"
        )),
        image::ImageError::Unsupported(u) => ConvertError::Unsupported(format!("{what}: {u}")),
        other => ConvertError::Corrupt(format!("{what}: cannot decode {format:?} image: {other}")),
    }
    };
    let mut decoder = reader.into_decoder().map_err(bad)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        return Err(ConvertError::Corrupt(format!(
            "{what}: image has no pixels ({w}x{h})"
        )));
    }
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max_pixels {
        return Err(ConvertError::Unsupported(format!(
            "{what}: the image claims {w}x{h} = {pixels} pixels, over the limit of {max_pixels}; \
             refused before decoding (a decompression bomb, or a huge photo: the model sees at most \
             a few megapixels, so shrink it first; MLLM_MAX_IMAGE_PIXELS raises the limit)"
        )));
    }
    let orientation = decoder.orientation().map_err(bad)?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(bad)?;
    if format != ImageFormat::WebP {
        img.apply_orientation(orientation);
    }
    // to_rgb8 replicates gray and drops alpha, as decode_image(mode=RGB);
    // 16-bit PNGs are scaled to 8 bits (torchvision would hand transformers
    // uint16 values there, which the processor does not expect).
    let rgb = img.to_rgb8();
    Ok(RgbImage {
        height: rgb.height() as usize,
        width: rgb.width() as usize,
        data: rgb.into_raw(),
    })
}

/// Walks a JPEG's marker segments and entropy-coded scans to its end-of-image
/// marker; errors when the data stops first. Inside scan data 0xFF is always
/// followed by a stuffed 0x00 or a restart marker, so the next other marker
/// ends the scan (and an embedded EXIF thumbnail is skipped with its segment).
fn check_jpeg_complete(bytes: &[u8]) -> std::result::Result<(), String> {
    const SOI: u8 = 0xD8;
    const EOI: u8 = 0xD9;
    const SOS: u8 = 0xDA;
    if bytes.len() < 4 || bytes[0] != 0xFF || bytes[1] != SOI {
        return Err("not a JPEG file (no start-of-image marker)".into());
    }
    let truncated =
        || "JPEG data ends before the end-of-image marker (file truncated?)".to_string();
    let mut i = 2;
    loop {
        // Markers may be preceded by any number of 0xFF fill bytes.
        while i < bytes.len() && bytes[i] == 0xFF && bytes.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if i + 1 >= bytes.len() {
            return Err(truncated());
        }
        if bytes[i] != 0xFF {
            return Err(format!("JPEG marker expected at byte {i}"));
        }
        let marker = bytes[i + 1];
        i += 2;
        match marker {
            EOI => return Ok(()),
            // Standalone markers without a length.
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        if i + 1 >= bytes.len() {
            return Err(truncated());
        }
        let len = usize::from(u16::from_be_bytes([bytes[i], bytes[i + 1]]));
        if len < 2 {
            return Err(format!("JPEG segment with length {len} at byte {i}"));
        }
        i += len;
        if i > bytes.len() {
            return Err(truncated());
        }
        if marker == SOS {
            // Skip the entropy-coded data up to the next real marker.
            loop {
                match bytes.get(i..i + 2) {
                    None => return Err(truncated()),
                    Some([0xFF, b]) if *b != 0x00 && !(0xD0..=0xD7).contains(b) && *b != 0xFF => {
                        break
                    }
                    _ => i += 1,
                }
            }
        }
    }
}
