//! Rotary embeddings and attention, decomposed into standard ops.
//!
//! Attention: per key head, `softmax(q kᵀ · scale + mask) v` with MatMul,
//! Mul, Where and Softmax. Grouped-query attention needs no Expand: query
//! head `h` reads key head `h / g`, so the `[hq, sq, d]` queries reshaped
//! to `[hk, g·sq, d]` line each group up with its key head (rank ≤ 4
//! throughout). The KV cache as graph I/O (`cached_sdpa`): the past buffer
//! (`c` rows, the first `past_len` valid) and the new rows are joined by
//! Concat; the mask admits past row `j` when `j < past_len` (a comparison
//! against the `past_len` input) and new row `j` for query `i` when
//! `j <= s - sq + i` (causal; a constant). Past rows beyond `past_len`
//! are never read into the result, whatever they hold.

use mllm_backends::DType;

use super::super::builder::Builder;
use super::super::proto::attr_int;
use super::Ctx;
use crate::ir::ValueId;
use crate::{GraphError, Result};

/// `x [s, h, d]` with `cos`, `sin` `[s, d/2]`, the first half of `d`
/// paired with the second ("rotate half").
pub fn rope(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let (x, cos, sin) = (c.float(ins[0])?, c.float(ins[1])?, c.float(ins[2])?);
    let (s, d) = (c.meta(ins[0]).shape[0], c.meta(ins[0]).shape[2]);
    let half = d / 2;
    let b = &mut c.b;
    let x1 = b.slice(&x, 2, 0, half);
    let x2 = b.slice(&x, 2, half, d);
    let cs = b.reshape(&cos, &[s, 1, half]);
    let sn = b.reshape(&sin, &[s, 1, half]);
    let (a, bb) = (b.binary("Mul", &x1, &cs), b.binary("Mul", &x2, &sn));
    let lo = b.binary("Sub", &a, &bb);
    let (a, bb) = (b.binary("Mul", &x2, &cs), b.binary("Mul", &x1, &sn));
    let hi = b.binary("Add", &a, &bb);
    Ok(b.concat(&[&lo, &hi], 2))
}

/// The shapes of one attention.
struct Dims {
    sq: usize,
    hq: usize,
    hk: usize,
    d: usize,
    dv: usize,
    /// Keys attended over (past capacity plus new rows when cached).
    sk: usize,
}

/// What a masked score becomes: the lowest finite f32, so softmax gives it
/// exactly zero weight without infinities in the graph.
const MASKED: f32 = f32::MIN;

/// `q [sq, hq, d]`, `k [sk, hk, d]`, `v [sk, hk, dv]`, optional boolean
/// `mask [sq, sk]` (true: attend) -> `[sq, hq, dv]`.
fn attend(
    b: &mut Builder,
    q: &str,
    k: &str,
    v: &str,
    n: &Dims,
    scale: f32,
    mask: Option<&str>,
) -> String {
    if n.sk == 0 {
        // No keys: nothing to attend to; the CPU gives zeros (and a softmax
        // over an empty axis is not something runtimes agree on).
        return b.f32s(&[n.sq, n.hq, n.dv], &vec![0.0; n.sq * n.hq * n.dv]);
    }
    let g = n.hq / n.hk;
    let qt = b.transpose(q, &[1, 0, 2]);
    let qt = b.reshape(&qt, &[n.hk, g * n.sq, n.d]);
    let kt = b.transpose(k, &[1, 2, 0]);
    let scores = b.binary("MatMul", &qt, &kt);
    let sc = b.f32_scalar(scale);
    let mut scores = b.binary("Mul", &scores, &sc);
    if let Some(m) = mask {
        let grouped = b.reshape(&scores, &[n.hk, g, n.sq, n.sk]);
        let low = b.f32_scalar(MASKED);
        let masked = b.node("Where", &[m, &grouped, &low], vec![]);
        scores = b.reshape(&masked, &[n.hk, g * n.sq, n.sk]);
    }
    let p = b.node("Softmax", &[&scores], vec![attr_int("axis", -1)]);
    let vt = b.transpose(v, &[1, 0, 2]);
    let o = b.binary("MatMul", &p, &vt);
    let o = b.reshape(&o, &[n.hq, n.sq, n.dv]);
    b.transpose(&o, &[1, 0, 2])
}

