//! `Op::MoeLinear` on the CPU backend against its decomposition and its
//! reference twin (`cpu::moe::moe_linear_ref`), over random shapes: t 1..40
//! tokens, s 1..4 slots, e 1..9 experts of which a random subset is ever
//! picked, odd n, k not a multiple of 32 for float weights (whole blocks
//! for quantized ones), shared and per-slot activations, stacked and listed
//! weights, every weight dtype `Op::Linear` takes (plus the interleaved
//! layouts `prepare_weight` makes of stacked experts):
//! - bit for bit, each row equals `Op::Linear` of its expert over that
//!   expert's rows (the same kernels, the same activation quantization);
//! - the twin within the activation rounding (quantized weights) or float
//!   rounding (float weights).
//!
//! `cargo test -p mllm-backends --release --test moe -- --ignored --nocapture`
//! runs the timing at a Qwen3-MoE-like size.

mod common;
use common::{assert_finite, vals};

use mllm_backends::cpu::moe::moe_linear_ref;
use mllm_backends::quant::{self, packed, QuantType};
use mllm_backends::{Backend, CpuBackend, Op, Tensor};
use proptest::prelude::*;

/// Weight kinds: f32, f16, bf16, q4_0, q4_1, q8_0, q6_K, w8a8, and q4_0 /
/// q8_0 interleaved (stacked experts of whole 16-row groups only).
const KINDS: usize = 10;

fn kind_k(kind: usize, blocks: usize, odd: usize) -> usize {
    match kind {
        0..=2 => 32 * blocks + odd % 32,
        6 => 256 * blocks.div_ceil(4),
        _ => 32 * blocks,
    }
}

/// Random Q6_K super-blocks with small scales (there is no Q6_K quantizer).
fn q6k_bytes(seed: u64, values: usize) -> Vec<u8> {
    let blocks = values / 256;
    let r = vals(seed, blocks * 209);
    let mut out = Vec::with_capacity(blocks * 210);
    for b in 0..blocks {
        let v = &r[b * 209..(b + 1) * 209];
        out.extend(v[..192].iter().map(|x| ((x + 1.0) * 127.5) as u8));
        out.extend(v[192..208].iter().map(|x| (x * 31.0) as i8 as u8));
        let d = half::f16::from_f32(0.0005 + 0.001 * v[208].abs());
        out.extend(d.to_le_bytes());
    }
    out
}

/// A weight of `shape` (`[n, k]` or `[e, n, k]`) of `kind`.
fn weight(kind: usize, shape: &[usize], seed: u64) -> Tensor {
    let count: usize = shape.iter().product();
    let k = shape[shape.len() - 1];
    let v = vals(seed, count);
    let q = |ty: QuantType| {
        Tensor::from_quant(
            quant::quantize(ty, &v).expect("quantize"),
            ty,
            shape.to_vec(),
        )
        .expect("tensor")
    };
    let packed = |ty: QuantType| {
        let plain = quant::quantize(ty, &v).expect("quantize");
        let bytes = packed::pack(ty, &plain, count / k, k).expect("pack");
        let pt = packed::packed_of(ty).expect("packed type");
        Tensor::from_quant(bytes, pt, shape.to_vec()).expect("tensor")
    };
    match kind {
        0 => Tensor::from_f32(v, shape.to_vec()).expect("f32"),
        1 => Tensor::from_f16(
            v.iter().map(|&x| half::f16::from_f32(x)).collect(),
            shape.to_vec(),
        )
        .expect("f16"),
        2 => Tensor::from_bf16(
            v.iter().map(|&x| half::bf16::from_f32(x)).collect(),
            shape.to_vec(),
        )
        .expect("bf16"),
        3 => q(QuantType::Q4_0),
        4 => q(QuantType::Q4_1),
        5 => q(QuantType::Q8_0),
        6 => Tensor::from_quant(q6k_bytes(seed, count), QuantType::Q6_K, shape.to_vec())
            .expect("q6_K"),
        7 => q(QuantType::w8a8(k).expect("w8a8")),
        8 => packed(QuantType::Q4_0),
        _ => packed(QuantType::Q8_0),
    }
}

