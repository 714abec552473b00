//! `--quant keep`: quantized checkpoint weights stay quantized, each behind
//! a DequantizeLinear (QDQ), with exactly the codes and scales our CPU
//! kernels read:
//! - `w8a8`: int8 codes with one scale per output channel (per-axis DQ,
//!   opset 13), and the activations feeding such a linear quantized to
//!   int8 per token as the CPU does (QuantizeLinear + DequantizeLinear
//!   with a per-row scale `max|x| / 127`);
//! - `q8_0`: int8 codes, an f16 scale per 32 (blocked DQ, opset 21);
//! - `w4a16` and `q4_0`: 4-bit codes `q - 8` as int4, an f16 scale per
//!   group (blocked DQ, opset 21); activations stay f32.
//!
//! Linear weights are stored `[in, out]` (blocks along axis 0); embedding
//! tables `[rows, in]` as int8, gathered before they are dequantized (one
//! step never dequantizes the whole table). Other types (q4_1's offsets,
//! the K-quants' nested scales) have no DequantizeLinear form: the export
//! says so and `--quant dequantize` takes them.

use mllm_backends::quant::QuantType;
use mllm_backends::weights::WeightSource;
use mllm_backends::DType;

use super::builder::Builder;
use super::proto::{attr_int, DataType};
use super::weights::{Source, Weights};
use crate::{GraphError, Result};

/// The opset blocked DequantizeLinear needs.
pub const BLOCKED_OPSET: i64 = 21;

/// How one quantized type maps onto DequantizeLinear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Values per scale along the input dimension; None: one per row.
    pub block: Option<usize>,
    /// Codes fit in 4 bits (stored as int4 for MatMul).
    pub four_bit: bool,
}

/// The DequantizeLinear form of `q`, if it has one.
pub fn layout(q: QuantType) -> Option<Layout> {
    match q {
        QuantType::W8A8 { .. } => Some(Layout {
            block: None,
            four_bit: false,
        }),
        QuantType::Q8_0 => Some(Layout {
            block: Some(32),
            four_bit: false,
        }),
        QuantType::Q4_0 => Some(Layout {
            block: Some(32),
            four_bit: true,
        }),
        QuantType::W4A16 { group } => Some(Layout {
            block: Some(group as usize),
            four_bit: true,
        }),
        _ => None,
    }
}

/// The opset a keep export of these checkpoint dtypes needs (17 unless a
/// blocked type is kept).
pub fn opset_for(dtypes: impl Iterator<Item = DType>) -> i64 {
    let blocked = dtypes
        .filter_map(|d| d.quant())
        .any(|q| layout(q).is_some_and(|l| l.block.is_some()));
    if blocked {
        BLOCKED_OPSET
    } else {
        super::proto::OPSET
    }
}

