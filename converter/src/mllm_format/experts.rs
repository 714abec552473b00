//! Fused expert stacks stored transposed. Published Qwen3-VL-MoE
//! checkpoints hold `experts.gate_up_proj` as [E, H, 2I] and
//! `experts.down_proj` as [E, I, H], where the scripts (and transformers in
//! memory) take [E, 2I, H] and [E, H, I]. The binder transposes float
//! stacks at load (interpreter/src/bind_experts.rs), but quantized blocks
//! run along the last axis and cannot be transposed there, so `convert`
//! writes such stacks in the declared layout before quantizing: blocks
//! then run along H (gate_up) and I (down), the rows the expert kernel
//! reads. Like transformers' `Transpose(1, 2, check_dims=True)`, a stack is
//! moved only when its shape says so: the model width H (`hidden_size`) in
//! the transposed place and not in the declared one.

use half::{bf16, f16};
use mllm_backends::tensor::FloatSlice;
use mllm_backends::Tensor;
use serde_json::Value;

/// The model width, from `text_config` for vision-language configs.
fn hidden_size(config: &Value) -> Option<usize> {
    let text = config.get("text_config").unwrap_or(config);
    let h = text
        .get("hidden_size")
        .or_else(|| config.get("hidden_size"));
    h?.as_u64().map(|h| h as usize)
}

/// The declared shape of `name` when it is a fused expert stack stored
/// transposed (`shape` its stored shape); `None` for every other tensor.
pub(super) fn declared_shape(config: &Value, name: &str, shape: &[usize]) -> Option<Vec<usize>> {
    let &[e, a, b] = shape else { return None };
    let h = hidden_size(config)?;
    let transposed = if name.ends_with("experts.gate_up_proj") {
        // Declared [E, 2I, H]; stored [E, H, 2I].
        a == h && b != h
    } else if name.ends_with("experts.down_proj") {
        // Declared [E, H, I]; stored [E, I, H].
        b == h && a != h
    } else {
        false
    };
    transposed.then(|| vec![e, b, a])
}

/// `t` [e, rows, cols] as [e, cols, rows], in its own float type.
pub(super) fn transpose_last2(t: &Tensor) -> Result<Tensor, String> {
    let &[e, rows, cols] = t.shape() else {
        return Err(format!(
            "an expert stack of shape {:?} is not 3-D",
            t.shape()
        ));
    };
    fn swap<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for m in v.chunks_exact(rows * cols) {
            for c in 0..cols {
                out.extend((0..rows).map(|r| m[r * cols + c]));
            }
        }
        out
    }
    let shape = vec![e, cols, rows];
    let err = |e: mllm_backends::BackendError| e.to_string();
    match t.floats().map_err(|_| {
        format!(
            "a transposed expert stack of type {} cannot be laid out as the model declares; convert from a float checkpoint",
            t.dtype()
        )
    })? {
        FloatSlice::F32(v) => Tensor::from_f32(swap(v, rows, cols), shape).map_err(err),
        FloatSlice::F16(v) => Tensor::from_f16(swap::<f16>(v, rows, cols), shape).map_err(err),
        FloatSlice::BF16(v) => Tensor::from_bf16(swap::<bf16>(v, rows, cols), shape).map_err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_transposed_stacks_move() {
        let vl = json!({"text_config": {"hidden_size": 32}});
        let gu = "model.language_model.layers.0.mlp.experts.gate_up_proj";
        let down = "model.language_model.layers.0.mlp.experts.down_proj";
        assert_eq!(declared_shape(&vl, gu, &[8, 32, 24]), Some(vec![8, 24, 32]));
        assert_eq!(
            declared_shape(&vl, down, &[8, 12, 32]),
            Some(vec![8, 32, 12])
        );
        // Already declared (transformers 5's save_pretrained), square, or
        // not an expert stack: as stored.
        assert_eq!(declared_shape(&vl, gu, &[8, 24, 32]), None);
        assert_eq!(declared_shape(&vl, down, &[8, 32, 12]), None);
        assert_eq!(declared_shape(&vl, gu, &[8, 32, 32]), None);
        assert_eq!(
            declared_shape(&vl, "model.embed_tokens.weight", &[8, 32, 24]),
            None
        );
        let flat = json!({"hidden_size": 32});
        assert_eq!(
            declared_shape(&flat, gu, &[8, 32, 24]),
            Some(vec![8, 24, 32])
        );
        assert_eq!(declared_shape(&json!({}), gu, &[8, 32, 24]), None);
    }

    #[test]
    fn transposes_each_expert() {
        // 2 experts of [2, 3].
        let v: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let t = Tensor::from_f32(v, vec![2, 2, 3]).unwrap();
        let s = transpose_last2(&t).unwrap();
        assert_eq!(s.shape(), [2, 3, 2]);
        let want = [0., 3., 1., 4., 2., 5., 6., 9., 7., 10., 8., 11.];
        assert_eq!(s.to_f32_vec().unwrap(), want);
        let b = Tensor::from_bf16(vec![bf16::from_f32(1.0); 12], vec![2, 2, 3]).unwrap();
        assert_eq!(transpose_last2(&b).unwrap().dtype(), b.dtype());
    }
}