/// Query `i` of the last `sq` positions sees new key `j` when
/// `j <= s - sq + i` (row-major `[sq, s]`).
fn causal_mask(sq: usize, s: usize) -> Vec<bool> {
    (0..sq)
        .flat_map(|i| (0..s).map(move |j| j + sq <= s + i))
        .collect()
}

fn dims(c: &Ctx, q: ValueId, k: ValueId, v: ValueId, sk: usize) -> Dims {
    let (qm, km, vm) = (c.meta(q), c.meta(k), c.meta(v));
    Dims {
        sq: qm.shape[0],
        hq: qm.shape[1],
        hk: km.shape[1],
        d: qm.shape[2],
        dv: vm.shape[2],
        sk,
    }
}

pub fn sdpa(c: &mut Ctx, ins: &[ValueId], causal: bool, scale: f32) -> Result<String> {
    let (q, k, v) = (c.float(ins[0])?, c.float(ins[1])?, c.float(ins[2])?);
    let n = dims(c, ins[0], ins[1], ins[2], c.meta(ins[1]).shape[0]);
    let mask = causal.then(|| c.b.bools(&[n.sq, n.sk], &causal_mask(n.sq, n.sk)));
    Ok(attend(&mut c.b, &q, &k, &v, &n, scale, mask.as_deref()))
}

pub fn cached_sdpa(c: &mut Ctx, ins: &[ValueId], causal: bool, scale: f32) -> Result<String> {
    for &i in &ins[3..5] {
        let dt = c.meta(i).dtype;
        if dt != DType::F32 {
            return Err(GraphError(format!(
                "the KV cache is {dt}; the export takes an f32 cache"
            )));
        }
    }
    let (q, k, v) = (c.float(ins[0])?, c.float(ins[1])?, c.float(ins[2])?);
    let (pk, pv) = (c.float(ins[3])?, c.float(ins[4])?);
    let len = c.value(ins[5])?;
    let (cap, s) = (c.meta(ins[3]).shape[0], c.meta(ins[1]).shape[0]);
    let n = dims(c, ins[0], ins[1], ins[2], cap + s);
    let b = &mut c.b;
    // Past rows: valid below past_len.
    let rows: Vec<i32> = (0..cap as i32).collect();
    let rows = b.i32s(&[cap], &rows);
    let valid_rows = b.binary("Less", &rows, &len);
    // Rows past past_len may hold anything (stale rows, NaN): their scores
    // are masked below, and their values zeroed, since a zero weight times
    // NaN is still NaN.
    let per_row = b.reshape(&valid_rows, &[cap, 1, 1]);
    let zero = b.f32_scalar(0.0);
    let pv = b.node("Where", &[&per_row, &pv, &zero], vec![]);
    let keys = b.concat(&[&pk, &k], 0);
    let values = b.concat(&[&pv, &v], 0);
    let valid = b.reshape(&valid_rows, &[1, cap]);
    let shape = b.shape(&[n.sq, cap]);
    let past = b.node("Expand", &[&valid, &shape], vec![]);
    let new = if causal {
        causal_mask(n.sq, s)
    } else {
        vec![true; n.sq * s]
    };
    let new = b.bools(&[n.sq, s], &new);
    let mask = b.concat(&[&past, &new], 1);
    Ok(attend(b, &q, &keys, &values, &n, scale, Some(&mask)))
}

#[cfg(test)]
mod tests {
    use super::causal_mask;

    #[test]
    fn causal_mask_aligns_queries_to_the_end() {
        // 2 queries over 3 keys: query 0 is position 1, query 1 position 2.
        assert_eq!(causal_mask(2, 3), [true, true, false, true, true, true]);
    }
}
