//! Row invariance: what a step with several rows gives each row is, bit for
//! bit, what a step with that row alone gives. Speculative decoding
//! verifies k proposed tokens in one step of k + 1 rows and keeps the
//! tokens a one-token-at-a-time decode would have chosen; this is what
//! makes that exact (and what lets a server batch slots without changing
//! any answer). Checked for every kernel a decoder step runs with rows in
//! it: the quantized linears (every type, every SIMD path this CPU has,
//! the interleaved layouts the backend repacks into), the float linears
//! (f32, f16, bf16 weights) and attention over a cache (f32, f16, q8_0
//! keys and values) with the causal mask aligned to the end, up to
//! `MAX_ROWS` rows (`cpu::ROW_INVARIANT_STEP`; `--draft-max 16` makes 17)
//! everywhere, and up to `DRAWN_ROWS` where `cpu::chunk_invariant()` (prompt
//! chunks: issue #31).

mod common;
use common::{assert_finite, vals};

use half::{bf16, f16};
use mllm_backends::cpu::attention::{self, Rows, SdpaShape};
use mllm_backends::cpu::linear;
use mllm_backends::cpu::linear_tile::Path;
use mllm_backends::cpu::qlinear::{self, Isa};
use mllm_backends::quant::{self, packed, QuantType};
use mllm_backends::tensor::FloatSlice;
use proptest::prelude::*;

/// The most rows a step may have and keep each row's bits everywhere.
const MAX_ROWS: usize = mllm_backends::cpu::ROW_INVARIANT_STEP;
/// Rows the tests draw: prompt chunks too, beyond `MAX_ROWS` (tiled
/// attention over several query and key blocks, the linears' prefill
/// tiles), kept where `cpu::chunk_invariant()` says this CPU keeps them.
const DRAWN_ROWS: usize = 150;

/// `m` rows, or `MAX_ROWS` at most where this CPU is row-invariant only
/// up to that (Arm's i8mm, no SIMD attention path).
fn rows(m: usize) -> usize {
    if mllm_backends::cpu::chunk_invariant() {
        m
    } else {
        m.min(MAX_ROWS)
    }
}

/// Asserts `many[r]` (rows of `n`) equals `one` bit for bit.
fn same_row(what: &str, many: &[f32], r: usize, one: &[f32]) -> Result<(), TestCaseError> {
    let n = one.len();
    assert_finite(what, one);
    for (j, (a, b)) in many[r * n..(r + 1) * n].iter().zip(one).enumerate() {
        prop_assert!(
            a.to_bits() == b.to_bits(),
            "{what}: row {r} column {j}: {a} in the step with every row, {b} alone"
        );
    }
    Ok(())
}

/// Quantized weights `[n, k]` of `ty`: quantized random values where the
/// type has a quantizer, else random codes with small scales.
fn qweight(ty: QuantType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    if ty.can_quantize() {
        return quant::quantize(ty, &vals(seed, n * k)).expect("quantize");
    }
    // Random bytes, then every f16 that could be a scale made small and
    // finite: a K-quant's d/dmin sit at fixed offsets, but clamping every
    // pair keeps this independent of each layout.
    let mut w: Vec<u8> = vals(seed, ty.bytes_for(k).expect("whole blocks") * n)
        .iter()
        .map(|v| ((v + 1.0) * 127.5) as u8)
        .collect();
    for c in w.chunks_exact_mut(2) {
        let h = f16::from_le_bytes([c[0], c[1]]);
        if !h.is_finite() || h.to_f32().abs() > 4.0 {
            c.copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        }
    }
    let ts = ty.type_size();
    match ty {
        // MXFP4's scale is an e8m0 byte: 2^-12..2^-5 here.
        QuantType::MXFP4 => w.chunks_exact_mut(ts).for_each(|b| b[0] = 116 + b[0] % 8),
        // Q8_KS codes are 7 bits (-64..=63 plus 64).
        QuantType::Q8KS { .. } => w
            .chunks_exact_mut(ts)
            .for_each(|b| b[..256].iter_mut().for_each(|q| *q &= 0x7F)),
        _ => {}
    }
    w
}

fn check_qlinear(
    ty: QuantType,
    m: usize,
    n: usize,
    k: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let plain = qweight(ty, n, k, seed);
    let mut layouts = vec![(ty, plain.clone())];
    if let Some(p) = packed::packed_of(ty) {
        if n.is_multiple_of(16) {
            layouts.push((p, packed::pack(ty, &plain, n, k).expect("pack")));
        }
    }
    let x = vals(seed ^ 0x55, m * k);
    for (ty, w) in &layouts {
        for isa in Isa::available() {
            let what = format!("{ty} {} m={m} n={n} k={k}", isa.name());
            let many = qlinear::linear_with(isa, &x, m, k, w, *ty, n, None).expect("linear");
            for r in 0..m {
                let one = qlinear::linear_with(isa, &x[r * k..(r + 1) * k], 1, k, w, *ty, n, None)
                    .expect("linear");
                same_row(&what, &many, r, &one)?;
            }
        }
    }
    Ok(())
}

