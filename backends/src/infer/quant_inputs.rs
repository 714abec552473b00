//! Where quantized tensors may appear among an op's inputs.

use super::TensorMeta;
use crate::dtype::DType;
use crate::error::{dtype_err, Result};
use crate::op::Op;
use crate::quant::QuantType;

/// Quantized tensors are read only as a linear's weight (input 1) or an
/// embedding table (input 0); any other use, and casts or constants of a
/// quantized dtype, are dtype errors rather than silent dequantization.
pub(super) fn check_quant_inputs(op: &Op, inputs: &[TensorMeta]) -> Result<()> {
    let merged_weights;
    let allowed: &[usize] = match op {
        Op::Linear => &[1],
        Op::MoeLinear => {
            merged_weights = (2..inputs.len()).collect::<Vec<_>>();
            &merged_weights
        }
        Op::MergedLinear { parts, norm_eps } => {
            let first = 1 + usize::from(norm_eps.is_some());
            merged_weights = (first..first + parts).collect::<Vec<_>>();
            &merged_weights
        }
        Op::Embedding => &[0],
        // `.float()` of a quantized parameter a script uses as a table
        // (DeepSeek-OCR 2's relative positions): the blocks dequantized.
        Op::Cast { dtype: DType::F32 } => &[0],
        // Keys and values of a q8_0 KV cache.
        Op::Sdpa { .. } => &[1, 2],
        Op::CachedSdpa { .. } => &[3, 4],
        Op::Cast { dtype } | Op::Arange { dtype, .. } | Op::Full { dtype, .. }
            if dtype.is_quantized() =>
        {
            return dtype_err(
                op.name(),
                format!("cannot make {dtype} tensors; quantize weights in the converter"),
            );
        }
        _ => &[],
    };
    for (i, t) in inputs.iter().enumerate() {
        let cache_rows = matches!(op, Op::Sdpa { .. } | Op::CachedSdpa { .. })
            && t.dtype == DType::Quant(QuantType::Q8_0);
        if t.dtype.is_quantized()
            && !(allowed.contains(&i)
                && (cache_rows || !matches!(op, Op::Sdpa { .. } | Op::CachedSdpa { .. })))
        {
            let what = match op {
                Op::Linear => "only its weight (second input) may be quantized",
                Op::MergedLinear { .. } | Op::MoeLinear => "only its weights may be quantized",
                Op::Embedding => "only its table (first input) may be quantized",
                Op::Sdpa { .. } | Op::CachedSdpa { .. } => {
                    "reads quantized keys and values only as q8_0 (a KV cache)"
                }
                _ => "takes no quantized tensors (only linear weights and embedding tables may be)",
            };
            return dtype_err(
                op.name(),
                format!("input {i} is {} {:?}: {what}", t.dtype, t.shape),
            );
        }
    }
    Ok(())
}
