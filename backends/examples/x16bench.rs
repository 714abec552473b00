//! Micro-benchmark of the interleaved (`Q4_0x16`, `Q8_0x16`) linears on
//! Qwen3-0.6B's shapes: decode GEMV (m = 1, weights cycled so they stream
//! from memory) and a 128-row prefill chunk (weights hot), so a kernel
//! change can be timed without the whole model.
//!
//! ```sh
//! cargo run --release -p mllm-backends --example x16bench -- 2   # threads
//! ```

use std::time::Instant;

use mllm_backends::cpu::qlinear::{self, Isa};
use mllm_backends::quant::{self, packed, QuantType};

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

/// Median seconds of `f` over at least `reps` calls and 0.3 s.
fn median(reps: usize, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    let (mut t, start) = (Vec::new(), Instant::now());
    while t.len() < reps || start.elapsed().as_secs_f64() < 0.3 {
        let t0 = Instant::now();
        f(t.len() + 1);
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .unwrap();
    let isa = Isa::best();
    println!("{threads} threads, path {}", isa.name());
    println!("| weight | shape [n x k] | m | ms | GB/s (weights) | GMAC/s |");
    println!("|---|---|---:|---:|---:|---:|");
    let shapes = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)];
    for plain in [QuantType::Q8_0, QuantType::Q4_0] {
        let pty = packed::packed_of(plain).unwrap();
        for (n, k) in shapes {
            let w = quant::quantize(plain, &vals(1, n * k)).unwrap();
            let bytes = w.len();
            // Enough copies to exceed the L3 (32 MiB here) several times.
            let copies: Vec<Vec<u8>> = (0..(160 << 20) / bytes + 1)
                .map(|c| {
                    let mut v = w.clone();
                    v[c % bytes] ^= 1;
                    packed::pack(plain, &v, n, k).unwrap()
                })
                .collect();
            for m in [1usize, 128] {
                let x = vals(7, m * k);
                let mut out = vec![0.0f32; m * n];
                let s = median(if m == 1 { 200 } else { 5 }, |i| {
                    let wi = if m == 1 {
                        &copies[i % copies.len()]
                    } else {
                        &copies[0]
                    };
                    qlinear::linear_into_with(isa, &x, m, k, wi, pty, n, None, &mut out).unwrap();
                    std::hint::black_box(&out);
                });
                println!(
                    "| {} | {n} x {k} | {m} | {:.3} | {:.1} | {:.1} |",
                    pty.name(),
                    s * 1e3,
                    bytes as f64 / s / 1e9,
                    (m * n * k) as f64 / s / 1e9
                );
            }
        }
    }
}