fn check_float_linear(m: usize, n: usize, k: usize, seed: u64) -> Result<(), TestCaseError> {
    let w = vals(seed, n * k);
    let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
    let b = vals(seed ^ 9, n);
    let x = vals(seed ^ 0x55, m * k);
    for (name, ws) in [
        ("f32", FloatSlice::F32(&w)),
        ("f16", FloatSlice::F16(&wh)),
        ("bf16", FloatSlice::BF16(&wb)),
    ] {
        for path in Path::available() {
            let what = format!("{name} {path:?} m={m} n={n} k={k}");
            let mut many = vec![0.0; m * n];
            linear::linear_into_with(path, &x, m, k, ws, n, Some(&b), &mut many);
            for r in 0..m {
                let mut one = vec![0.0; n];
                linear::linear_into_with(
                    path,
                    &x[r * k..(r + 1) * k],
                    1,
                    k,
                    ws,
                    n,
                    Some(&b),
                    &mut one,
                );
                same_row(&what, &many, r, &one)?;
            }
        }
    }
    Ok(())
}

/// `sq` queries at the end of `sk` cached positions (causal), against the
/// same query alone over the keys it sees.
fn check_attention(
    sq: usize,
    sk: usize,
    hk: usize,
    group: usize,
    d: usize,
    window: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let hq = hk * group;
    let q = vals(seed, sq * hq * d);
    let kf = vals(seed ^ 1, sk * hk * d);
    let vf = vals(seed ^ 2, sk * hk * d);
    let kh: Vec<f16> = kf.iter().map(|&v| f16::from_f32(v)).collect();
    let vh: Vec<f16> = vf.iter().map(|&v| f16::from_f32(v)).collect();
    // A q8_0 cache holds whole blocks per head.
    let q8 = d.is_multiple_of(32);
    let kq = if q8 {
        quant::quantize(QuantType::Q8_0, &kf).expect("q8_0")
    } else {
        vec![]
    };
    let vq = if q8 {
        quant::quantize(QuantType::Q8_0, &vf).expect("q8_0")
    } else {
        vec![]
    };
    let scale = 1.0 / (d as f32).sqrt();
    let mut caches = vec![
        ("f32", Rows::F32(&kf), Rows::F32(&vf)),
        ("f16", Rows::F16(&kh), Rows::F16(&vh)),
    ];
    if q8 {
        caches.push(("q8_0", Rows::Q8_0(&kq), Rows::Q8_0(&vq)));
    }
    for (name, k, v) in caches {
        let what =
            format!("attention {name} sq={sq} sk={sk} hk={hk} group={group} d={d} window={window}");
        let sh = SdpaShape {
            sq,
            sk,
            hq,
            hk,
            d,
            dv: d,
        };
        let many = attention::sdpa(&q, k, v, &sh, true, window, scale);
        let span = hq * d;
        for r in 0..sq {
            // Query r sees positions up to sk - sq + r: a step of one row
            // with that many keys cached.
            let sk1 = sk - sq + r + 1;
            let sh1 = SdpaShape {
                sq: 1,
                sk: sk1,
                hq,
                hk,
                d,
                dv: d,
            };
            let one = attention::sdpa(
                &q[r * span..(r + 1) * span],
                k,
                v,
                &sh1,
                true,
                window,
                scale,
            );
            same_row(&what, &many, r, &one)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The vectorised maps (exp, sigmoid, SiLU, GELU) give a value the same
    /// bits wherever it sits: in a vector's lanes or in the tail of a
    /// tensor whose length is not a whole number of vectors.
    #[test]
    fn elementwise_maps_do_not_depend_on_position(len in 1usize..60, seed in any::<u64>()) {
        use mllm_backends::cpu::vmath::unary_fast;
        use mllm_backends::UnaryOp;
        let x: Vec<f32> = vals(seed, len).iter().map(|v| v * 12.0).collect();
        for op in [UnaryOp::Exp, UnaryOp::Sigmoid, UnaryOp::Silu, UnaryOp::Gelu, UnaryOp::GeluTanh] {
            let mut all = vec![0.0; len];
            if !unary_fast(op, &x, &mut all) {
                continue; // no vectorised path on this CPU: the scalar map is per value
            }
            for (i, &v) in x.iter().enumerate() {
                let mut one = [0.0];
                unary_fast(op, &[v], &mut one);
                prop_assert!(all[i].to_bits() == one[0].to_bits(), "{op:?}({v}) at {i} of {len}: {} vs alone {}", all[i], one[0]);
            }
        }
    }

    #[test]
    fn quantized_linear_rows_are_invariant(
        kind in 0usize..=QuantType::ALL.len(),
        m in 2usize..=DRAWN_ROWS,
        n16 in 1usize..4,
        odd in any::<bool>(),
        blocks in 1usize..12,
        seed in any::<u64>(),
    ) {
        // Every ggml type, then Q8_KS (the IQ2 types' kernels).
        let ty = QuantType::ALL.get(kind).copied().unwrap_or(QuantType::Q8KS { shift: 3 });
        let k = ty.block_size() * blocks;
        // 16-row groups for the interleaved layouts, or an odd count.
        let n = if odd { 16 * n16 + 3 } else { 16 * n16 };
        check_qlinear(ty, rows(m), n, k, seed)?;
    }

    #[test]
    fn float_linear_rows_are_invariant(
        m in 2usize..=DRAWN_ROWS,
        n in 1usize..40,
        k in 1usize..300,
        seed in any::<u64>(),
    ) {
        check_float_linear(rows(m), n, k, seed)?;
    }

    #[test]
    fn attention_rows_are_invariant(
        sq in 2usize..=DRAWN_ROWS,
        extra in 0usize..140,
        hk in 1usize..3,
        group in 1usize..4,
        d in prop_oneof![1usize..90, Just(32usize), Just(64usize), Just(128usize)],
        window in prop_oneof![Just(0usize), 1usize..40],
        seed in any::<u64>(),
    ) {
        check_attention(rows(sq), rows(sq) + extra, hk, group, d, window, seed)?;
    }
}
