//! `convert`: a checkpoint (Hugging Face directory, PyTorch file, GGUF) to
//! a `.mllm` file at a quantization type, streaming. The recipe fixes every
//! tensor's stored type first, so the writer knows the whole layout; then
//! tensors are converted a small window at a time, in parallel within the
//! window (at most one tensor per thread and `WINDOW_BYTES` of work), and
//! each window is written before the next is loaded, so memory stays near
//! a few tensors however large the checkpoint. Within a tensor, values are
//! widened to f32 one band of rows at a time (`BAND_VALUES`), so the working
//! copy is a band, and only the stored output is whole.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use half::{bf16, f16};
use mllm_backends::quant;
use mllm_backends::{Buffer, DType, Tensor};
use rayon::prelude::*;

use super::experts;
use super::kquant;
use super::recipe::{type_names, Recipe, KEEP};
use super::source::SourceModel;
use super::types::StoredType;
use super::writer::{MllmWriter, PlannedTensor};
use crate::error::{ConvertError, Result};

/// Working memory a window may take (source values as f32 plus output).
const WINDOW_BYTES: usize = 512 << 20;
/// Values widened to f32 at a time within a tensor (16 MiB of f32).
const BAND_VALUES: usize = 1 << 22;

/// What a conversion did.
#[derive(Clone, Debug)]
pub struct ConvertSummary {
    pub out: PathBuf,
    pub tensors: usize,
    /// Bytes of tensor data written.
    pub data_bytes: u64,
    pub params: u64,
    /// Tensors stored in another type than the recipe asked, with both types.
    pub fallbacks: Vec<(String, StoredType, StoredType)>,
    /// Temporary files of killed conversions to `out`, removed.
    pub removed_stale: Vec<PathBuf>,
}

/// Converts `src` to `out` (written as `.OUT.tmp-PID` beside it, renamed
/// when complete). `quant` names the type (`f16`, `bf16`, `q8_0`, `q4_0`,
/// `q4_1`, `q4_k`, `q5_k`, `q6_k`, `f32`, ... or `keep`: every tensor in its
/// source type, a GGUF's blocks copied); `recipe` is an optional recipe
/// file whose rules come before the type's defaults. `progress(done, total)`
/// is called after each tensor is written.
pub fn convert(
    src: &Path,
    out: &Path,
    quant: &str,
    recipe: Option<&Path>,
    progress: impl FnMut(usize, usize),
) -> Result<ConvertSummary> {
    convert_cancellable(
        src,
        None,
        out,
        quant,
        recipe,
        progress,
        &AtomicBool::new(false),
    )
}

