//! Quantized weights against one activation: a plain linear (one part) or
//! a merged q/k/v or gate/up linear (several). The activations are
//! quantized once per kind the weights need, and the row tasks of every
//! part go to the pool in one dispatch, each writing its columns of the
//! output in place. The quantized activations live in a per-thread scratch
//! that is reused from call to call, so a decode or prefill step allocates
//! nothing here once the buffers have grown.

use std::cell::Cell;

use super::act_quant::{ActQ8, ActQ8K};
use super::w8a8::ActTok;
use super::{
    block32, iq4_nl, k_quants, q4_0, q4_1, q5, q8_0, w4a16, w8a8, x16, Isa, Out, SendPtr, PAR_MACS,
};
use crate::quant::QuantType;

/// One weight of a product: `n` rows of `ty` blocks (`w`, checked by the
/// caller to hold exactly that).
#[derive(Clone, Copy)]
pub struct Part<'a> {
    pub w: &'a [u8],
    pub ty: QuantType,
    pub n: usize,
}

impl Part<'_> {
    fn row_bytes(&self, k: usize) -> usize {
        k / self.ty.block_size() * self.ty.type_size()
    }
}

#[derive(Default)]
struct Scratch {
    q8: ActQ8,
    q8k: ActQ8K,
    tok: ActTok,
}

thread_local! {
    static SCRATCH: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

/// Weight rows per parallel task: about four tasks per thread, a multiple
/// of the row tiles (`unit`: 4, or 16 for interleaved weights, whose tasks
/// must start at a group).
fn rows_per_task(n: usize, unit: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    (n.div_ceil(threads * 4)).next_multiple_of(unit).max(unit)
}

/// `out [m][nr] = x @ w^T` for `nr` rows of part `p`'s weight `w`.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm(
    isa: Isa,
    p: &Part,
    w: &[u8],
    nr: usize,
    s: &Scratch,
    x: &[f32],
    k: usize,
    m: usize,
    out: Out,
) {
    match p.ty {
        QuantType::Q4_0 => block32::gemm::<q4_0::Q4_0>(isa, w, nr, &s.q8, out),
        QuantType::Q4_1 => block32::gemm::<q4_1::Q4_1>(isa, w, nr, &s.q8, out),
        QuantType::Q8_0 => block32::gemm::<q8_0::Q8_0>(isa, w, nr, &s.q8, out),
        QuantType::Q4_K
        | QuantType::Q5_K
        | QuantType::Q6_K
        | QuantType::IQ4_XS
        | QuantType::Q2_K
        | QuantType::Q3_K
        | QuantType::TQ2_0 => {
            let kind = k_quants::Kind::of(p.ty).expect("a K-quant type");
            k_quants::gemm(kind, isa, w, nr, &s.q8k, out)
        }
        QuantType::Q6KScaled { .. } | QuantType::Q8KS { .. } => {
            let kind = k_quants::Kind::of(p.ty).expect("a K-quant type");
            k_quants::gemm(kind, isa, w, nr, &s.q8k, out);
            // The plain Q6_K / Q8_KS product times a power of two: exact,
            // so the same as kernels reading `d` scaled by it.
            let f = p.ty.value_scale();
            for i in 0..m {
                for j in 0..nr {
                    *out.at(i, j) *= f;
                }
            }
        }
        QuantType::Q5_0 => block32::gemm::<q5::Q5_0>(isa, w, nr, &s.q8, out),
        QuantType::Q5_1 => block32::gemm::<q5::Q5_1>(isa, w, nr, &s.q8, out),
        QuantType::IQ4_NL => block32::gemm::<iq4_nl::IQ4NL>(isa, w, nr, &s.q8, out),
        QuantType::MXFP4 => block32::gemm::<iq4_nl::Mxfp4>(isa, w, nr, &s.q8, out),
        QuantType::W8A8 { .. } => w8a8::gemm(isa, w, nr, &s.tok, out),
        QuantType::W4A16 { group } => w4a16::gemm(isa, group as usize, w, nr, k, x, m, out),
        QuantType::Q4_0x16 => x16::gemm::<{ x16::Q4_0 }>(isa, w, nr, &s.q8, out),
        QuantType::Q4_1x16 => x16::gemm::<{ x16::Q4_1 }>(isa, w, nr, &s.q8, out),
        QuantType::Q8_0x16 => x16::gemm::<{ x16::Q8_0 }>(isa, w, nr, &s.q8, out),
        QuantType::IQ4_NLx16 => x16::gemm::<{ x16::IQ4_NL }>(isa, w, nr, &s.q8, out),
        QuantType::Q5_0x16 => x16::gemm::<{ x16::Q5_0 }>(isa, w, nr, &s.q8, out),
        QuantType::Q5_1x16 => x16::gemm::<{ x16::Q5_1 }>(isa, w, nr, &s.q8, out),
        QuantType::MXFP4x16 => x16::gemm::<{ x16::MXFP4 }>(isa, w, nr, &s.q8, out),
    }
}

