//! Unary maps and broadcasting binary ops.

use rayon::prelude::*;

pub use crate::infer::broadcast::{broadcast_shape, broadcast_strides};
use crate::op::{BinaryOp, UnaryOp};

pub fn unary_scalar(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        // 1 + erf(z) as erfc(-z): no cancellation for far-negative x.
        UnaryOp::Gelu => 0.5 * x * libm::erfcf(-x * std::f32::consts::FRAC_1_SQRT_2),
        UnaryOp::GeluTanh => {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::Softplus if x > 20.0 => x,
        UnaryOp::Softplus => x.exp().ln_1p(),
    }
}

/// `op` over `x`: the vectorised maps of `vmath` where the CPU has them
/// (their twin is `unary_scalar`), in parallel chunks for large inputs.
pub fn unary(op: UnaryOp, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    unary_into(op, x, &mut out);
    out
}

/// `unary` writing into `out` (`x`'s length).
pub fn unary_into(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    const CHUNK: usize = 1 << 14;
    let fast = |(o, x): (&mut [f32], &[f32])| {
        if !super::vmath::unary_fast(op, x, o) {
            for (o, &v) in o.iter_mut().zip(x) {
                *o = unary_scalar(op, v);
            }
        }
    };
    if x.len() >= 1 << 16 {
        super::pool::for_chunks(out, CHUNK, |i, o| {
            let n = o.len();
            fast((o, &x[i * CHUNK..][..n]))
        });
    } else {
        fast((out, x));
    }
}

pub fn binary_f32(op: BinaryOp, a: f32, b: f32) -> f32 {
    let t = |c: bool| if c { 1.0 } else { 0.0 };
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Eq => t(a == b),
        BinaryOp::Ne => t(a != b),
        BinaryOp::Lt => t(a < b),
        BinaryOp::Le => t(a <= b),
        BinaryOp::Gt => t(a > b),
        BinaryOp::Ge => t(a >= b),
    }
}

/// Integer arithmetic; `None` for a division by zero.
pub fn binary_i32(op: BinaryOp, a: i32, b: i32) -> Option<i32> {
    Some(match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::Div => {
            if b == 0 {
                return None;
            }
            // Floor division, as `//` on script ints (Python's rule).
            let q = a.wrapping_div(b);
            if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
                q - 1
            } else {
                q
            }
        }
        BinaryOp::Pow => a.wrapping_pow(b.max(0) as u32),
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Eq => (a == b) as i32,
        BinaryOp::Ne => (a != b) as i32,
        BinaryOp::Lt => (a < b) as i32,
        BinaryOp::Le => (a <= b) as i32,
        BinaryOp::Gt => (a > b) as i32,
        BinaryOp::Ge => (a >= b) as i32,
    })
}

/// Generic broadcast walk: calls `f(out_index, a_index, b_index)`.
pub fn for_each_broadcast(
    out: &[usize],
    sa: &[usize],
    sb: &[usize],
    mut f: impl FnMut(usize, usize, usize),
) {
    let n: usize = out.iter().product();
    let r = out.len();
    let mut idx = vec![0usize; r];
    let (mut ia, mut ib) = (0usize, 0usize);
    for o in 0..n {
        f(o, ia, ib);
        for d in (0..r).rev() {
            idx[d] += 1;
            ia += sa[d];
            ib += sb[d];
            if idx[d] < out[d] {
                break;
            }
            ia -= sa[d] * out[d];
            ib -= sb[d] * out[d];
            idx[d] = 0;
        }
    }
}

/// Reference broadcasting binary op over f32.
pub fn binary_ref(
    op: BinaryOp,
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
    out: &[usize],
) -> Vec<f32> {
    let (sa, sb) = (broadcast_strides(ash, out), broadcast_strides(bsh, out));
    let mut res = vec![0.0; out.iter().product()];
    for_each_broadcast(out, &sa, &sb, |o, i, j| res[o] = binary_f32(op, a[i], b[j]));
    res
}