/// A weight's codes (`[n, k]` row-major) and scales (`[n, k / block]`).
struct Decoded {
    codes: Vec<i8>,
    scales: Vec<f32>,
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Splits quantized rows into codes and scales, as the CPU reads them.
fn decode(q: QuantType, bytes: &[u8], n: usize, k: usize) -> std::result::Result<Decoded, String> {
    let mut codes = Vec::with_capacity(n * k);
    let mut scales = vec![];
    match q {
        QuantType::W8A8 { .. } => {
            for row in bytes.chunks_exact(4 + k).take(n) {
                scales.push(f32::from_le_bytes([row[0], row[1], row[2], row[3]]));
                codes.extend(row[4..].iter().map(|&c| c as i8));
            }
        }
        QuantType::Q8_0 => {
            for b in bytes.chunks_exact(34) {
                scales.push(f16_at(b, 0));
                codes.extend(b[2..].iter().map(|&c| c as i8));
            }
        }
        QuantType::Q4_0 | QuantType::W4A16 { .. } => {
            let g = if let QuantType::W4A16 { group } = q {
                group as usize
            } else {
                32
            };
            for b in bytes.chunks_exact(2 + g / 2) {
                scales.push(f16_at(b, 0));
                let nib = &b[2..];
                codes.extend(nib.iter().map(|&c| (c & 0x0F) as i8 - 8));
                codes.extend(nib.iter().map(|&c| (c >> 4) as i8 - 8));
            }
        }
        other => return Err(format!("{other:?} has no DequantizeLinear form")),
    }
    if codes.len() != n * k {
        return Err(format!("{} codes for a [{n}, {k}] weight", codes.len()));
    }
    Ok(Decoded { codes, scales })
}

/// Which array of a kept weight an initializer holds.
#[derive(Clone, Copy, Debug)]
pub enum Part {
    /// Codes `[n, k]` as int8 (embedding tables).
    Codes,
    /// Codes `[k, n]`, int4 when `four_bit` (MatMul weights).
    CodesT { four_bit: bool },
    /// Scales `[n, k / block]` (or `[n]`).
    Scales,
    /// Scales `[k / block, n]` (or `[n]`).
    ScalesT,
}

fn transpose<T: Copy + Default>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = vec![T::default(); v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// The bytes of one part of kept weight `name`, read from the checkpoint.
pub fn part_bytes(src: &dyn WeightSource, name: &str, part: Part) -> Result<Vec<u8>> {
    let t = src
        .load(name)
        .map_err(|e| GraphError(format!("cannot read parameter `{name}`: {e}")))?;
    let (bytes, q) = t.quant_bytes()?;
    let (n, k) = (t.shape()[0], t.shape()[1]);
    let d = decode(q, bytes, n, k).map_err(|e| GraphError(format!("parameter `{name}`: {e}")))?;
    let per_row = d.scales.len() / n.max(1);
    Ok(match part {
        Part::Codes => d.codes.iter().map(|&c| c as u8).collect(),
        Part::CodesT { four_bit } => {
            let t = transpose(&d.codes, n, k);
            if four_bit {
                // ONNX int4: two per byte, the first in the low nibble.
                t.chunks(2)
                    .map(|p| {
                        (p[0] as u8 & 0x0F) | ((p.get(1).copied().unwrap_or(0) as u8 & 0x0F) << 4)
                    })
                    .collect()
            } else {
                t.iter().map(|&c| c as u8).collect()
            }
        }
        Part::Scales => d.scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
        Part::ScalesT => transpose(&d.scales, n, per_row)
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect(),
    })
}

fn unsupported(name: &str, dtype: DType) -> GraphError {
    GraphError(format!(
        "--quant keep: parameter `{name}` is {dtype}, which has no DequantizeLinear form (kept: w8a8, w4a16, q8_0, q4_0); export with --quant dequantize"
    ))
}

/// Plans parameter `name` (`dtype`, `[n, k]`) kept quantized and returns
/// its dequantized float32 value: `[k, n]` when `transpose` (MatMul), else
/// `[n, k]`.
pub fn keep(
    w: &mut Weights,
    b: &mut Builder,
    name: &str,
    dtype: DType,
    shape: &[usize],
    transpose: bool,
) -> Result<String> {
    let (Some(l), [n, k]) = (dtype.quant().and_then(layout), shape) else {
        return Err(unsupported(name, dtype));
    };
    let (n, k) = (*n, *k);
    let codes_elem = if transpose && l.four_bit {
        DataType::Int4
    } else {
        DataType::Int8
    };
    let (codes_dims, part) = if transpose {
        (
            vec![k, n],
            Part::CodesT {
                four_bit: l.four_bit,
            },
        )
    } else {
        (vec![n, k], Part::Codes)
    };
    let codes = w.part(
        b,
        &format!("{name}.codes{}", if transpose { "_t" } else { "" }),
        codes_elem,
        &codes_dims,
        quant_source(name, part),
    );
    let (scale_dims, spart) = match (l.block, transpose) {
        (None, _) => (vec![n], Part::Scales),
        (Some(g), false) => (vec![n, k / g], Part::Scales),
        (Some(g), true) => (vec![k / g, n], Part::ScalesT),
    };
    let scales = w.part(
        b,
        &format!("{name}.scales{}", if transpose { "_t" } else { "" }),
        DataType::Float,
        &scale_dims,
        quant_source(name, spart),
    );
    // Per-channel scales follow the output dimension; blocks the input one.
    let axis = match (l.block, transpose) {
        (None, false) | (Some(_), true) => 0,
        (None, true) | (Some(_), false) => 1,
    };
    let mut attrs = vec![attr_int("axis", axis)];
    if let Some(g) = l.block {
        attrs.push(attr_int("block_size", g as i64));
    }
    Ok(b.node("DequantizeLinear", &[&codes, &scales], attrs))
}

fn quant_source(name: &str, part: Part) -> Source {
    Source::Quant {
        name: name.to_string(),
        part,
    }
}

/// Rows `ids` of kept table `name` (`[n, k]`), dequantized after the
/// gather: codes and scales are gathered, then DequantizeLinear.
pub fn gather_rows(
    w: &mut Weights,
    b: &mut Builder,
    name: &str,
    dtype: DType,
    shape: &[usize],
    ids: &str,
    ids_shape: &[usize],
) -> Result<String> {
    let (Some(l), [n, k]) = (dtype.quant().and_then(layout), shape) else {
        return Err(unsupported(name, dtype));
    };
    let (n, k) = (*n, *k);
    let codes = w.part(
        b,
        &format!("{name}.codes"),
        DataType::Int8,
        &[n, k],
        quant_source(name, Part::Codes),
    );
    let sdims = match l.block {
        None => vec![n],
        Some(g) => vec![n, k / g],
    };
    let scales = w.part(
        b,
        &format!("{name}.scales"),
        DataType::Float,
        &sdims,
        quant_source(name, Part::Scales),
    );
    let m: usize = ids_shape.iter().product();
    let flat = b.reshape(ids, &[m]);
    let rows = b.node("Gather", &[&codes, &flat], vec![attr_int("axis", 0)]);
    let rs = b.node("Gather", &[&scales, &flat], vec![attr_int("axis", 0)]);
    let mut attrs = vec![];
    match l.block {
        None => attrs.push(attr_int("axis", 0)),
        Some(g) => {
            attrs.push(attr_int("axis", 1));
            attrs.push(attr_int("block_size", g as i64));
        }
    }
    let x = b.node("DequantizeLinear", &[&rows, &rs], attrs);
    let mut out = ids_shape.to_vec();
    out.push(k);
    Ok(b.reshape(&x, &out))
}

/// `x [.., k]` quantized to int8 per row and back, as the CPU rounds a
/// w8a8 linear's activations: scale `max|x| / 127` per row (an all-zero
/// row stays zero).
pub fn fake_quant_rows(b: &mut Builder, x: &str, shape: &[usize]) -> String {
    let k = shape.last().copied().unwrap_or(1).max(1);
    let m = shape.iter().product::<usize>() / k;
    let x2 = b.reshape(x, &[m, k]);
    let a = b.node("Abs", &[&x2], vec![]);
    let amax = b.reduce("ReduceMax", &a, &[1], false);
    let c127 = b.f32_scalar(127.0);
    let s = b.binary("Div", &amax, &c127);
    let tiny = b.f32_scalar(f32::MIN_POSITIVE);
    let s = b.binary("Max", &s, &tiny);
    let zp = b.constant(DataType::Int8, &[m], vec![0; m]);
    let q = b.node("QuantizeLinear", &[&x2, &s, &zp], vec![attr_int("axis", 0)]);
    let dq = b.node(
        "DequantizeLinear",
        &[&q, &s, &zp],
        vec![attr_int("axis", 0)],
    );
    b.reshape(&dq, shape)
}
