//! Conformance cases of the `norm` family: RMSNorm, LayerNorm, the fused
//! residual add + RMSNorm (f32 and f16 gains and biases, rows of 1 to
//! 1024 and beyond one work-group, odd row counts, a row view of a larger
//! tensor) and rotary embedding (odd head counts, d up to 128).

use super::{Case, Gen, NMSE_F32};
use crate::dtype::DType;
use crate::op::Op;
use crate::tensor::Tensor;

/// Row lengths: one, odd, a Qwen2 hidden size, a power of two, and more
/// than one 256-wide work-group's worth with a ragged tail.
const DIMS: [usize; 6] = [1, 7, 33, 896, 1024, 1100];
/// Leading shapes (rows), ranks 1 to 4 overall.
const LEADS: [&[usize]; 4] = [&[], &[3], &[2, 5], &[1, 3, 2]];

fn shape(lead: &[usize], d: usize) -> Vec<usize> {
    let mut s = lead.to_vec();
    s.push(d);
    s
}

fn weight(g: &mut Gen, dtype: DType, d: usize) -> Tensor {
    g.typed(dtype, &[d], 1.5)
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x4e04);
    let mut v = vec![];
    for (k, &d) in DIMS.iter().enumerate() {
        let lead = LEADS[k % LEADS.len()];
        let xs = shape(lead, d);
        for wt in [DType::F32, DType::F16] {
            for eps in [1e-6f32, 1e-5] {
                let x = g.f32(&xs, 2.0);
                let w = weight(&mut g, wt, d);
                v.push(Case::new(
                    format!("rms_norm x{xs:?} w {wt} eps {eps:e}"),
                    Op::RmsNorm { eps },
                    vec![x, w],
                    NMSE_F32,
                ));
            }
            let x = g.f32(&xs, 2.0);
            let y = g.f32(&xs, 2.0);
            let w = weight(&mut g, wt, d);
            v.push(Case::new(
                format!("add_rms_norm x{xs:?} w {wt}"),
                Op::AddRmsNorm { eps: 1e-6 },
                vec![x, y, w],
                NMSE_F32,
            ));
            // Offset data: the two-pass variance matters here.
            let x = offset_rows(&mut g, &xs, 3.0);
            let (w, b) = (weight(&mut g, wt, d), weight(&mut g, wt, d));
            v.push(Case::new(
                format!("layer_norm x{xs:?} w,b {wt}"),
                Op::LayerNorm { eps: 1e-5 },
                vec![x, w, b],
                NMSE_F32,
            ));
        }
    }
    // Mixed gain/bias dtypes, many rows, a tiny eps, and an all-zero row
    // (eps alone keeps it finite).
    let x = g.f32(&[37, 65], 1.0);
    let (w, b) = (
        weight(&mut g, DType::F32, 65),
        weight(&mut g, DType::F16, 65),
    );
    v.push(Case::new(
        "layer_norm x[37, 65] w f32 b f16",
        Op::LayerNorm { eps: 1e-12 },
        vec![x, w, b],
        NMSE_F32,
    ));
    let x = Tensor::from_f32(vec![0.0; 2 * 9], vec![2, 9]).expect("zeros");
    let w = weight(&mut g, DType::F32, 9);
    v.push(Case::new(
        "rms_norm zero rows x[2, 9]",
        Op::RmsNorm { eps: 1e-6 },
        vec![x, w],
        NMSE_F32,
    ));
    // A bf16 gain (widened to f32 at upload) and a row view as input.
    let w = weight(&mut g, DType::BF16, 64);
    let x = g.f32(&[9, 64], 1.0).narrow0(2, 7).expect("rows");
    v.push(Case::new(
        "rms_norm x[9, 64][2..7] w bf16",
        Op::RmsNorm { eps: 1e-6 },
        vec![x, w],
        NMSE_F32,
    ));
    v.extend(rope_cases(&mut g));
    v
}

/// Values around a per-row offset of up to `scale * 4`.
fn offset_rows(g: &mut Gen, shape: &[usize], scale: f32) -> Tensor {
    let d = *shape.last().unwrap_or(&1);
    let t = g.f32(shape, scale);
    let mut vals = t.to_f32_vec().expect("f32");
    for row in vals.chunks_mut(d.max(1)) {
        let shift = g.unit() * scale * 4.0;
        row.iter_mut().for_each(|x| *x += shift);
    }
    Tensor::from_f32(vals, shape.to_vec()).expect("shape")
}

fn rope_cases(g: &mut Gen) -> Vec<Case> {
    let mut v = vec![];
    for (s, h, d) in [
        (1, 1, 2),
        (1, 7, 64),
        (5, 3, 64),
        (7, 14, 64),
        (3, 2, 128),
        (33, 5, 18),
        (2, 9, 130),
    ] {
        let x = g.f32(&[s, h, d], 2.0);
        let ang = g.f32(&[s, d / 2], 3.0).to_f32_vec().expect("f32");
        let cos = Tensor::from_f32(ang.iter().map(|a| a.cos()).collect(), vec![s, d / 2]);
        let sin = Tensor::from_f32(ang.iter().map(|a| a.sin()).collect(), vec![s, d / 2]);
        v.push(Case::new(
            format!("apply_rope x[{s}, {h}, {d}]"),
            Op::ApplyRope,
            vec![x, cos.expect("cos"), sin.expect("sin")],
            NMSE_F32,
        ));
    }
    v
}

/// This family's cases alone on the OpenCL device, also with inputs that
/// are offset views (`tests/opencl.rs` runs every family's): `cargo test
/// -p mllm-backends --lib conformance::norm`.
#[cfg(all(test, feature = "opencl"))]
mod tests {
    #[test]
    fn opencl_matches_the_cpu() {
        super::super::shape::device_check::run_family(super::cases());
    }
}
