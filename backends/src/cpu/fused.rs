//! Fused kernels the graph passes create, each beside its reference twin
//! (the decomposition it replaces). The fast versions run the very kernels
//! of the decomposed ops on the same data, so a fused graph gives the same
//! numbers as the eager script; what they save is the intermediate tensor
//! and its allocation.

use super::elementwise::{unary_into, unary_scalar};
use super::norm::{rms_norm_into, rms_norm_ref};
use crate::op::UnaryOp;

/// `act(gate) * up`, the gated MLP's middle (SwiGLU, GeGLU).
pub fn gated_act(act: UnaryOp, gate: &[f32], up: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; gate.len()];
    gated_act_into(act, gate, up, &mut out);
    out
}

/// `gated_act` writing into `out` (`gate`'s length).
pub fn gated_act_into(act: UnaryOp, gate: &[f32], up: &[f32], out: &mut [f32]) {
    unary_into(act, gate, out);
    let mul = |(o, &u): (&mut f32, &f32)| *o *= u;
    if out.len() >= 1 << 16 {
        const CHUNK: usize = 1 << 14;
        super::pool::for_chunks(out, CHUNK, |i, o| {
            let n = o.len();
            o.iter_mut().zip(&up[i * CHUNK..][..n]).for_each(mul)
        });
    } else {
        out.iter_mut().zip(up).for_each(mul);
    }
}

pub fn gated_act_ref(act: UnaryOp, gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| unary_scalar(act, g) * u)
        .collect()
}

/// The residual add and the RMSNorm after it: `h = x + y` and
/// `rms_norm(h, w)`, stacked as `[h; norm]` (twice `x`'s length), so both
/// results are views of one buffer.
pub fn add_rms_norm(x: &[f32], y: &[f32], w: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0; 2 * x.len()];
    add_rms_norm_into(x, y, w, d, eps, &mut out);
    out
}

/// `add_rms_norm` writing into `out` (twice `x`'s length).
pub fn add_rms_norm_into(x: &[f32], y: &[f32], w: &[f32], d: usize, eps: f32, out: &mut [f32]) {
    let (h, normed) = out.split_at_mut(x.len());
    h.iter_mut()
        .zip(x.iter().zip(y))
        .for_each(|(o, (a, b))| *o = a + b);
    rms_norm_into(h, w, d, eps, normed);
}

pub fn add_rms_norm_ref(x: &[f32], y: &[f32], w: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let h: Vec<f32> = x.iter().zip(y).map(|(a, b)| a + b).collect();
    let mut out = rms_norm_ref(&h, w, d, eps);
    out.splice(0..0, h);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use proptest::prelude::*;

    const ACTS: [UnaryOp; 4] = [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Relu,
    ];

    proptest! {
        #[test]
        fn gated_act_matches_reference(n in 1usize..70_000, a in 0usize..4, seed in any::<u64>()) {
            let (g, u) = (vec_f32(seed, n), vec_f32(seed ^ 9, n));
            let act = ACTS[a];
            assert_close(&gated_act(act, &g, &u), &gated_act_ref(act, &g, &u), 1e-5)?;
        }

        #[test]
        fn add_rms_norm_matches_reference(rows in 1usize..9, d in 1usize..300, seed in any::<u64>()) {
            let (x, y) = (vec_f32(seed, rows * d), vec_f32(seed ^ 3, rows * d));
            let w = vec_f32(seed ^ 5, d);
            let got = add_rms_norm(&x, &y, &w, d, 1e-6);
            assert_eq!(got.len(), 2 * rows * d);
            assert_close(&got, &add_rms_norm_ref(&x, &y, &w, d, 1e-6), 1e-5)?;
        }
    }
}