struct MoeCase {
    x: Tensor,
    ids: Tensor,
    weights: Vec<Tensor>,
    n: usize,
    k: usize,
}

/// Ids drawn from the experts `used` marks (at least one), so the others
/// get no rows.
#[allow(clippy::too_many_arguments)]
fn make(
    kind: usize,
    t: usize,
    s: usize,
    e: usize,
    n: usize,
    k: usize,
    per_slot: bool,
    stacked: bool,
    used: u16,
    seed: u64,
) -> MoeCase {
    let mut pool: Vec<i32> = (0..e as i32).filter(|i| used & (1 << i) != 0).collect();
    if pool.is_empty() {
        pool.push((seed % e as u64) as i32);
    }
    let r = vals(seed ^ 0x1d5, t * s);
    let ids: Vec<i32> = r
        .iter()
        .map(|v| pool[((v + 1.0) / 2.0 * pool.len() as f32) as usize % pool.len()])
        .collect();
    let xs = if per_slot { vec![t, s, k] } else { vec![t, k] };
    let x = Tensor::from_f32(vals(seed ^ 0x7, xs.iter().product()), xs).expect("x");
    let weights = if stacked {
        vec![weight(kind, &[e, n, k], seed ^ 0x99)]
    } else {
        (0..e)
            .map(|i| weight(kind, &[n, k], seed ^ (0x99 + i as u64 * 31)))
            .collect()
    };
    MoeCase {
        x,
        ids: Tensor::from_i32(ids, vec![t, s]).expect("ids"),
        weights,
        n,
        k,
    }
}

impl MoeCase {
    fn inputs(&self) -> Vec<&Tensor> {
        let mut v = vec![&self.x, &self.ids];
        v.extend(self.weights.iter());
        v
    }

    /// Expert `i`'s `[n, k]` weight (a view of a stacked one).
    fn expert(&self, i: usize) -> Tensor {
        match &self.weights[..] {
            [w] if w.rank() == 3 => w
                .narrow0(i, i + 1)
                .and_then(|v| v.reshaped(vec![self.n, self.k]))
                .expect("expert view"),
            ws => ws[i].clone(),
        }
    }

    /// Row `p`'s activations.
    fn row(&self, p: usize) -> Vec<f32> {
        let s = self.ids.shape()[1];
        let r = if self.x.rank() == 2 { p / s } else { p };
        self.x.f32s().expect("x")[r * self.k..(r + 1) * self.k].to_vec()
    }
}

