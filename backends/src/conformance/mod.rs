//! Op conformance for every backend, as llama.cpp's `test-backend-ops`
//! does it: each case runs one op on random inputs on the backend under
//! test and on the CPU (whose kernels are checked against their reference
//! twins by the CPU's own tests), and the normalized mean squared error
//! `sum((a - b)^2) / sum(b^2)` of the results must stay under the case's
//! threshold. `mllm test-backend` and `cargo test` run the same cases.
//!
//! Every name of `Op::ALL_NAMES`, and every unary, binary and reduce op of
//! the element-wise tables, must have cases (`missing_ops`), so a new op
//! cannot reach a backend untested. Cases live in one file per op
//! family, beside the kernels they exercise.

mod attention;
mod gen;
mod linear;
mod linear_attn;
mod map;
mod moe;
mod norm;
mod reduce;
mod shape;

use std::time::Instant;

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::dtype::DType;
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::tensor::Tensor;

pub use gen::Gen;

/// Thresholds by what a case computes: exact data movement, f32
/// arithmetic (summation order differs between backends), and results
/// that the CPU computes from int8-quantized activations (its quantized
/// matmuls) while a device computes in f32.
pub const NMSE_EXACT: f64 = 0.0;
pub const NMSE_F32: f64 = 1e-7;
pub const NMSE_F16: f64 = 1e-6;
pub const NMSE_QUANT: f64 = 5e-4;

pub struct Case {
    /// Op and shapes, e.g. `linear q4_0 x[7,64] w[33,64]`.
    pub name: String,
    pub op: Op,
    pub inputs: Vec<Tensor>,
    pub max_nmse: f64,
}

impl Case {
    pub fn new(name: impl Into<String>, op: Op, inputs: Vec<Tensor>, max_nmse: f64) -> Case {
        Case {
            name: name.into(),
            op,
            inputs,
            max_nmse,
        }
    }
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub name: String,
    pub op: &'static str,
    /// `None` when the backend has no kernel for this case's op.
    pub nmse: Option<f64>,
    pub max_nmse: f64,
    pub error: Option<String>,
    pub micros: u128,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.nmse.is_some_and(|e| e <= self.max_nmse)
    }

    /// The backend has no kernel for the case's op (under `--fallback cpu`
    /// the op runs on the host; nothing of the backend was tested).
    pub fn skipped(&self) -> bool {
        self.error.is_none() && self.nmse.is_none()
    }
}

/// Every case, or those of op `only` (a name of `Op::ALL_NAMES`).
pub fn cases(only: Option<&str>) -> Vec<Case> {
    let mut all = vec![];
    all.extend(map::cases());
    all.extend(reduce::cases());
    all.extend(norm::cases());
    all.extend(shape::cases());
    all.extend(linear::cases());
    all.extend(attention::cases());
    all.extend(moe::cases());
    all.extend(linear_attn::cases());
    if let Some(name) = only {
        all.retain(|c| c.op.name() == name);
    }
    all
}

/// Ops without a case: names of `Op::ALL_NAMES`, and `unary NAME`,
/// `binary NAME`, `reduce NAME` for each element-wise op of the tables.
pub fn missing_ops(cases: &[Case]) -> Vec<String> {
    let mut missing: Vec<String> = Op::ALL_NAMES
        .iter()
        .filter(|n| !cases.iter().any(|c| c.op.name() == **n))
        .map(|n| n.to_string())
        .collect();
    let has = |f: &dyn Fn(&Op) -> bool| cases.iter().any(|c| f(&c.op));
    for &u in UnaryOp::ALL {
        if !has(&|op| *op == Op::Unary(u)) {
            missing.push(format!("unary {}", u.name()));
        }
    }
    for &b in BinaryOp::ALL {
        if !has(&|op| *op == Op::Binary(b)) {
            missing.push(format!("binary {}", b.name()));
        }
    }
    for &r in ReduceOp::ALL {
        if !has(&|op| matches!(op, Op::Reduce { op, .. } if *op == r)) {
            missing.push(format!("reduce {}", r.name()));
        }
    }
    missing
}

/// `sum((a - b)^2) / sum(b^2)` (0 when both are all zero). Never NaN, so
/// no `<=` threshold or `max` over cases can let garbage through: a NaN on
/// either side, an infinity facing anything but the same infinity, or
/// different lengths give `+inf`. Equal infinities count as agreeing (a
/// masked score is `-inf` on every backend).
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        if x.is_nan() || y.is_nan() || x.is_infinite() != y.is_infinite() {
            return f64::INFINITY;
        }
        if x.is_infinite() {
            if x != y {
                return f64::INFINITY; // +inf against -inf
            }
            continue; // the same infinity
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    if num == 0.0 {
        0.0
    } else if den == 0.0 {
        f64::INFINITY
    } else {
        // Finite: f32 values squared and summed cannot overflow f64.
        num / den
    }
}