/// `out` = `x [m, k] @ w_i^T` for every part, laid back to back (`[m, n_0]`
/// then `[m, n_1]` ...). `isa` must be available; shapes are the caller's
/// to check.
pub(super) fn linear_parts(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    parts: &[Part],
    out: &mut [f32],
) {
    let total: usize = parts.iter().map(|p| p.n).sum();
    debug_assert_eq!(out.len(), m * total);
    if m == 0 || total == 0 {
        return;
    }
    let mut s = SCRATCH.with(|c| c.take()).unwrap_or_default();
    let needs = |f: fn(QuantType) -> bool| parts.iter().any(|p| f(p.ty));
    if needs(|t| {
        matches!(
            t,
            QuantType::Q4_0
                | QuantType::Q4_1
                | QuantType::Q8_0
                | QuantType::Q5_0
                | QuantType::Q5_1
                | QuantType::IQ4_NL
                | QuantType::MXFP4
                | QuantType::Q4_0x16
                | QuantType::Q4_1x16
                | QuantType::Q8_0x16
                | QuantType::IQ4_NLx16
                | QuantType::Q5_0x16
                | QuantType::Q5_1x16
                | QuantType::MXFP4x16
        )
    }) {
        s.q8.quantize_into(x, m, k);
    }
    if needs(QuantType::has_super_blocks) {
        s.q8k.quantize_into(x, m, k);
    }
    if needs(|t| matches!(t, QuantType::W8A8 { .. })) {
        s.tok.quantize_into(x, m, k);
    }
    dispatch(isa, x, m, k, parts, &s, out);
    SCRATCH.with(|c| c.set(Some(s)));
}

fn dispatch(isa: Isa, x: &[f32], m: usize, k: usize, parts: &[Part], s: &Scratch, out: &mut [f32]) {
    let total: usize = parts.iter().map(|p| p.n).sum();
    // Every write below stays inside `out`'s m * total values: part `p`'s
    // block `[m][p.n]` starts at m times the rows of the parts before it.
    assert!(out.len() >= m * total, "linear_parts: output too small");
    let unit = if parts.iter().any(|p| p.ty.is_packed()) {
        crate::quant::packed::ROWS
    } else if k_quants::sixteen_rows(isa, m) && parts.iter().any(|p| p.ty.has_super_blocks()) {
        // Tasks of whole 16-row panels (`k_quants::panel16`).
        16
    } else {
        4
    };
    let tr = rows_per_task(total, unit);
    if m * total * k < PAR_MACS || tr >= total {
        let mut off = 0;
        for p in parts {
            let block = &mut out[off..off + m * p.n];
            let at = Out {
                ptr: block.as_mut_ptr(),
                ld: p.n,
            };
            // SAFETY: the part's whole block, borrowed here.
            unsafe { gemm(isa, p, p.w, p.n, s, x, k, m, at) };
            off += m * p.n;
        }
        return;
    }
    // Task t: rows j0.. of one part (tasks never straddle two parts).
    let tasks: usize = parts.iter().map(|p| p.n.div_ceil(tr)).sum();
    // Part, first row in it, and that row's index over all parts.
    let locate = |mut t: usize| {
        let mut before = 0;
        for (i, p) in parts.iter().enumerate() {
            let here = p.n.div_ceil(tr);
            if t < here {
                return (i, t * tr, before + t * tr);
            }
            t -= here;
            before += p.n;
        }
        unreachable!("task index past the last part")
    };
    let out_ptr = SendPtr(out.as_mut_ptr());
    crate::cpu::pool::for_each(tasks, |t| {
        let (pi, j0, g0) = locate(t);
        let p = &parts[pi];
        let nr = tr.min(p.n - j0);
        let rb = p.row_bytes(k);
        let wc = &p.w[j0 * rb..(j0 + nr) * rb];
        // Columns j0..j0 + nr of the part's block, which starts at m *
        // (g0 - j0): cells no other task writes, inside `out` (asserted
        // above).
        let at = Out {
            ptr: unsafe { out_ptr.get().add(m * (g0 - j0) + j0) },
            ld: p.n,
        };
        // SAFETY: as just said.
        unsafe { gemm(isa, p, wc, nr, s, x, k, m, at) };
    });
}