fn check(c: &MoeCase, quantized: bool) -> Result<(), TestCaseError> {
    let (n, k) = (c.n, c.k);
    let got = CpuBackend
        .run(&Op::MoeLinear, &c.inputs())
        .expect("moe_linear");
    let got = got.f32s().expect("f32");
    let ids = c.ids.i32s().expect("ids");
    // The decomposition: per expert, Op::Linear over its rows in order.
    let experts = ids.iter().map(|&i| i as usize + 1).max().unwrap_or(0);
    for ex in 0..experts {
        let rows: Vec<usize> = (0..ids.len()).filter(|&p| ids[p] as usize == ex).collect();
        if rows.is_empty() {
            continue;
        }
        let xs: Vec<f32> = rows.iter().flat_map(|&p| c.row(p)).collect();
        let xb = Tensor::from_f32(xs, vec![rows.len(), k]).expect("block");
        let y = CpuBackend
            .run(&Op::Linear, &[&xb, &c.expert(ex)])
            .expect("linear");
        let y = y.f32s().expect("f32");
        for (r, &p) in rows.iter().enumerate() {
            for j in 0..n {
                let (a, b) = (got[p * n + j], y[r * n + j]);
                prop_assert!(
                    a.to_bits() == b.to_bits(),
                    "row {p} (expert {ex}) out[{j}] = {a}, its linear gives {b}"
                );
            }
        }
    }
    // The twin, within rounding.
    let want = moe_linear_ref(&c.inputs()).expect("twin");
    assert_finite("moe twin", &want);
    for (p, &ex) in ids.iter().enumerate() {
        let row = c.row(p);
        let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
        let wf = c.expert(ex as usize).to_f32_vec().expect("w");
        for j in 0..n {
            let wrow = &wf[j * k..(j + 1) * k];
            let wsum: f32 = wrow.iter().map(|v| v.abs()).sum();
            let mag: f32 = wrow.iter().zip(&row).map(|(a, b)| (a * b).abs()).sum();
            let bound = if quantized {
                wsum * amax / 254.0 + 1e-4 * mag + 1e-5
            } else {
                1e-5 * mag + 1e-6
            };
            let (a, b) = (got[p * n + j], want[p * n + j]);
            prop_assert!(
                (a - b).abs() <= bound,
                "row {p} (expert {ex}) out[{j}] = {a}, twin {b}, bound {bound}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn moe_linear_equals_its_linears_and_twin(
        kind in 0..KINDS,
        t in 1usize..40,
        s in 1usize..5,
        e in 1usize..10,
        n in 1usize..70,
        blocks in 1usize..6,
        odd in 0usize..32,
        per_slot in any::<bool>(),
        stacked in any::<bool>(),
        used in any::<u16>(),
        seed in any::<u64>(),
    ) {
        let k = kind_k(kind, blocks, odd);
        // Interleaved weights: stacked experts of whole 16-row groups.
        let (n, stacked) = if kind >= 8 { (n.next_multiple_of(16), true) } else { (n, stacked) };
        let c = make(kind, t, s, e, n, k, per_slot, stacked, used, seed);
        check(&c, kind >= 3)?;
    }
}

/// Big enough for the pool: many experts, uneven rows, both layouts.
#[test]
fn the_parallel_path_equals_the_decomposition() {
    for (kind, stacked) in [(3, true), (5, false), (0, true), (1, false), (9, true)] {
        let (t, s, e, n, k) = (37, 4, 9, 80, 256);
        let c = make(
            kind,
            t,
            s,
            e,
            n,
            k,
            kind % 2 == 1,
            stacked,
            0b1_0110_1101,
            42 + kind as u64,
        );
        check(&c, kind >= 3).unwrap_or_else(|e| panic!("kind {kind}: {e}"));
    }
}

/// `prepare_weight` interleaves a stacked q4_0 / q8_0 weight per expert
/// (where the kernels want it), and `moe_linear` reads it to the same
/// values as the plain one within the kernels' float summation order.
#[test]
fn prepared_stacked_experts_give_the_plain_results() {
    for ty in [QuantType::Q4_0, QuantType::Q8_0] {
        let kind = if ty == QuantType::Q4_0 { 3 } else { 5 };
        let c = make(kind, 19, 4, 6, 48, 128, false, true, 0b11_1011, 7);
        let prepared = CpuBackend
            .prepare_weight(
                "model.layers.0.mlp.experts.gate_up_proj",
                c.weights[0].clone(),
            )
            .expect("prepare");
        if mllm_backends::cpu::repacks() {
            assert_eq!(prepared.dtype().quant(), packed::packed_of(ty));
        }
        let plain = CpuBackend.run(&Op::MoeLinear, &c.inputs()).expect("plain");
        let p = CpuBackend
            .run(&Op::MoeLinear, &[&c.x, &c.ids, &prepared])
            .expect("prepared");
        for (a, b) in p
            .f32s()
            .expect("f32")
            .iter()
            .zip(plain.f32s().expect("f32"))
        {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{ty}: {a} vs {b}");
        }
        // One expert of the prepared stack is still a valid linear weight.
        let one = prepared
            .narrow0(2, 3)
            .and_then(|v| v.reshaped(vec![48, 128]));
        assert!(one.is_ok(), "{ty}: {one:?}");
    }
}

#[test]
fn bad_ids_are_errors_that_name_the_row() {
    let c = make(0, 3, 2, 4, 8, 32, false, true, 0xf, 1);
    let ids = Tensor::from_i32(vec![0, 1, 2, 3, 4, 0], vec![3, 2]).expect("ids");
    let err = CpuBackend
        .run(&Op::MoeLinear, &[&c.x, &ids, &c.weights[0]])
        .expect_err("id 4 of 4 experts");
    assert!(err.to_string().contains("token 2, slot 0"), "{err}");
    assert!(moe_linear_ref(&[&c.x, &ids, &c.weights[0]]).is_err());
}

/// Timing at Qwen3-MoE-like sizes (t = 512, s = 8, e = 64, k = 1024,
/// n = 768) on 2 threads: the fast path against the twin.
#[test]
#[ignore]
fn bench_moe_linear() {
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global();
    let (t, s, e, n, k) = (512, 8, 64, 768, 1024);
    // Every token picks s distinct experts.
    let r = vals(99, t * e);
    let mut ids = Vec::with_capacity(t * s);
    for i in 0..t {
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| r[i * e + b].total_cmp(&r[i * e + a]));
        ids.extend(order[..s].iter().map(|&x| x as i32));
    }
    let ids = Tensor::from_i32(ids, vec![t, s]).expect("ids");
    let x = Tensor::from_f32(vals(5, t * k), vec![t, k]).expect("x");
    for (name, kind) in [("q4_0", 3), ("q8_0", 5)] {
        let w = CpuBackend
            .prepare_weight("experts.gate_proj", weight(kind, &[e, n, k], 3))
            .expect("prepare");
        let inputs = [&x, &ids, &w];
        CpuBackend.run(&Op::MoeLinear, &inputs).expect("warm");
        let runs = 5;
        let t0 = std::time::Instant::now();
        for _ in 0..runs {
            CpuBackend.run(&Op::MoeLinear, &inputs).expect("fast");
        }
        let fast = t0.elapsed().as_secs_f64() / runs as f64;
        let t0 = std::time::Instant::now();
        moe_linear_ref(&inputs).expect("twin");
        let twin = t0.elapsed().as_secs_f64();
        // One dense linear of the same multiply-adds, for scale.
        let xd = Tensor::from_f32(vals(6, t * s * k), vec![t * s, k]).expect("x");
        let wd = CpuBackend
            .prepare_weight("dense", weight(kind, &[n, k], 4))
            .expect("prepare");
        CpuBackend.run(&Op::Linear, &[&xd, &wd]).expect("warm");
        let t0 = std::time::Instant::now();
        for _ in 0..runs {
            CpuBackend.run(&Op::Linear, &[&xd, &wd]).expect("dense");
        }
        let dense = t0.elapsed().as_secs_f64() / runs as f64;
        // A decode step: one token's s experts, against s separate linears.
        let x1 = x.narrow0(0, 1).expect("row");
        let ids1 = ids.narrow0(0, 1).expect("ids");
        let reps = 50;
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            CpuBackend
                .run(&Op::MoeLinear, &[&x1, &ids1, &w])
                .expect("decode");
        }
        let decode = t0.elapsed().as_secs_f64() / reps as f64;
        let picked: Vec<Tensor> = ids1.i32s().expect("ids")[..s]
            .iter()
            .map(|&i| {
                w.narrow0(i as usize, i as usize + 1)
                    .and_then(|v| v.reshaped(vec![n, k]))
            })
            .collect::<Result<_, _>>()
            .expect("expert views");
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            for pw in &picked {
                CpuBackend.run(&Op::Linear, &[&x1, pw]).expect("linear");
            }
        }
        let separate = t0.elapsed().as_secs_f64() / reps as f64;
        eprintln!(
            "moe_linear {name} decode (t=1, s={s}): {:.0} us; {s} separate linears {:.0} us",
            decode * 1e6,
            separate * 1e6
        );
        let gmacs = (t * s * n * k) as f64 / 1e9;
        eprintln!(
            "moe_linear {name} ({}) t={t} s={s} e={e} k={k} n={n}, {} threads: fast {:.1} ms ({:.0} GMAC/s), twin {:.0} ms ({:.0}x); one dense linear of as many MACs {:.1} ms",
            w.dtype(),
            rayon::current_num_threads(),
            fast * 1e3,
            gmacs / fast,
            twin * 1e3,
            twin / fast,
            dense * 1e3
        );
    }
}
