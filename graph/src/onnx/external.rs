//! ONNX external data: the initializers planned by `weights` are streamed,
//! one tensor at a time, into one file beside `model.onnx` (so models over
//! protobuf's 2 GB limit work and memory stays at the largest tensor), each
//! at an aligned offset so runtimes can map it; `model.onnx` keeps only
//! their name, type, shape, offset and length.

use std::io::Write;
use std::path::Path;

use mllm_backends::weights::WeightSource;

use super::proto::{entry, DataLocation, TensorProto};
use super::weights::{Pending, Source};
use crate::{GraphError, Result};

/// Tensors of at least this many bytes start at a page boundary (mappable);
/// smaller ones at 64 bytes.
const PAGE: u64 = 4096;
const PAGE_FROM: usize = 64 * 1024;
const SMALL_ALIGN: u64 = 64;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `[n, k]` row-major as `[k, n]`.
fn transpose(v: &[f32], n: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; v.len()];
    for (r, row) in v.chunks_exact(k.max(1)).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            out[c * n + r] = x;
        }
    }
    out
}

/// The bytes of one planned initializer.
fn bytes_of(p: &Pending, src: &dyn WeightSource) -> Result<Vec<u8>> {
    match &p.source {
        Source::Bytes(b) => Ok(b.clone()),
        Source::Quant { name, part } => super::quant::part_bytes(src, name, *part),
        Source::Param { name, transpose: t } => {
            let w = src
                .load(name)
                .map_err(|e| GraphError(format!("cannot read parameter `{name}`: {e}")))?;
            let v = w
                .to_f32_vec()
                .map_err(|e| GraphError(format!("cannot widen parameter `{name}` to f32: {e}")))?;
            if *t {
                let (n, k) = (w.shape()[0], w.shape()[1]);
                Ok(f32_bytes(&transpose(&v, n, k)))
            } else {
                Ok(f32_bytes(&v))
            }
        }
    }
}

/// Writes every planned initializer into `dir/file` (replacing it) and
/// returns their TensorProtos pointing into it.
pub fn write(
    dir: &Path,
    file: &str,
    pending: &[Pending],
    src: &dyn WeightSource,
) -> Result<Vec<TensorProto>> {
    let path = dir.join(file);
    let io = |e: std::io::Error| GraphError(format!("cannot write {}: {e}", path.display()));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    let mut offset = 0u64;
    let mut protos = Vec::with_capacity(pending.len());
    for p in pending {
        let raw = bytes_of(p, src)?;
        let align = if raw.len() >= PAGE_FROM {
            PAGE
        } else {
            SMALL_ALIGN
        };
        let pad = offset.next_multiple_of(align) - offset;
        out.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        offset += pad;
        out.write_all(&raw).map_err(io)?;
        protos.push(TensorProto {
            dims: p.dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(p.elem as i32),
            name: Some(p.name.clone()),
            data_location: Some(DataLocation::External as i32),
            external_data: vec![
                entry("location", file),
                entry("offset", offset.to_string()),
                entry("length", raw.len().to_string()),
            ],
            ..Default::default()
        });
        offset += raw.len() as u64;
    }
    out.flush().map_err(io)?;
    Ok(protos)
}

#[cfg(test)]
mod tests {
    use super::transpose;

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
        let t = transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3);
        assert_eq!(t, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }
}
