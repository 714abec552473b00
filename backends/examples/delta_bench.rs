//! Times `gated_delta_rule` at Qwen3.5-0.8B's sizes (16 heads of 128 x
//! 128) on synthetic inputs:
//!
//!     cargo run --release -p mllm-backends --example delta_bench -- [TOKENS] [DECAY]
//!
//! TOKENS (128) per call; DECAY (1) scales the per-token decays `g`
//! (-0.1 - DECAY * |u|, u uniform in [-0.5, 0.5]): at 200 the products of
//! the chunked form go subnormal, which `cpu::denormals` keeps at full
//! speed. Prints milliseconds per call and per 18 such layers.

use mllm_backends::cpu::delta_rule::{gated_delta_rule, Dims, Inputs};

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (t, decay): (usize, f32) = (arg(1, 128), arg(2, 1.0));
    let (h, dim) = (16, 128);
    let d = Dims {
        t,
        hk: h,
        hv: h,
        dk: dim,
        dv: dim,
    };
    let mut r = 1u32;
    let mut uniform = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                r = r.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (r >> 8) as f32 / 16_777_216.0 - 0.5
            })
            .collect()
    };
    let scaled = |v: Vec<f32>, s: f32| v.into_iter().map(|x| x * s).collect::<Vec<f32>>();
    let q = scaled(uniform(t * h * dim), 0.1);
    let k = scaled(uniform(t * h * dim), 0.1);
    let v = uniform(t * h * dim);
    let g: Vec<f32> = uniform(t * h)
        .iter()
        .map(|u| -0.1 - decay * u.abs())
        .collect();
    let beta: Vec<f32> = uniform(t * h).iter().map(|u| 0.5 + u.abs()).collect();
    let state = scaled(uniform(h * dim * dim), 0.1);
    let x = Inputs {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        state: &state,
    };
    std::hint::black_box(gated_delta_rule(d, &x));
    let n = 50;
    let start = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(gated_delta_rule(d, &x));
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / n as f64;
    println!(
        "t={t} decay={decay}: {ms:.3} ms per call, {:.1} ms per 18 layers",
        ms * 18.0
    );
}
