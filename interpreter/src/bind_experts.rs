//! Mixture-of-experts weights as one 3-D tensor per projection, whatever
//! layout the checkpoint has. Scripts declare transformers 5's in-memory
//! layout, `{P}experts.gate_up_proj [E, 2I, H]` (each expert's gate rows,
//! then its up rows) and `{P}experts.down_proj [E, H, I]`, which checkpoints
//! saved that way hold as they are. Published checkpoints keep one 2-D
//! tensor per expert (`{P}experts.{e}.gate_proj.weight`, ...) and GGUF files
//! one 3-D tensor per projection (`ffn_gate_exps`, read as
//! `{P}experts.gate_proj.weight`): those are stacked here, once, at load,
//! byte for byte (quantized blocks included), so the grouped expert kernel
//! sees one layout. Qwen3-VL-MoE's published checkpoints hold the fused
//! tensors under the declared names but transposed (`gate_up_proj`
//! [E, H, 2I], `down_proj` [E, I, H]): those are transposed here, as
//! transformers' `Transpose(1, 2, check_dims=True)` does, keyed on the shape.

use half::{bf16, f16};
use mllm_backends::tensor::FloatSlice;
use mllm_backends::weights::WeightSource;
use mllm_backends::{DType, Tensor};

/// A tensor the checkpoint does not hold under `path` but holds in another
/// expert layout: the stacked tensor and the checkpoint names it read.
/// `None` when `path` is not an expert projection or no layout matches.
pub(crate) fn synthesize(
    ws: &dyn WeightSource,
    path: &str,
    shape: &[usize],
) -> Option<Result<(Tensor, Vec<String>), String>> {
    let (prefix, proj) = path.rsplit_once("experts.")?;
    if let Some(r) = transposed(ws, path, proj, shape) {
        return Some(r);
    }
    let prefix = format!("{prefix}experts.");
    let experts = *shape.first()?;
    // Per expert, the source tensors (and, for 3-D sources, the expert's
    // index inside them) laid one after the other.
    let parts: Vec<&str> = match proj {
        "gate_up_proj" => vec!["gate_proj", "up_proj"],
        "gate_proj" | "up_proj" | "down_proj" => vec![proj],
        _ => return None,
    };
    let per_expert = |e: usize, p: &str| format!("{prefix}{e}.{p}.weight");
    let stacked = |p: &str| format!("{prefix}{p}.weight");
    if let [p] = parts[..] {
        // One 3-D tensor already (a GGUF `ffn_down_exps`): no copy.
        if ws.info(&stacked(p)).is_some_and(|i| i.shape == shape) {
            let name = stacked(p);
            return Some(ws.load(&name).map(|t| (t, vec![name])));
        }
    }
    let sources: Vec<(String, Option<usize>)> = if ws.info(&per_expert(0, parts[0])).is_some() {
        (0..experts)
            .flat_map(|e| parts.iter().map(move |p| (e, *p)))
            .map(|(e, p)| (per_expert(e, p), None))
            .collect()
    } else if parts.iter().all(|p| ws.info(&stacked(p)).is_some()) {
        (0..experts)
            .flat_map(|e| parts.iter().map(move |p| (stacked(p), Some(e))))
            .collect()
    } else {
        return None;
    };
    Some(stack(ws, &sources, shape).map(|t| {
        let mut used: Vec<String> = sources.into_iter().map(|(n, _)| n).collect();
        used.dedup();
        used.sort();
        used.dedup();
        (t, used)
    }))
}

/// A fused `gate_up_proj` / `down_proj` stored as `[E, b, a]` where the
/// script declares `[E, a, b]`: its last two dims swapped. A square
/// `a == b` stays as stored (the declared layout), as in transformers.
fn transposed(
    ws: &dyn WeightSource,
    path: &str,
    proj: &str,
    shape: &[usize],
) -> Option<Result<(Tensor, Vec<String>), String>> {
    if proj != "gate_up_proj" && proj != "down_proj" {
        return None;
    }
    let &[e, a, b] = shape else { return None };
    if a == b || ws.info(path)?.shape != [e, b, a] {
        return None;
    }
    let t = match ws.load(path) {
        Ok(t) => t,
        Err(err) => return Some(Err(format!("cannot load `{path}`: {err}"))),
    };
    Some(transpose_last2(&t, e, b, a).map(|t| (t, vec![path.to_string()])))
}

/// `t` [e, rows, cols] as [e, cols, rows].
fn transpose_last2(t: &Tensor, e: usize, rows: usize, cols: usize) -> Result<Tensor, String> {
    fn swap<T: Copy>(v: &[T], e: usize, rows: usize, cols: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for m in v.chunks_exact(rows * cols).take(e) {
            for c in 0..cols {
                out.extend((0..rows).map(|r| m[r * cols + c]));
            }
        }
        out
    }
    let err = |e: mllm_backends::BackendError| e.to_string();
    let shape = vec![e, cols, rows];
    match t.floats().map_err(|_| {
        format!(
            "a transposed ([E, H, 2I] / [E, I, H]) expert stack of type {} cannot be laid out \
             as [E, 2I, H] / [E, H, I]; use a float checkpoint",
            t.dtype()
        )
    })? {
        FloatSlice::F32(v) => Tensor::from_f32(swap(v, e, rows, cols), shape).map_err(err),
        FloatSlice::F16(v) => Tensor::from_f16(swap(v, e, rows, cols), shape).map_err(err),
        FloatSlice::BF16(v) => Tensor::from_bf16(swap(v, e, rows, cols), shape).map_err(err),
    }
}

