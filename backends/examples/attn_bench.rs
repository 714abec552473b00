//! Times attention over a cache at Qwen3-0.6B's shapes (16 query heads, 8
//! key heads, 128 dims): a decode step (1 query) and a prefill chunk (128
//! queries) after `DEPTH` cached positions, f16 and f32 caches.
//!
//!   cargo run --release -p mllm-backends --example attn_bench -- [DEPTH] [REPS] [HQ HK D]
//!
//! (`2048 20 9 3 64`: SmolLM2-135M's heads; `ATTN_SQ=1` times the decode
//! step only.) One layer's cache; a decode step's attention costs this once
//! per layer.

use half::f16;
use mllm_backends::cpu::attention::{sdpa, Rows, SdpaShape};
use std::time::Instant;

fn vals(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let depth = args.first().copied().unwrap_or(2048);
    let reps = args.get(1).copied().unwrap_or(20);
    let (hq, hk, d) = match args.get(2..5) {
        Some(&[hq, hk, d]) => (hq, hk, d),
        _ => (16, 8, 128),
    };
    // ATTN_SQ=1: the decode step only.
    let sqs: Vec<usize> = match std::env::var("ATTN_SQ").ok().and_then(|s| s.parse().ok()) {
        Some(sq) => vec![sq],
        None => vec![1, 128],
    };
    for sq in sqs {
        let sk = depth + sq;
        let sh = SdpaShape {
            sq,
            sk,
            hq,
            hk,
            d,
            dv: d,
        };
        let q = vals(1, sq * hq * d);
        let k = vals(2, sk * hk * d);
        let v = vals(3, sk * hk * d);
        let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
        let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        for (name, kr, vr) in [
            ("f16", Rows::F16(&kh), Rows::F16(&vh)),
            ("f32", Rows::F32(&k), Rows::F32(&v)),
        ] {
            let scale = 1.0 / (d as f32).sqrt();
            let _ = sdpa(&q, kr, vr, &sh, true, 0, scale);
            let t = Instant::now();
            let mut sink = 0.0;
            for _ in 0..reps {
                sink += sdpa(&q, kr, vr, &sh, true, 0, scale)[0];
            }
            let ms = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
            println!("sq={sq:<4} sk={sk:<6} {name}: {ms:8.3} ms per call ({sink:.1})");
        }
    }
}
