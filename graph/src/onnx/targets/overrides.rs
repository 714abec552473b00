//! `quant_overrides.json` for `qnn-onnx-converter --quantization_overrides`:
//! the encodings of every quantized checkpoint weight, taken from the
//! weight itself, so the converter re-quantizes the float initializers of
//! `model.onnx` (which hold exactly `code * scale`, what our kernels
//! compute) back to the same codes with the same scales.
//!
//! The file uses the converter's encodings format version 1.0.0 (the one
//! AIMET exports and the QAIRT converters read): `param_encodings` is a list
//! of `{name, dtype: "INT", enc_type, bw, is_sym, scale: [..], offset:
//! [..], block_size?}`, offsets in QNN's convention (`real = scale * (q +
//! offset)` over unsigned `q`, so `-2^(bw-1)` for symmetric codes):
//! - `w8a8`: `PER_CHANNEL`, 8 bits, one scale per output channel;
//! - `q8_0`: `PER_BLOCK`, 8 bits, a scale per 32 inputs of each channel;
//! - `w4a16_gG`, `q4_0`: `PER_BLOCK`, 4 bits, a scale per G (32) inputs.
//!
//! Scales are listed channel-major (`[out][block]`), the order of the
//! checkpoint's blocks. Per-block scales are kept exactly; the LPBQ form
//! (a 4-bit integer per block times a float per channel, what HTP runs
//! natively on v73+) would have to round our f16 block scales to that grid,
//! so it is not written: a converter that takes only LPBQ or per-channel
//! encodings would change the weights, and this file says so by not
//! pretending otherwise. `activation_encodings` is empty: the converter
//! calibrates activations from `--input_list` (our w8a8 kernels round
//! activations per token at run time, which no static encoding expresses).

use mllm_backends::weights::WeightSource;
use serde_json::{json, Value};

use super::super::quant::{layout, part_bytes, Part};
use crate::Result;

/// How one override's scales lie over its initializer, for a checker that
/// re-applies them (the format itself names no axis: the converter takes
/// the output channel from the op).
pub struct Layout {
    pub name: String,
    pub channel_axis: usize,
    pub block_axis: usize,
    pub block_size: Option<usize>,
}

/// The overrides document and the layout of each entry; None when no
/// planned initializer comes from a quantized weight.
pub fn build(
    src: &dyn WeightSource,
    params: &[(String, bool, String)],
) -> Result<Option<(Value, Vec<Layout>)>> {
    let mut entries = vec![];
    let mut layouts = vec![];
    for (ckpt, transposed, onnx) in params {
        let Some(info) = src.info(ckpt) else { continue };
        let Some(q) = info.dtype.quant() else {
            continue;
        };
        let Some(l) = layout(q) else {
            return Err(crate::GraphError(format!(
                "--target qnn: parameter `{ckpt}` is {}, which has no per-channel or per-block encoding (kept: w8a8, w4a16, q8_0, q4_0)",
                info.dtype
            )));
        };
        if info.shape.len() != 2 {
            continue;
        }
        let n = info.shape[0];
        let raw = part_bytes(src, ckpt, Part::Scales)?;
        let scales: Vec<f32> = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let bw: u32 = if l.four_bit { 4 } else { 8 };
        let offset = -(1i64 << (bw - 1));
        let mut e = json!({
            "name": onnx,
            "dtype": "INT",
            "enc_type": if l.block.is_some() { "PER_BLOCK" } else { "PER_CHANNEL" },
            "bw": bw,
            "is_sym": true,
            "scale": scales,
            "offset": vec![offset; scales.len()],
        });
        if let Some(g) = l.block {
            e["block_size"] = json!(g);
        }
        debug_assert_eq!(scales.len() % n.max(1), 0);
        entries.push(e);
        // `NAME.T` is `[in, out]`: channels on axis 1, blocks on axis 0.
        let (channel_axis, block_axis) = if *transposed { (1, 0) } else { (0, 1) };
        layouts.push(Layout {
            name: onnx.clone(),
            channel_axis,
            block_axis,
            block_size: l.block,
        });
    }
    if entries.is_empty() {
        return Ok(None);
    }
    let doc = json!({
        "version": "1.0.0",
        "activation_encodings": [],
        "param_encodings": entries,
    });
    Ok(Some((doc, layouts)))
}
