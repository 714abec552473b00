//! Micro-benchmark of `linear` by weight dtype: GEMV `[1 x 1024] x
//! [3072 x 1024]^T` (decode), GEMM of 8 and 16 rows (a speculative
//! verification step) and of 128 (prefill), GFLOP/s and GB/s of weight
//! bytes read.
//!
//! ```sh
//! cargo run --release -p mllm-backends --example qbench            # 2 threads
//! QBENCH_SHAPE=1536x576 cargo run --release -p mllm-backends --example qbench -- 2 bf16
//! cargo run --release -p mllm-backends --example qbench -- 1 all   # 1 thread, every quant path
//! cargo run --release -p mllm-backends --example qbench -- 2 q4_k q6_k  # only these weights
//! QBENCH_ROWS=1,2,3,4 cargo run --release -p mllm-backends --example qbench -- 2 f16  # cold, these row counts
//! QBENCH_PACKED=1 cargo run --release -p mllm-backends --example qbench -- 1 q4_1  # x16 layout
//! ```
//!
//! "hot" repeats one weight (it stays in L2/L3: 1.7-12.6 MB here); "cold"
//! cycles through copies totalling more than 96 MiB so the weight streams
//! from memory, as in real decode.

use std::time::Instant;

use half::{bf16, f16};
use mllm_backends::cpu::linear;
use mllm_backends::cpu::qlinear::{self, Isa};
use mllm_backends::quant::{self, QuantType};
use mllm_backends::FloatSlice;

#[derive(Clone, Copy)]
enum W {
    F32,
    Bf16,
    F16,
    Q(QuantType),
}

impl W {
    fn name(self) -> String {
        match self {
            W::F32 => "f32".into(),
            W::Bf16 => "bf16".into(),
            W::F16 => "f16".into(),
            W::Q(q) => q.name().to_lowercase(),
        }
    }
}

enum Data {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    Q(Vec<u8>, QuantType),
}

impl Data {
    fn bytes(&self) -> usize {
        match self {
            Data::F32(v) => v.len() * 4,
            Data::Bf16(v) => v.len() * 2,
            Data::F16(v) => v.len() * 2,
            Data::Q(v, _) => v.len(),
        }
    }
}

