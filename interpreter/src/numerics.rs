//! `--check-numerics`: finding the first NaN or infinity in an op's output,
//! and the error that names the op, the tensor's shape and where the value
//! sits. The evaluator attaches the script line (the error passes through
//! `Interp::op` like any op failure), so the report points at the call that
//! produced the value. Also the check the generation loop runs on logits
//! before sampling, so a broken model stops with an error instead of
//! sampling from NaN.

use mllm_backends::{BackendError, DType, FloatSlice, Op, Tensor};

/// The first non-finite value of a float tensor on the host: its flat index
/// and value. Integer, quantized and device tensors have none to report
/// (the caller downloads device tensors first).
pub fn first_non_finite(t: &Tensor) -> Option<(usize, f32)> {
    if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) || t.device().is_some() {
        return None;
    }
    let floats = t.floats().ok()?;
    match floats {
        FloatSlice::F32(s) => s.iter().position(|v| !v.is_finite()).map(|i| (i, s[i])),
        FloatSlice::F16(s) => s
            .iter()
            .position(|v| !v.is_finite())
            .map(|i| (i, s[i].to_f32())),
        FloatSlice::BF16(s) => s
            .iter()
            .position(|v| !v.is_finite())
            .map(|i| (i, s[i].to_f32())),
    }
}

/// `NaN`, `inf` or `-inf`.
pub fn describe_value(v: f32) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// The multi-dimensional index of flat position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[i] = flat % d;
            flat /= d;
        }
    }
    idx
}

/// The op as a person reads it: `linear`, `exp`, `div`, ...
fn op_label(op: &Op) -> String {
    match op {
        Op::Unary(u) => format!("{u:?}").to_lowercase(),
        Op::Binary(b) => format!("{b:?}").to_lowercase(),
        other => other.name().to_string(),
    }
}

/// Checks `out`, the result of `op` on `inputs` (all on the host); the
/// error says which value is non-finite, where, and whether an input
/// already held one (a weight or a model input, since every op's output is
/// checked as it is made).
pub fn check_op_output(op: &Op, inputs: &[&Tensor], out: &Tensor) -> Result<(), BackendError> {
    let Some((at, v)) = first_non_finite(out) else {
        return Ok(());
    };
    let culprit = inputs
        .iter()
        .enumerate()
        .find_map(|(i, t)| first_non_finite(t).map(|(_, v)| (i, t, v)));
    let origin = match culprit {
        Some((i, t, iv)) => format!(
            "; input {} ({} {:?}) already held {}: a checkpoint weight or a model input",
            i + 1,
            t.dtype().name(),
            t.shape(),
            describe_value(iv)
        ),
        None => "; its inputs were finite".to_string(),
    };
    Err(BackendError::NonFinite {
        op: op.name(),
        msg: format!(
            "non-finite value: `{}` produced {} at index {:?} of its {} {:?} output{origin}",
            op_label(op),
            describe_value(v),
            unravel(at, out.shape()),
            out.dtype().name(),
            out.shape(),
        ),
    })
}

/// Checks logits before a token is chosen from them: `Err` names the first
/// non-finite value and its token id.
///
/// Runs on every row a token is chosen from, so the common case (all
/// finite) is a branch-free pass over the exponent bits, which vectorizes;
/// only a row that fails is searched for its first bad value.
pub fn check_logits(logits: &[f32]) -> Result<(), String> {
    const EXP: u32 = 0x7f80_0000;
    let bad = logits
        .chunks(256)
        .any(|c| c.iter().fold(false, |b, v| b | (v.to_bits() & EXP == EXP)));
    if !bad {
        return Ok(());
    }
    match logits.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => {
            let bad = logits.iter().filter(|v| !v.is_finite()).count();
            Err(format!(
                "the model's logits hold {} at token {i} ({bad} of {} values are not finite); \
                 no token was sampled. The weights or the computation are broken: \
                 `--check-numerics` finds the op that first made such a value",
                describe_value(logits[i]),
                logits.len()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mllm_backends::{Backend, BinaryOp, CpuBackend};

    #[test]
    fn finds_the_first_non_finite_value_and_its_index() {
        let t = Tensor::from_f32(vec![1.0, 2.0, f32::NAN, f32::INFINITY], vec![2, 2]).expect("t");
        let (i, v) = first_non_finite(&t).expect("found");
        assert_eq!(i, 2);
        assert!(v.is_nan());
        assert_eq!(unravel(i, &[2, 2]), vec![1, 0]);
        let ok = Tensor::from_f32(vec![1.0, -3.0], vec![2]).expect("ok");
        assert!(first_non_finite(&ok).is_none());
        let ints = Tensor::from_i32(vec![1, 2], vec![2]).expect("ints");
        assert!(first_non_finite(&ints).is_none());
    }

    #[test]
    fn a_division_by_zero_is_reported_with_op_shape_and_origin() {
        let a = Tensor::from_f32(vec![1.0, 0.0, 2.0], vec![1, 3]).expect("a");
        let b = Tensor::from_f32(vec![1.0, 0.0, 4.0], vec![1, 3]).expect("b");
        let op = Op::Binary(BinaryOp::Div);
        let out = CpuBackend.run(&op, &[&a, &b]).expect("div");
        let err = check_op_output(&op, &[&a, &b], &out).expect_err("0/0 is NaN");
        let msg = err.to_string();
        assert!(msg.contains("`div` produced NaN at index [0, 1]"), "{msg}");
        assert!(msg.contains("f32 [1, 3]"), "{msg}");
        assert!(msg.contains("its inputs were finite"), "{msg}");
        let inf = Tensor::from_f32(vec![f32::INFINITY, 1.0, 1.0], vec![1, 3]).expect("inf");
        let out = CpuBackend.run(&op, &[&inf, &b]).expect("div");
        let msg = check_op_output(&op, &[&inf, &b], &out)
            .expect_err("inf/1")
            .to_string();
        assert!(
            msg.contains("input 1 (f32 [1, 3]) already held inf"),
            "{msg}"
        );
    }

    #[test]
    fn logits_with_nan_are_refused() {
        assert!(check_logits(&[0.5, -2.0]).is_ok());
        let msg = check_logits(&[0.5, f32::NAN, f32::NEG_INFINITY]).expect_err("nan");
        assert!(msg.contains("NaN at token 1 (2 of 3 values"), "{msg}");
    }

    /// The chunked pass must see a bad value anywhere: in every chunk of
    /// 256, at either edge of one, and in a short last chunk.
    #[test]
    fn a_bad_logit_is_found_at_every_index() {
        let n = 256 * 2 + 37;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for i in 0..n {
                let mut l: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 60.0).collect();
                l[i] = bad;
                let msg = check_logits(&l).expect_err("bad value");
                assert!(msg.contains(&format!("at token {i} (1 of {n}")), "{msg}");
            }
        }
        let big: Vec<f32> = vec![f32::MAX, f32::MIN, f32::MIN_POSITIVE, -0.0, 1e-45];
        assert!(check_logits(&big).is_ok());
    }
}
