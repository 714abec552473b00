//! Conformance cases of the `attention` family: `sdpa` at decode (1 query)
//! and prefill sizes (5, 17, 64 queries) over 1-200 keys, grouped-query
//! ratios 1, 2 and 4, head dims 64, 128 and odd ones (40, 24), values
//! narrower or wider than keys, causal or not, keys and values stored as
//! f32, f16 or q8_0 (a KV cache); and `cached_sdpa` whose cache rows past
//! `past_len` hold NaN, so reading them would fail the case.

use half::f16;

use super::{Case, Gen, NMSE_F32};
use crate::dtype::DType;
use crate::op::Op;
use crate::quant::{self, QuantType};
use crate::tensor::Tensor;

const Q8: DType = DType::Quant(QuantType::Q8_0);

fn name(dt: DType) -> String {
    dt.to_string()
}

/// `[rows, hk, d]` stored as `dtype`, its rows from `valid` on garbage
/// (NaN values; q8_0 blocks whose f16 scale is NaN).
fn cache(g: &mut Gen, dtype: DType, rows: usize, hk: usize, d: usize, valid: usize) -> Tensor {
    let shape = vec![rows, hk, d];
    let per = hk * d;
    let mut v = g.f32(&shape, 1.0).f32s().expect("f32").to_vec();
    match dtype {
        DType::F16 => {
            let mut h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            h[valid * per..].fill(f16::NAN);
            Tensor::from_f16(h, shape).expect("f16")
        }
        DType::Quant(q) => {
            let mut b = quant::quantize(q, &v).expect("whole blocks");
            let row = per / 32 * 34;
            b[valid * row..].fill(0xFF);
            Tensor::from_quant(b, q, shape).expect("q8_0")
        }
        _ => {
            v[valid * per..].fill(f32::NAN);
            Tensor::from_f32(v, shape).expect("f32")
        }
    }
}

struct Sdpa {
    sq: usize,
    sk: usize,
    hq: usize,
    hk: usize,
    d: usize,
    dv: usize,
}

fn sdpa_cases(g: &mut Gen, out: &mut Vec<Case>) {
    let s = |sq, sk, hq, hk, d, dv| Sdpa {
        sq,
        sk,
        hq,
        hk,
        d,
        dv,
    };
    let shapes = [
        // Decode: one query over short and long histories.
        s(1, 1, 1, 1, 64, 64),
        s(1, 7, 2, 1, 64, 64),
        s(1, 33, 4, 1, 128, 128),
        s(1, 200, 8, 2, 64, 64),
        s(1, 129, 4, 4, 128, 64),
        s(1, 65, 2, 2, 40, 24),
        // Short chunks (decode kernel with several queries, or flash).
        s(5, 5, 1, 1, 64, 64),
        s(5, 37, 2, 1, 64, 96),
        s(5, 200, 4, 1, 128, 128),
        s(5, 13, 4, 2, 40, 40),
        // Prefill.
        s(17, 17, 1, 1, 64, 64),
        s(17, 50, 2, 1, 128, 128),
        s(17, 200, 4, 1, 64, 32),
        s(17, 31, 4, 2, 24, 40),
        s(64, 64, 2, 2, 64, 64),
        s(64, 100, 4, 1, 128, 128),
        s(64, 200, 2, 1, 64, 128),
        s(64, 70, 8, 2, 40, 40),
    ];
    // Sliding windows (5 keys) on the causal cases.
    let masks = [(false, 0), (true, 0), (true, 5)];
    for sh in &shapes {
        for (causal, window) in masks {
            for dtype in [DType::F32, DType::F16, Q8] {
                if dtype == Q8 && (sh.d % 32 != 0 || sh.dv % 32 != 0) {
                    continue;
                }
                let q = g.f32(&[sh.sq, sh.hq, sh.d], 2.0);
                let k = g.typed(dtype, &[sh.sk, sh.hk, sh.d], 1.0);
                let v = g.typed(dtype, &[sh.sk, sh.hk, sh.dv], 1.0);
                let scale = 1.0 / (sh.d as f32).sqrt();
                out.push(Case::new(
                    format!(
                        "sdpa {} causal {causal} window {window} q[{},{},{}] k[{},{},{}] v dv {}",
                        name(dtype),
                        sh.sq,
                        sh.hq,
                        sh.d,
                        sh.sk,
                        sh.hk,
                        sh.d,
                        sh.dv
                    ),
                    Op::Sdpa {
                        causal,
                        scale,
                        window,
                    },
                    vec![q, k, v],
                    NMSE_F32,
                ));
            }
        }
    }
    // Non-causal with more queries than keys, and with no keys at all
    // (zeros, as the CPU gives).
    for (sq, sk) in [(17, 5), (64, 3), (3, 1), (1, 0), (17, 0)] {
        let q = g.f32(&[sq, 2, 64], 1.0);
        let k = g.f32(&[sk, 1, 64], 1.0);
        let v = g.f32(&[sk, 1, 32], 1.0);
        out.push(Case::new(
            format!("sdpa f32 causal false q[{sq},2,64] k[{sk},1,64] v dv 32"),
            Op::Sdpa {
                causal: false,
                scale: 0.125,
                window: 0,
            },
            vec![q, k, v],
            NMSE_F32,
        ));
    }
}

fn cached_cases(g: &mut Gen, out: &mut Vec<Case>) {
    // (sq, new rows, capacity, past_len, hq, hk, d, dv)
    let shapes = [
        (1, 1, 16, 0, 2, 1, 64, 64),
        (1, 1, 16, 7, 4, 1, 64, 64),
        (1, 1, 40, 40, 2, 2, 128, 128),
        (1, 1, 300, 190, 8, 2, 64, 64),
        (5, 5, 64, 20, 4, 2, 64, 32),
        (3, 7, 32, 9, 2, 1, 64, 64),
        (17, 17, 64, 33, 4, 1, 128, 128),
        (64, 64, 200, 100, 2, 1, 64, 64),
    ];
    for &(sq, s, c, len, hq, hk, d, dv) in &shapes {
        for (causal, window) in [(false, 0), (true, 0), (true, 6)] {
            for dtype in [DType::F32, DType::F16, Q8] {
                let q = g.f32(&[sq, hq, d], 2.0);
                let k = g.f32(&[s, hk, d], 1.0);
                let v = g.f32(&[s, hk, dv], 1.0);
                let pk = cache(g, dtype, c, hk, d, len);
                let pv = cache(g, dtype, c, hk, dv, len);
                let plen = Tensor::from_i32(vec![len as i32], vec![1]).expect("len");
                let scale = 1.0 / (d as f32).sqrt();
                out.push(Case::new(
                    format!(
                        "cached_sdpa {} causal {causal} window {window} q[{sq},{hq},{d}] new {s} past {len}/{c} hk {hk} dv {dv}",
                        name(dtype)
                    ),
                    Op::CachedSdpa {
                        causal,
                        scale,
                        window,
                    },
                    vec![q, k, v, pk, pv, plen],
                    NMSE_F32,
                ));
            }
        }
    }
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0xa77e_4710);
    let mut out = vec![];
    sdpa_cases(&mut g, &mut out);
    cached_cases(&mut g, &mut out);
    out
}