/// `convert` that stops when `cancel` is set (Ctrl-C): checked before each
/// window of tensors, it ends the conversion with an error, and the
/// temporary file is removed, so nothing is left at `out`.
/// `mmproj`: llama.cpp's vision tower file, joined to a GGUF text `src`.
pub fn convert_cancellable(
    src: &Path,
    mmproj: Option<&Path>,
    out: &Path,
    quant: &str,
    recipe: Option<&Path>,
    mut progress: impl FnMut(usize, usize),
    cancel: &AtomicBool,
) -> Result<ConvertSummary> {
    let ty = match quant {
        KEEP => None,
        _ => Some(parse_type(quant)?),
    };
    let file = match recipe {
        None => None,
        Some(p) => Some((
            std::fs::read_to_string(p).map_err(|e| ConvertError::io(p, e))?,
            p.display().to_string(),
        )),
    };
    let recipe = match (ty, &file) {
        (None, f) => Recipe::keep(f.as_ref().map(|(t, o)| (t.as_str(), o.as_str()))),
        (Some(ty), None) => Ok(Recipe::default_for(ty)),
        (Some(ty), Some((text, origin))) => Recipe::parse(text, origin, ty),
    }
    .map_err(ConvertError::Unsupported)?;
    if same_file(src, out) || mmproj.is_some_and(|m| same_file(m, out)) {
        return Err(ConvertError::Unsupported(format!(
            "{} is the source; choose another output path",
            out.display()
        )));
    }
    let source = SourceModel::open_with_mmproj(src, mmproj)?;
    let weights = source.weights();
    let mut planned = vec![];
    let mut fallbacks = vec![];
    for name in weights.names() {
        let info = weights
            .info(&name)
            .ok_or_else(|| ConvertError::Corrupt(format!("tensor `{name}` vanished")))?;
        let from = source
            .source_type(&name)
            .unwrap_or(StoredType::from(info.dtype));
        // Transposed expert stacks are written (and quantized) as declared.
        let shape =
            experts::declared_shape(&source.config, &name, &info.shape).unwrap_or(info.shape);
        let plan = recipe.plan(&name, from, &shape);
        if plan.stored != plan.requested {
            fallbacks.push((name.clone(), plan.requested, plan.stored));
        }
        planned.push(PlannedTensor {
            name,
            ty: plan.stored,
            requested: plan.requested,
            shape,
        });
    }
    let mut meta = source.metadata();
    meta["recipe"] = recipe.to_json();
    let mut writer = MllmWriter::create(out, &meta, &planned)?;
    let removed_stale = writer.removed_stale().to_vec();

    let total = planned.len();
    let threads = rayon::current_num_threads().max(1);
    // Peak bytes per element while converting: the output (<= 4) plus a
    // band of f32 values (`by_rows`).
    let cost = |p: &PlannedTensor| {
        let n = p.shape.iter().product::<usize>();
        n.saturating_mul(4).saturating_add(n.min(BAND_VALUES) * 4)
    };
    let (mut i, mut data_bytes, mut params) = (0, 0u64, 0u64);
    while i < total {
        if cancel.load(Ordering::Relaxed) {
            return Err(ConvertError::Unsupported(format!(
                "interrupted after {i} of {total} tensors; nothing was written to {}",
                out.display()
            )));
        }
        let mut j = i + 1;
        let mut bytes = cost(&planned[i]);
        while j < total && j - i < threads && bytes + cost(&planned[j]) <= WINDOW_BYTES {
            bytes += cost(&planned[j]);
            j += 1;
        }
        let converted: Vec<Result<Vec<u8>>> = planned[i..j]
            .par_iter()
            .map(|p| convert_one(&source, p))
            .collect();
        for (k, (p, data)) in planned[i..j].iter().zip(converted).enumerate() {
            let data = data?;
            writer.write_next(&p.name, &data)?;
            data_bytes += data.len() as u64;
            params += p.shape.iter().product::<usize>() as u64;
            progress(i + k + 1, total);
        }
        i = j;
    }
    let out = writer.finish()?;
    Ok(ConvertSummary {
        out,
        tensors: total,
        data_bytes,
        params,
        fallbacks,
        removed_stale,
    })
}