/// Fast broadcasting binary op: contiguous fast paths for equal shapes, a
/// scalar side, and a row vector broadcast over rows; the generic walk otherwise.
/// `binary` writing into `out` (the broadcast shape's length).
pub fn binary_into(
    op: BinaryOp,
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
    shape: &[usize],
    out: &mut [f32],
) {
    let n = out.len();
    if ash == bsh {
        let f = |(o, (&x, &y)): (&mut f32, (&f32, &f32))| *o = binary_f32(op, x, y);
        if n >= 1 << 16 {
            const CHUNK: usize = 1 << 14;
            super::pool::for_chunks(out, CHUNK, |i, o| {
                let n = o.len();
                let (a, b) = (&a[i * CHUNK..][..n], &b[i * CHUNK..][..n]);
                o.iter_mut().zip(a.iter().zip(b)).for_each(f);
            });
        } else {
            out.iter_mut().zip(a.iter().zip(b)).for_each(f);
        }
    } else if b.len() == 1 && a.len() == n {
        out.iter_mut()
            .zip(a)
            .for_each(|(o, &x)| *o = binary_f32(op, x, b[0]));
    } else if a.len() == 1 && b.len() == n {
        out.iter_mut()
            .zip(b)
            .for_each(|(o, &y)| *o = binary_f32(op, a[0], y));
    } else {
        out.copy_from_slice(&binary(op, a, ash, b, bsh, shape));
    }
}

pub fn binary(
    op: BinaryOp,
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
    out: &[usize],
) -> Vec<f32> {
    let n: usize = out.iter().product();
    if ash == bsh {
        return if n >= 1 << 16 {
            a.par_iter()
                .zip(b)
                .map(|(&x, &y)| binary_f32(op, x, y))
                .collect()
        } else {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| binary_f32(op, x, y))
                .collect()
        };
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return a.iter().map(|&x| binary_f32(op, x, y)).collect();
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return b.iter().map(|&y| binary_f32(op, x, y)).collect();
    }
    let last = *out.last().unwrap_or(&1);
    if a.len() == n && b.len() == last && last > 0 && bsh.last() == Some(&last) {
        let mut res = vec![0.0; n];
        for (ro, ra) in res.chunks_mut(last).zip(a.chunks(last)) {
            for i in 0..last {
                ro[i] = binary_f32(op, ra[i], b[i]);
            }
        }
        return res;
    }
    binary_ref(op, a, ash, b, bsh, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use proptest::prelude::*;

    fn shape_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
        proptest::collection::vec((1usize..5, any::<bool>(), any::<bool>()), 0..4).prop_map(
            |dims| {
                let a: Vec<usize> = dims
                    .iter()
                    .map(|&(d, ba, _)| if ba { 1 } else { d })
                    .collect();
                let b: Vec<usize> = dims
                    .iter()
                    .map(|&(d, _, bb)| if bb { 1 } else { d })
                    .collect();
                (a, b)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn binary_matches_reference((ash, bsh) in shape_pair(), drop_a in 0usize..2, seed in any::<u64>(), opi in 0usize..5) {
            let ash = ash[drop_a.min(ash.len())..].to_vec();
            let op = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Lt][opi];
            let out = broadcast_shape(&ash, &bsh).unwrap();
            let a = vec_f32(seed, ash.iter().product());
            let b = vec_f32(seed ^ 9, bsh.iter().product());
            assert_close(&binary(op, &a, &ash, &b, &bsh, &out), &binary_ref(op, &a, &ash, &b, &bsh, &out), 0.0)?;
        }

        /// Every unary map of the op table, vectorised path and scalar
        /// tail (odd lengths), against the table's f64 twin over the
        /// map's domain: a new map is covered here without a line.
        #[test]
        fn every_unary_map_matches_its_twin(opi in 0..UnaryOp::ALL.len(), n in 0usize..300, seed in any::<u64>()) {
            let op = UnaryOp::ALL[opi];
            let (lo, hi) = op.domain();
            let xs: Vec<f32> = vec_f32(seed, n)
                .iter()
                .map(|&u| (lo + (hi - lo) * (u as f64 * 0.25 + 0.5)) as f32) // u in [-2, 2)
                .collect();
            let got = unary(op, &xs);
            for (&x, &y) in xs.iter().zip(&got) {
                let want = op.reference(x as f64);
                let tol = 2e-6 * want.abs().max(1.0);
                prop_assert!(
                    (y as f64 - want).abs() <= tol,
                    "{op:?}({x}) = {y}, twin {want}"
                );
            }
        }

        #[test]
        fn silu_and_gelu_are_sane(x in -20.0f32..20.0) {
            let s = unary_scalar(UnaryOp::Silu, x);
            prop_assert!((s - x * unary_scalar(UnaryOp::Sigmoid, x)).abs() <= 1e-5 * (1.0 + x.abs()));
            let g = unary_scalar(UnaryOp::Gelu, x);
            let gt = unary_scalar(UnaryOp::GeluTanh, x);
            prop_assert!((g - gt).abs() < 2e-3 * (1.0 + x.abs()));
        }
    }
}