/// Concatenates the sources (each whole, or one expert of a 3-D tensor) into
/// one tensor of `shape`; every source shares the dtype and the last dim.
fn stack(
    ws: &dyn WeightSource,
    sources: &[(String, Option<usize>)],
    shape: &[usize],
) -> Result<Tensor, String> {
    let mut loaded: Vec<(String, Tensor)> = vec![];
    let mut pieces: Vec<Tensor> = vec![];
    for (name, expert) in sources {
        let t = match loaded.iter().find(|(n, _)| n == name) {
            Some((_, t)) => t.clone(),
            None => {
                let t = ws
                    .load(name)
                    .map_err(|e| format!("cannot load `{name}`: {e}"))?;
                loaded.push((name.clone(), t.clone()));
                t
            }
        };
        let piece = match expert {
            None => t,
            Some(e) => {
                let inner = t.shape()[1..].to_vec();
                t.narrow0(*e, e + 1)
                    .and_then(|x| x.reshaped(inner))
                    .map_err(|err| format!("expert {e} of `{name}`: {err}"))?
            }
        };
        pieces.push(piece);
    }
    let Some(first) = pieces.first() else {
        return Err("no expert tensors".into());
    };
    let dtype = first.dtype();
    let last = shape.last().copied().unwrap_or(0);
    let total: usize = pieces.iter().map(|p| p.numel()).sum();
    let want: usize = shape.iter().product();
    if let Some((i, p)) = pieces
        .iter()
        .enumerate()
        .find(|(_, p)| p.dtype() != dtype || p.shape().last() != Some(&last))
    {
        return Err(format!(
            "`{}` is {} {:?}, but the experts stacked with it are {dtype} with rows of {last}",
            sources[i].0,
            p.dtype(),
            p.shape()
        ));
    }
    if total != want {
        return Err(format!(
            "the expert tensors hold {total} values, the declared shape {shape:?} {want}"
        ));
    }
    let err = |e: mllm_backends::BackendError| e.to_string();
    match dtype {
        DType::Quant(ty) => {
            let mut bytes = vec![];
            for p in &pieces {
                bytes.extend_from_slice(p.quant_bytes().map_err(err)?.0);
            }
            Tensor::from_quant(bytes, ty, shape.to_vec()).map_err(err)
        }
        DType::F32 => {
            let mut v: Vec<f32> = Vec::with_capacity(want);
            for p in &pieces {
                v.extend_from_slice(p.f32s().map_err(err)?);
            }
            Tensor::from_f32(v, shape.to_vec()).map_err(err)
        }
        DType::F16 | DType::BF16 => {
            let (mut h, mut b): (Vec<f16>, Vec<bf16>) = (vec![], vec![]);
            for p in &pieces {
                match p.floats().map_err(err)? {
                    FloatSlice::F16(s) => h.extend_from_slice(s),
                    FloatSlice::BF16(s) => b.extend_from_slice(s),
                    FloatSlice::F32(_) => return Err("mixed float types among experts".into()),
                }
            }
            if dtype == DType::F16 {
                Tensor::from_f16(h, shape.to_vec()).map_err(err)
            } else {
                Tensor::from_bf16(b, shape.to_vec()).map_err(err)
            }
        }
        other => Err(format!("expert weights of type {other} cannot be stacked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mllm_backends::weights::TensorInfo;

    struct Mem(Vec<(String, Tensor)>);

    impl WeightSource for Mem {
        fn describe(&self) -> String {
            "test tensors".into()
        }
        fn names(&self) -> Vec<String> {
            self.0.iter().map(|(n, _)| n.clone()).collect()
        }
        fn info(&self, name: &str) -> Option<TensorInfo> {
            let t = &self.0.iter().find(|(n, _)| n == name)?.1;
            Some(TensorInfo {
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
            })
        }
        fn load(&self, name: &str) -> Result<Tensor, String> {
            let t = self.0.iter().find(|(n, _)| n == name);
            t.map(|(_, t)| t.clone())
                .ok_or_else(|| format!("no {name}"))
        }
    }

    const GU: &str = "m.layers.0.mlp.experts.gate_up_proj";

    /// Expert e's [rows, cols] matrix holds 100 e + 10 r + c.
    fn stack(e: usize, rows: usize, cols: usize) -> Vec<f32> {
        let at = |x: usize| (100 * (x / (rows * cols)) + 10 * (x / cols % rows) + x % cols) as f32;
        (0..e * rows * cols).map(at).collect()
    }

    #[test]
    fn transposed_fused_stacks_are_laid_out_as_declared() {
        // Stored [E=2, H=3, 2I=4] (published Qwen3-VL-MoE), declared [2, 4, 3].
        let stored = Tensor::from_f32(stack(2, 3, 4), vec![2, 3, 4]).unwrap();
        let ws = Mem(vec![(GU.into(), stored)]);
        let (t, used) = synthesize(&ws, GU, &[2, 4, 3]).unwrap().unwrap();
        assert_eq!(used, vec![GU.to_string()]);
        assert_eq!(t.shape(), &[2, 4, 3]);
        let want: Vec<f32> = (0..24)
            .map(|x| (100 * (x / 12) + 10 * (x % 3) + x / 3 % 4) as f32)
            .collect();
        assert_eq!(t.f32s().unwrap(), &want[..]);
        // bf16 too; a stack already as declared, or of an unrelated shape, is not touched here.
        let b: Vec<bf16> = stack(2, 3, 4).into_iter().map(bf16::from_f32).collect();
        let ws = Mem(vec![(
            GU.into(),
            Tensor::from_bf16(b, vec![2, 3, 4]).unwrap(),
        )]);
        let (t, _) = synthesize(&ws, GU, &[2, 4, 3]).unwrap().unwrap();
        assert_eq!(t.dtype(), DType::BF16);
        assert!(synthesize(&ws, GU, &[2, 3, 4]).is_none());
        assert!(synthesize(&ws, GU, &[2, 6, 2]).is_none());
    }
}