fn vals(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// K-quant blocks of random codes with small scales (no K quantizer yet).
fn k_blocks(ty: QuantType, count: usize, seed: u64) -> Vec<u8> {
    let ts = ty.type_size();
    let mut out: Vec<u8> = vals(seed, count * ts)
        .iter()
        .map(|v| ((v + 1.0) * 127.0) as u8)
        .collect();
    for blk in out.chunks_exact_mut(ts) {
        let d = half::f16::from_f32(0.01).to_le_bytes();
        match ty {
            QuantType::Q6_K => blk[208..210].copy_from_slice(&d),
            QuantType::Q3_K => blk[108..110].copy_from_slice(&d),
            QuantType::Q2_K => {
                blk[80..82].copy_from_slice(&d);
                blk[82..84].copy_from_slice(&d);
            }
            QuantType::IQ4_XS => blk[0..2].copy_from_slice(&d),
            _ => {
                blk[0..2].copy_from_slice(&d);
                blk[2..4].copy_from_slice(&d);
            }
        }
    }
    out
}

fn make(w: W, n: usize, k: usize, seed: u64) -> Data {
    let f = vals(seed, n * k);
    match w {
        W::F32 => Data::F32(f),
        W::Bf16 => Data::Bf16(f.iter().map(|&v| bf16::from_f32(v)).collect()),
        W::F16 => Data::F16(f.iter().map(|&v| f16::from_f32(v)).collect()),
        // QBENCH_PACKED=1: Q4_0/Q4_1/Q8_0 in the 16-row interleaved layout
        // the CPU backend repacks them into at load (the x16 tiles).
        W::Q(q) if q.can_quantize() => {
            let bytes = quant::quantize(q, &f).unwrap();
            match quant::packed::packed_of(q) {
                Some(p) if std::env::var("QBENCH_PACKED").is_ok_and(|v| v == "1") => {
                    Data::Q(quant::packed::pack(q, &bytes, n, k).unwrap(), p)
                }
                _ => Data::Q(bytes, q),
            }
        }
        W::Q(q) => Data::Q(k_blocks(q, n * k / q.block_size(), seed), q),
    }
}

fn run(d: &Data, isa: Isa, x: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    match d {
        Data::F32(v) => linear::linear(x, m, k, FloatSlice::F32(v), n, None),
        Data::Bf16(v) => linear::linear(x, m, k, FloatSlice::BF16(v), n, None),
        Data::F16(v) => linear::linear(x, m, k, FloatSlice::F16(v), n, None),
        Data::Q(v, q) => qlinear::linear_with(isa, x, m, k, v, *q, n, None).unwrap(),
    }
}

/// Median seconds per call over at least `min_reps` calls and 0.4 s,
/// cycling through `copies`.
fn time(
    copies: &[Data],
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    min_reps: usize,
) -> f64 {
    for c in copies.iter().take(2) {
        std::hint::black_box(run(c, isa, x, m, k, n));
    }
    let mut t = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while t.len() < min_reps || start.elapsed().as_secs_f64() < 0.4 {
        let c = &copies[i % copies.len()];
        let t0 = Instant::now();
        std::hint::black_box(run(c, isa, x, m, k, n));
        t.push(t0.elapsed().as_secs_f64());
        i += 1;
        if t.len() >= 5000 {
            break;
        }
    }
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let all_paths = args.iter().any(|a| a == "all");
    // Weight names among the arguments keep only those weights.
    let only: Vec<&String> = args.iter().skip(2).filter(|a| *a != "all").collect();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .unwrap();
    // QBENCH_SHAPE=NxK times another weight shape (e.g. 1536x576).
    let (n, k) = std::env::var("QBENCH_SHAPE")
        .ok()
        .and_then(|v| {
            let (n, k) = v.split_once('x')?;
            Some((n.parse().ok()?, k.parse().ok()?))
        })
        .unwrap_or((3072, 1024));
    // QBENCH_ROWS=1,2,3: only cold runs of these row counts (the
    // verification steps of speculative decoding).
    let extra_rows: Vec<usize> = std::env::var("QBENCH_ROWS")
        .map(|v| v.split(',').filter_map(|m| m.trim().parse().ok()).collect())
        .unwrap_or_default();
    let types = [
        W::F32,
        W::Bf16,
        W::F16,
        W::Q(QuantType::Q8_0),
        W::Q(QuantType::Q4_0),
        W::Q(QuantType::Q4_1),
        W::Q(QuantType::Q4_K),
        W::Q(QuantType::Q5_K),
        W::Q(QuantType::Q6_K),
        W::Q(QuantType::Q2_K),
        W::Q(QuantType::Q3_K),
        W::Q(QuantType::IQ4_XS),
        W::Q(QuantType::Q5_0),
        W::Q(QuantType::Q5_1),
        W::Q(QuantType::IQ4_NL),
    ];
    println!(
        "{threads} threads, best quant path {}, weight [{n} x {k}]",
        Isa::best().name()
    );
    println!("| weight | path | shape | weights MB | ms/call | GFLOP/s | weight GB/s |");
    println!("|---|---|---|---|---|---|---|");
    for w in types {
        if !only.is_empty() && !only.iter().any(|o| o.eq_ignore_ascii_case(&w.name())) {
            continue;
        }
        let hot = vec![make(w, n, k, 1)];
        let mb = hot[0].bytes() as f64 / 1e6;
        let copies = (96 << 20) / hot[0].bytes() + 1;
        let cold: Vec<Data> = (0..copies).map(|c| make(w, n, k, 100 + c as u64)).collect();
        let isas: Vec<Isa> = match w {
            W::Q(_) if all_paths => Isa::available(),
            W::Q(_) => vec![Isa::best()],
            _ => vec![Isa::Scalar],
        };
        for isa in isas {
            let path = match w {
                W::Q(_) => isa.name(),
                _ => "simd f32",
            };
            let mut cases = vec![
                ("gemv 1 hot".to_string(), 1, &hot, 50),
                ("gemv 1 cold".to_string(), 1, &cold, 50),
                ("gemv 4 cold".to_string(), 4, &cold, 20),
                ("gemm 8 hot".to_string(), 8, &hot, 20),
                ("gemm 16 hot".to_string(), 16, &hot, 20),
                ("gemm 128 hot".to_string(), 128, &hot, 3),
            ];
            if !extra_rows.is_empty() {
                cases = extra_rows
                    .iter()
                    .map(|&m| (format!("rows {m} cold"), m, &cold, 20))
                    .collect();
            }
            for (label, m, set, reps) in cases {
                if isa == Isa::Scalar && matches!(w, W::Q(_)) && m == 128 {
                    continue;
                }
                let x = vals(7, m * k);
                let s = time(set, isa, &x, m, k, n, reps);
                let flops = 2.0 * (m * n * k) as f64 / s / 1e9;
                let gbs = set[0].bytes() as f64 / s / 1e9;
                println!(
                    "| {} | {path} | {label} | {mb:.2} | {:.3} | {flops:.1} | {gbs:.1} |",
                    w.name(),
                    s * 1e3
                );
            }
        }
    }
}