/// Runs `case` on `backend` and on the CPU and compares.
pub fn run_case(backend: &dyn Backend, case: &Case) -> Outcome {
    let mut out = Outcome {
        name: case.name.clone(),
        op: case.op.name(),
        nmse: None,
        max_nmse: case.max_nmse,
        error: None,
        micros: 0,
    };
    if !backend.supports(&case.op) {
        return out;
    }
    let refs: Vec<&Tensor> = case.inputs.iter().collect();
    let want = match CpuBackend.run(&case.op, &refs) {
        Ok(t) => t,
        Err(e) => {
            out.error = Some(format!("the CPU reference failed: {e}"));
            return out;
        }
    };
    let t0 = Instant::now();
    let got = (|| {
        let dev: Vec<Tensor> = case
            .inputs
            .iter()
            .map(|t| backend.upload(t.clone()))
            .collect::<crate::Result<_>>()?;
        let drefs: Vec<&Tensor> = dev.iter().collect();
        let r = backend.run(&case.op, &drefs)?;
        backend.download(&r)
    })();
    out.micros = t0.elapsed().as_micros();
    let got = match got {
        Ok(t) => t,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    if got.shape() != want.shape() {
        out.error = Some(format!(
            "shape {:?}, the CPU gives {:?}",
            got.shape(),
            want.shape()
        ));
        return out;
    }
    if (got.dtype() == DType::I32) != (want.dtype() == DType::I32) {
        out.error = Some(format!(
            "dtype {}, the CPU gives {}",
            got.dtype(),
            want.dtype()
        ));
        return out;
    }
    match (got.to_f32_vec(), want.to_f32_vec()) {
        (Ok(a), Ok(b)) => out.nmse = Some(nmse(&a, &b)),
        (Err(e), _) | (_, Err(e)) => out.error = Some(e.to_string()),
    }
    out
}

/// Runs `cases` and returns their outcomes plus, first, an outcome per op
/// name without cases (failed).
pub fn run_all(backend: &dyn Backend, cases: &[Case]) -> Vec<Outcome> {
    cases.iter().map(|c| run_case(backend, c)).collect()
}

/// One op's cases on a backend (`mllm test-backend`'s table).
#[derive(Clone, Debug, PartialEq)]
pub struct OpSummary {
    pub op: &'static str,
    pub cases: usize,
    /// Cases the backend has no kernel for: they run on the host under
    /// `--fallback cpu`, and are neither passed nor failed here.
    pub host: usize,
    /// The worst NMSE of the cases the backend ran (`None`: it ran none).
    pub worst: Option<f64>,
}

/// The cases per op name, in the order they first appear.
pub fn by_op(outcomes: &[Outcome]) -> Vec<OpSummary> {
    let mut v: Vec<OpSummary> = vec![];
    for o in outcomes {
        let i = match v.iter().position(|s| s.op == o.op) {
            Some(i) => i,
            None => {
                v.push(OpSummary {
                    op: o.op,
                    cases: 0,
                    host: 0,
                    worst: None,
                });
                v.len() - 1
            }
        };
        let s = &mut v[i];
        s.cases += 1;
        if o.skipped() {
            s.host += 1;
        }
        if let Some(e) = o.nmse {
            s.worst = Some(s.worst.map_or(e, |w| w.max(e)));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::nmse;

    const GOOD: [f32; 4] = [1.0, -2.0, 0.5, 3.0];

    fn with(at: usize, v: f32) -> Vec<f32> {
        let mut x = GOOD.to_vec();
        x[at] = v;
        x
    }

    #[test]
    fn nmse_of_finite_values() {
        assert_eq!(nmse(&GOOD, &GOOD), 0.0);
        let e = nmse(&with(0, 1.5), &GOOD);
        assert!(e > 0.0 && e.is_finite(), "{e}");
    }

    #[test]
    fn nmse_fails_on_nan() {
        assert_eq!(nmse(&[f32::NAN; 4], &GOOD), f64::INFINITY);
        assert_eq!(nmse(&GOOD, &with(2, f32::NAN)), f64::INFINITY);
        assert_eq!(nmse(&[f32::NAN; 4], &[f32::NAN; 4]), f64::INFINITY);
    }

    #[test]
    fn nmse_fails_on_an_unmatched_inf() {
        assert_eq!(nmse(&with(1, f32::INFINITY), &GOOD), f64::INFINITY);
        assert_eq!(nmse(&GOOD, &with(1, f32::NEG_INFINITY)), f64::INFINITY);
        // Opposite infinities are not "equal infinities".
        assert_eq!(
            nmse(&with(1, f32::INFINITY), &with(1, f32::NEG_INFINITY)),
            f64::INFINITY
        );
        // The same infinity (a masked position) agrees.
        assert_eq!(
            nmse(&with(1, f32::NEG_INFINITY), &with(1, f32::NEG_INFINITY)),
            0.0
        );
    }

    #[test]
    fn nmse_fails_on_a_length_mismatch() {
        // `zip` alone would compare the common prefix.
        assert_eq!(nmse(&GOOD, &GOOD[..3]), f64::INFINITY);
    }

    #[test]
    fn nmse_fails_on_an_all_zero_output() {
        assert_eq!(nmse(&[0.0; 4], &GOOD), 1.0);
        assert!(nmse(&[0.0; 4], &GOOD) > super::NMSE_QUANT);
    }
}
