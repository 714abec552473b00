//! Seeded random inputs for conformance cases (splitmix64: the same cases
//! every run, on every machine).

use crate::dtype::DType;
use crate::quant::{self, QuantType};
use crate::tensor::Tensor;

pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// f32 values uniform in `[-scale, scale)`.
    pub fn f32(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let v = (0..n).map(|_| self.unit() * scale).collect();
        Tensor::from_f32(v, shape.to_vec()).expect("conformance shapes are small")
    }

    /// i32 values in `0..n`.
    pub fn ids(&mut self, shape: &[usize], n: usize) -> Tensor {
        let count = shape.iter().product();
        let v = (0..count).map(|_| self.below(n) as i32).collect();
        Tensor::from_i32(v, shape.to_vec()).expect("conformance shapes are small")
    }

    /// Random values stored as `dtype` (f32, f16, bf16 or ggml blocks;
    /// the last dim must be whole blocks).
    pub fn typed(&mut self, dtype: DType, shape: &[usize], scale: f32) -> Tensor {
        let t = self.f32(shape, scale);
        let v = t.f32s().expect("f32").to_vec();
        match dtype {
            DType::F32 => t,
            DType::F16 => Tensor::from_f16(
                v.iter().map(|&x| half::f16::from_f32(x)).collect(),
                shape.to_vec(),
            )
            .expect("f16"),
            DType::BF16 => Tensor::from_bf16(
                v.iter().map(|&x| half::bf16::from_f32(x)).collect(),
                shape.to_vec(),
            )
            .expect("bf16"),
            DType::I32 => self.ids(shape, 100),
            DType::Quant(q) => quantized(q, &v, shape),
        }
    }
}

fn quantized(q: QuantType, v: &[f32], shape: &[usize]) -> Tensor {
    let bytes = quant::quantize(q, v).expect("conformance shapes are whole blocks");
    Tensor::from_quant(bytes, q, shape.to_vec()).expect("blocks")
}