/// The stored type `quant` names, or an error listing the known ones.
fn parse_type(quant: &str) -> Result<StoredType> {
    StoredType::parse(quant)
        .filter(|t| *t != StoredType::I32)
        .ok_or_else(|| {
            // The list comes from the type table, so a new type is named.
            let names: Vec<&str> = StoredType::ALL
                .iter()
                .filter(|t| **t != StoredType::I32)
                .map(|t| t.name())
                .collect();
            ConvertError::Unsupported(format!(
                "unknown type `{quant}`; choose one of {}, or {KEEP} (every tensor in its source type; w4a16 is w4a16_g128)",
                names.join(", ")
            ))
        })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// One tensor's stored bytes.
fn convert_one(source: &SourceModel, p: &PlannedTensor) -> Result<Vec<u8>> {
    let fail =
        |m: String| ConvertError::Unsupported(format!("tensor `{}` to {}: {m}", p.name, p.ty));
    let stored = source.weights().info(&p.name).map(|i| i.shape);
    let moved = stored.as_deref() != Some(p.shape.as_slice());
    if p.ty.is_quant() && source.source_type(&p.name) == Some(p.ty) && !moved {
        // Already in the requested blocks (a GGUF): copy, never re-quantize.
        return source
            .raw_blocks(&p.name)
            .ok_or_else(|| fail("its blocks cannot be read".into()));
    }
    let t = source.weights().load(&p.name).map_err(fail)?;
    // A transposed expert stack (experts.rs), laid out as planned.
    let t = match moved {
        true => experts::transpose_last2(&t).map_err(fail)?,
        false => t,
    };
    let shape: Vec<u64> = p.shape.iter().map(|&d| d as u64).collect();
    let len = p.ty.byte_len(&shape).map_err(fail)? as usize;
    match p.ty.norm() {
        StoredType::Plain(DType::I32) => {
            let v = t.i32s().map_err(|e| fail(e.to_string()))?;
            Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        StoredType::Plain(DType::F32) => by_rows(&t, len, |b| {
            let v = values_f32(b)?;
            Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
        })
        .map_err(fail),
        StoredType::Plain(DType::F16) => by_rows(&t, len, |b| {
            half_bytes(b, DType::F16, |x| f16::from_f32(x).to_le_bytes())
        })
        .map_err(fail),
        StoredType::Plain(DType::BF16) => by_rows(&t, len, |b| {
            half_bytes(b, DType::BF16, |x| bf16::from_f32(x).to_le_bytes())
        })
        .map_err(fail),
        StoredType::Quant(q) | StoredType::Plain(DType::Quant(q)) => {
            by_rows(&t, len, |b| kquant::quantize(q, &values_f32(b)?)).map_err(fail)
        }
    }
}

/// `f` applied to bands of whole rows of `t` (about `BAND_VALUES` values
/// each, zero-copy views), the results joined into `len` bytes: the f32
/// copy a conversion needs is one band, not the tensor.
fn by_rows(
    t: &Tensor,
    len: usize,
    f: impl Fn(&Tensor) -> std::result::Result<Vec<u8>, String>,
) -> std::result::Result<Vec<u8>, String> {
    let cols = t.shape().last().copied().unwrap_or(1).max(1);
    let rows = t.numel() / cols;
    if t.shape().len() < 2 || t.numel() <= BAND_VALUES {
        return f(t);
    }
    let flat = t.reshaped(vec![rows, cols]).map_err(|e| e.to_string())?;
    let band = (BAND_VALUES / cols).max(1);
    let mut out = Vec::with_capacity(len);
    for r in (0..rows).step_by(band) {
        let part = flat
            .narrow0(r, (r + band).min(rows))
            .map_err(|e| e.to_string())?;
        out.extend(f(&part)?);
    }
    Ok(out)
}

/// A tensor's values as f32, dequantizing a quantized one (a source may
/// hand out GGUF blocks as they are).
fn values_f32(t: &Tensor) -> std::result::Result<Vec<f32>, String> {
    let DType::Quant(q) = t.dtype() else {
        return t.to_f32_vec().map_err(|e| e.to_string());
    };
    let Buffer::Bytes {
        owner, start, len, ..
    } = &**t.buffer()
    else {
        return Err(format!("a {q} tensor without block storage"));
    };
    let bytes = &owner.bytes()[*start..*start + *len];
    let skip = t.offset() / q.block_size() * q.type_size();
    let need = q.bytes_for(t.numel())?;
    let blocks = bytes
        .get(skip..skip + need)
        .ok_or_else(|| format!("a {q} view outside its blocks"))?;
    quant::dequantize(q, blocks, t.numel())
}

/// A tensor as 16-bit floats: its own bytes when it already is `dtype`,
/// else rounded from f32 (to nearest even), refusing values the type
/// cannot hold rather than writing infinities.
fn half_bytes(
    t: &Tensor,
    dtype: DType,
    conv: impl Fn(f32) -> [u8; 2],
) -> std::result::Result<Vec<u8>, String> {
    if t.dtype().is_quantized() {
        let v = values_f32(t)?;
        return half_bytes(
            &Tensor::from_f32(v, t.shape().to_vec()).map_err(|e| e.to_string())?,
            dtype,
            conv,
        );
    }
    let floats = t.floats().map_err(|e| e.to_string())?;
    match floats {
        mllm_backends::FloatSlice::F16(s) if dtype == DType::F16 => {
            return Ok(s.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        mllm_backends::FloatSlice::BF16(s) if dtype == DType::BF16 => {
            return Ok(s.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        _ => {}
    }
    let v = floats.to_vec();
    let mut out = Vec::with_capacity(v.len() * 2);
    for &x in &v {
        let b = conv(x);
        if x.is_finite() && f16_or_bf16_is_inf(dtype, b) {
            return Err(format!(
                "the value {x} is out of {dtype}'s range; keep this tensor in f32 or bf16 with a recipe rule"
            ));
        }
        out.extend_from_slice(&b);
    }
    Ok(out)
}

fn f16_or_bf16_is_inf(dtype: DType, b: [u8; 2]) -> bool {
    match dtype {
        DType::F16 => f16::from_le_bytes(b).is_infinite(),
        _ => bf16::from_le_bytes(b).is_infinite(),
    }
}

/// The types `convert` accepts, for help texts.
pub fn convert_types() -> String {
    format!("{}, {KEEP}", type_names())
}
