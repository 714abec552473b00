//! Activations quantized once per matmul, so that every weight block meets
//! int8 activations and the inner loops are integer dot products.
//!
//! - `ActQ8`: 32-value blocks for Q4_0, Q4_1 and Q8_0 weights: i8 codes,
//!   an f32 scale and the integer sum of the codes per block (the sum lets a
//!   kernel use unsigned weight codes, `sum((q - o) a) = sum(q a) - o sum(a)`,
//!   and gives Q4_1's minimum term).
//! - `ActQ8K`: 256-value blocks for the K-quants: i8 codes, an f32 scale and
//!   the sums of each 16 codes (for Q4_K/Q5_K mins and Q6_K's `-32`).
//!
//! Scales are symmetric (`d = max|x| / 127`, codes in -127..=127, rounded
//! to nearest, ties to even) and kept in f32: the activation error is at most
//! `d / 2` per value. Codes never reach -128, which the AVX2 sign trick for
//! Q8_0 weights relies on.

use crate::cpu::refill;
use crate::quant::{QK, QK_K};

/// Rows of activations as 32-value int8 blocks (row-major `[m][k]` codes).
#[derive(Default)]
pub struct ActQ8 {
    pub m: usize,
    pub k: usize,
    pub qs: Vec<i8>,
    /// Scale of each block, `[m][k / 32]`.
    pub d: Vec<f32>,
    /// Sum of the codes of each block, `[m][k / 32]`.
    pub sum: Vec<i32>,
    /// `-8 * sum` and `-128 * sum`: the offset terms of Q4_0 and Q8_0
    /// codes taken as unsigned, ready for the interleaved kernels to
    /// broadcast straight from memory (`x16`).
    pub neg8: Vec<i32>,
    pub neg128: Vec<i32>,
    /// Rows `2p` and `2p + 1` interleaved in 8-byte slices (`[m / 2][k / 8]
    /// [2][8]`), the operand order of Arm's `smmla`, made only where its
    /// tiles run (i8mm, prompt chunks): their loop then loads the pairs
    /// instead of zipping them once per weight row pair.
    #[cfg(target_arch = "aarch64")]
    pub pairs: Vec<i8>,
    /// `d * sum` of each block as f32 (the activation's factor of a
    /// minimum's term `m * d_a * sum(a)`, the same product the twin
    /// computes), for the NEON i8mm tiles.
    #[cfg(target_arch = "aarch64")]
    pub dsum: Vec<f32>,
}

/// Rows of activations as 256-value int8 super-blocks.
#[derive(Default)]
pub struct ActQ8K {
    pub m: usize,
    pub k: usize,
    pub qs: Vec<i8>,
    /// Scale of each super-block, `[m][k / 256]`.
    pub d: Vec<f32>,
    /// Sums of each 16 codes, `[m][k / 16]` (16 per super-block).
    pub bsums: Vec<i16>,
    /// Rows paired for Arm's i8mm tiles, as `ActQ8::pairs`.
    #[cfg(target_arch = "aarch64")]
    pub pairs: Vec<i8>,
}

/// One row's codes, then its per-block scales and sums (or per-16 sums).
type RowParts<'a, S> = ((&'a [f32], &'a mut [i8]), (&'a mut [f32], &'a mut [S]));

/// Rows at or above this many values are quantized in parallel.
const PAR_VALUES: usize = 1 << 16;

/// Rounds to nearest, ties to even, for |v| <= 127: adding and removing
/// 1.5 * 2^23 leaves no fraction bits, so the FPU's rounding does the work.
/// Plain adds vectorise, where `f32::round` is a library call on baseline
/// x86-64. `as` saturates and maps NaN to 0.
#[inline(always)]
pub(super) fn round_to_i8(v: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    ((v + MAGIC) - MAGIC) as i8
}

/// `d` and the codes of one block (any length), symmetric int8.
#[inline(always)]
fn quantize_block<const N: usize>(x: &[f32; N], q: &mut [i8; N]) -> f32 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = round_to_i8(v * id);
    }
    d
}

/// One row of 32-value blocks: codes, scales and code sums; with AVX-512
/// or AVX2 where the CPU has them (the scalar loop took ~9% of a Q4_0
/// prefill). All give the same bits: the maximum is exact in any order,
/// the scale and its inverse are the same scalar divisions, and the vector
/// conversion of the value clamped to [-128, 127] rounds to nearest even
/// and saturates as `round_to_i8` does (NaN to 0).
fn quantize_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (both): features checked; `x`, `q` are whole blocks, `d`
        // and `s` one value per block (the caller's chunking).
        if super::Isa::allows_avx512() {
            unsafe { x86::quantize_row(x, q, d, s) };
            return;
        }
        if super::Isa::allows_avx2() {
            unsafe { x86::quantize_row_avx2(x, q, d, s) };
            return;
        }
    }
    quantize_row_scalar(x, q, d, s);
}

/// One row of 256-value blocks (`ActQ8K`): codes, scales and the codes'
/// sums per 16; AVX-512 where the CPU has it (the scalar loop, whose
/// NaN-skipping maximum does not vectorize, took ~4.5% of a Qwen3-0.6B
/// IQ4_XS prefill). The same bits either way, as for `quantize_row`.
fn quantize_row_k(x: &[f32], q: &mut [i8], d: &mut [f32], bs: &mut [i16]) {
    #[cfg(target_arch = "x86_64")]
    if super::Isa::allows_avx512() {
        // SAFETY: features checked; `x`, `q` are whole blocks, `d` one
        // value per block and `bs` sixteen (the caller's chunking).
        unsafe { x86::quantize_row_k(x, q, d, bs) };
        return;
    }
    quantize_row_k_scalar(x, q, d, bs);
}

fn quantize_row_k_scalar(x: &[f32], q: &mut [i8], d: &mut [f32], bs: &mut [i16]) {
    let (xs, qs) = (x.as_chunks::<QK_K>().0, q.as_chunks_mut::<QK_K>().0);
    for (b, (x, q)) in xs.iter().zip(qs).enumerate() {
        d[b] = quantize_block(x, q);
        for (s, q) in bs[16 * b..16 * b + 16].iter_mut().zip(q.chunks_exact(16)) {
            // |sum| <= 16 * 127, well inside i16.
            *s = q.iter().map(|&v| v as i16).sum();
        }
    }
}

fn quantize_row_scalar(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i32]) {
    let (xs, qs) = (x.as_chunks::<QK>().0, q.as_chunks_mut::<QK>().0);
    for (b, (x, q)) in xs.iter().zip(qs).enumerate() {
        d[b] = quantize_block(x, q);
        s[b] = q.iter().map(|&v| v as i32).sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::quant::{QK, QK_K};

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i32]) {
        let nb = x.len() / QK;
        assert!(q.len() == x.len() && d.len() >= nb && s.len() >= nb);
        let abs = _mm512_set1_epi32(0x7FFF_FFFF);
        for b in 0..nb {
            let p = x.as_ptr().add(b * QK);
            let (v0, v1) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
            let a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), abs));
            let a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), abs));
            // max(x, acc) returns acc where x is NaN: NaN is skipped, as
            // the scalar fold's `f32::max` skips it.
            let amax =
                _mm512_reduce_max_ps(_mm512_max_ps(a1, _mm512_max_ps(a0, _mm512_setzero_ps())));
            let db = amax / 127.0;
            let id = if db != 0.0 { 1.0 / db } else { 0.0 };
            let idv = _mm512_set1_ps(id);
            let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
            let code = |v: __m512| {
                // Clamped first: an infinite product (a subnormal scale's
                // inverse overflows) saturates to +-127/-128 as `as i8`
                // does, where the conversion alone gives i32::MIN.
                let y = _mm512_mul_ps(v, idv);
                // Default MXCSR rounding: to nearest, ties to even. NaN
                // (inf * 0) converts to 0 as `as i8` does (the mask is
                // taken before the clamp, which turns NaN into -128).
                let ok = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(y, y);
                let y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
                _mm512_maskz_cvtps_epi32(ok, y)
            };
            let (c0, c1) = (code(v0), code(v1));
            let out = q.as_mut_ptr().add(b * QK) as *mut __m128i;
            _mm_storeu_si128(out, _mm512_cvtsepi32_epi8(c0));
            _mm_storeu_si128(out.add(1), _mm512_cvtsepi32_epi8(c1));
            d[b] = db;
            s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
        }
    }

    /// `quantize_row_k` with AVX-512: `quantize_row`'s steps on the
    /// sixteen vectors of a 256-value block, and each vector's code sum.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row_k(x: &[f32], q: &mut [i8], d: &mut [f32], bs: &mut [i16]) {
        let nb = x.len() / QK_K;
        assert!(q.len() == x.len() && d.len() >= nb && bs.len() >= 16 * nb);
        let abs = _mm512_set1_epi32(0x7FFF_FFFF);
        let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
        for b in 0..nb {
            let p = x.as_ptr().add(b * QK_K);
            // max(x, acc) returns acc where x is NaN, as `f32::max` skips it.
            let mut m = _mm512_setzero_ps();
            for g in 0..16 {
                let v = _mm512_castps_si512(_mm512_loadu_ps(p.add(16 * g)));
                m = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(v, abs)), m);
            }
            let db = _mm512_reduce_max_ps(m) / 127.0;
            let id = if db != 0.0 { 1.0 / db } else { 0.0 };
            let idv = _mm512_set1_ps(id);
            for g in 0..16 {
                // As `quantize_row`: clamped (an infinite product
                // saturates), NaN to 0, rounded to nearest even.
                let y = _mm512_mul_ps(_mm512_loadu_ps(p.add(16 * g)), idv);
                let ok = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(y, y);
                let c = _mm512_maskz_cvtps_epi32(ok, _mm512_min_ps(_mm512_max_ps(y, lo), hi));
                let out = q.as_mut_ptr().add(b * QK_K + 16 * g) as *mut __m128i;
                _mm_storeu_si128(out, _mm512_cvtsepi32_epi8(c));
                bs[16 * b + g] = _mm512_reduce_add_epi32(c) as i16;
            }
            d[b] = db;
        }
    }

    /// `quantize_row` with AVX2: the same steps as the AVX-512 one on four
    /// 8-lane vectors, the codes packed back to element order.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i32]) {
        let nb = x.len() / QK;
        assert!(q.len() == x.len() && d.len() >= nb && s.len() >= nb);
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
        // packs interleaves the 128-bit lanes; this puts the 4-code groups
        // back in element order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for b in 0..nb {
            let p = x.as_ptr().add(b * QK);
            let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(p.add(o)));
            // max(x, acc) returns acc where x is NaN, as `f32::max` skips it.
            let mut m = _mm256_setzero_ps();
            for v in v {
                m = _mm256_max_ps(_mm256_and_ps(v, abs), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
            let db = amax / 127.0;
            let id = if db != 0.0 { 1.0 / db } else { 0.0 };
            let idv = _mm256_set1_ps(id);
            let c = v.map(|v| {
                let y = _mm256_mul_ps(v, idv);
                let ok = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(y, y));
                let y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
                _mm256_and_si256(_mm256_cvtps_epi32(y), ok)
            });
            let w = _mm256_packs_epi16(
                _mm256_packs_epi32(c[0], c[1]),
                _mm256_packs_epi32(c[2], c[3]),
            );
            let w = _mm256_permutevar8x32_epi32(w, order);
            _mm256_storeu_si256(q.as_mut_ptr().add(b * QK) as *mut __m256i, w);
            d[b] = db;
            let s8 = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            s[b] = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
        }
    }
}

impl ActQ8 {
    /// Quantizes `x [m, k]`; `k` must be a multiple of 32.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> ActQ8 {
        let mut a = ActQ8::default();
        a.quantize_into(x, m, k);
        a
    }

    /// `quantize` into this value's buffers (reused: no allocation once
    /// they have grown to the largest `m * k` seen).
    pub fn quantize_into(&mut self, x: &[f32], m: usize, k: usize) {
        assert!(k.is_multiple_of(QK) && x.len() == m * k);
        let nb = k / QK;
        (self.m, self.k) = (m, k);
        refill(&mut self.qs, m * k, 0);
        refill(&mut self.d, m * nb, 0.0);
        refill(&mut self.sum, m * nb, 0);
        let row = |((x, q), (d, s)): RowParts<i32>| quantize_row(x, q, d, s);
        if k == 0 {
            return;
        }
        let rows = x.chunks_exact(k).zip(self.qs.chunks_exact_mut(k)).zip(
            self.d
                .chunks_exact_mut(nb)
                .zip(self.sum.chunks_exact_mut(nb)),
        );
        if m * k >= PAR_VALUES {
            // On the pool, as the step's other loops (a list of m row
            // handles: prefill only).
            let mut rows: Vec<Option<_>> = rows.map(Some).collect();
            crate::cpu::pool::for_chunks(&mut rows, 1, |_, r| {
                if let Some(parts) = r[0].take() {
                    row(parts)
                }
            });
        } else {
            rows.for_each(row);
        }
        self.neg8.clear();
        self.neg8.extend(self.sum.iter().map(|&s| -8 * s));
        self.neg128.clear();
        self.neg128.extend(self.sum.iter().map(|&s| -128 * s));
        #[cfg(target_arch = "aarch64")]
        self.pair_rows();
    }

    /// `pairs` and `dsum` for the i8mm prompt tiles (`block32::gemm`),
    /// empty where they do not run.
    #[cfg(target_arch = "aarch64")]
    fn pair_rows(&mut self) {
        self.dsum.clear();
        if pair_rows(&self.qs, self.m, self.k, &mut self.pairs) {
            let dsum = self.d.iter().zip(&self.sum).map(|(&d, &s)| d * s as f32);
            self.dsum.extend(dsum);
        }
    }

    pub fn blocks_per_row(&self) -> usize {
        self.k / QK
    }
}

/// Rows `2p` and `2p + 1` of `qs [m][k]` interleaved in 8-byte slices
/// into `out` (`[m / 2][k / 8][2][8]`, `smmla`'s operand order) where the
/// i8mm prompt tiles run (more rows than a row-invariant step, a CPU with
/// i8mm); else `out` is left empty. Whether it was made.
#[cfg(target_arch = "aarch64")]
fn pair_rows(qs: &[i8], m: usize, k: usize, out: &mut Vec<i8>) -> bool {
    out.clear();
    if m <= crate::cpu::ROW_INVARIANT_STEP || !std::arch::is_aarch64_feature_detected!("i8mm") {
        return false;
    }
    out.reserve(m / 2 * 2 * k);
    for rows in qs.chunks_exact(2 * k) {
        let (r0, r1) = rows.split_at(k);
        for (a, b) in r0.chunks_exact(8).zip(r1.chunks_exact(8)) {
            out.extend_from_slice(a);
            out.extend_from_slice(b);
        }
    }
    true
}

impl ActQ8K {
    /// Quantizes `x [m, k]`; `k` must be a multiple of 256.
    pub fn quantize(x: &[f32], m: usize, k: usize) -> ActQ8K {
        let mut a = ActQ8K::default();
        a.quantize_into(x, m, k);
        a
    }

    /// `quantize` into this value's buffers (reused).
    pub fn quantize_into(&mut self, x: &[f32], m: usize, k: usize) {
        assert!(k.is_multiple_of(QK_K) && x.len() == m * k);
        let nb = k / QK_K;
        (self.m, self.k) = (m, k);
        refill(&mut self.qs, m * k, 0);
        refill(&mut self.d, m * nb, 0.0);
        refill(&mut self.bsums, m * k / 16, 0);
        #[cfg(target_arch = "aarch64")]
        self.pairs.clear();
        let row = |((x, q), (d, bs)): RowParts<i16>| quantize_row_k(x, q, d, bs);
        if k == 0 {
            return;
        }
        let rows = x.chunks_exact(k).zip(self.qs.chunks_exact_mut(k)).zip(
            self.d
                .chunks_exact_mut(nb)
                .zip(self.bsums.chunks_exact_mut(k / 16)),
        );
        if m * k >= PAR_VALUES {
            // On the pool, as the step's other loops (a list of m row
            // handles: prefill only).
            let mut rows: Vec<Option<_>> = rows.map(Some).collect();
            crate::cpu::pool::for_chunks(&mut rows, 1, |_, r| {
                if let Some(parts) = r[0].take() {
                    row(parts)
                }
            });
        } else {
            rows.for_each(row);
        }
        #[cfg(target_arch = "aarch64")]
        pair_rows(&self.qs, m, k, &mut self.pairs);
    }

    pub fn blocks_per_row(&self) -> usize {
        self.k / QK_K
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::vec_f32;

    #[test]
    fn codes_reconstruct_within_half_a_step() {
        let (m, k) = (3, 512);
        let x = vec_f32(7, m * k);
        let a = ActQ8::quantize(&x, m, k);
        let ak = ActQ8K::quantize(&x, m, k);
        for (i, &x) in x.iter().enumerate() {
            let (b, bk) = (i / QK, i / QK_K);
            assert!((a.qs[i] as f32 * a.d[b] - x).abs() <= a.d[b] * 0.5 + 1e-6);
            assert!((ak.qs[i] as f32 * ak.d[bk] - x).abs() <= ak.d[bk] * 0.5 + 1e-6);
            assert!(a.qs[i] != -128 && ak.qs[i] != -128);
        }
        for b in 0..m * k / QK {
            let s: i32 = a.qs[b * QK..(b + 1) * QK].iter().map(|&v| v as i32).sum();
            assert_eq!(a.sum[b], s);
        }
        for b in 0..m * k / 16 {
            let s: i16 = ak.qs[b * 16..(b + 1) * 16].iter().map(|&v| v as i16).sum();
            assert_eq!(ak.bsums[b], s);
        }
    }

    #[test]
    fn row_kernel_matches_the_scalar_loop() {
        let k = 1024;
        let mut x = vec_f32(11, k);
        // Ties, saturation edges and non-finite values.
        x[5] = f32::NAN;
        x[40] = f32::INFINITY;
        x[70] = -3.5;
        x[71] = 3.5;
        x[100..132].fill(0.0);
        for (i, v) in x[200..232].iter_mut().enumerate() {
            *v = (i as f32 - 16.0) * 0.5;
        }
        let nb = k / QK;
        let (mut q1, mut d1, mut s1) = (vec![0i8; k], vec![0f32; nb], vec![0i32; nb]);
        let (mut q2, mut d2, mut s2) = (vec![0i8; k], vec![0f32; nb], vec![0i32; nb]);
        quantize_row(&x, &mut q1, &mut d1, &mut s1);
        quantize_row_scalar(&x, &mut q2, &mut d2, &mut s2);
        assert_eq!(q1, q2);
        assert_eq!(s1, s2);
        assert!(d1.iter().zip(&d2).all(|(a, b)| a.to_bits() == b.to_bits()));
        for (q, d, s) in simd_paths(&x) {
            assert_eq!((q, s), (q2.clone(), s2.clone()));
            assert!(d.iter().zip(&d2).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    /// A row's codes, scales and sums.
    type Row = (Vec<i8>, Vec<f32>, Vec<i32>);

    /// Every SIMD twin of `quantize_row` this CPU can run, on `x`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))] // x86 twins only
    fn simd_paths(x: &[f32]) -> Vec<Row> {
        #[allow(unused_mut)] // pushed to on x86 only
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let nb = x.len() / QK;
            type RowFn = unsafe fn(&[f32], &mut [i8], &mut [f32], &mut [i32]);
            let run = |f: RowFn| {
                let (mut q, mut d, mut s) = (vec![0i8; x.len()], vec![0f32; nb], vec![0i32; nb]);
                // SAFETY: called only where the features were detected.
                unsafe { f(x, &mut q, &mut d, &mut s) };
                (q, d, s)
            };
            let has = |f| std::is_x86_feature_detected!("fma") && f;
            if has(std::is_x86_feature_detected!("avx2")) {
                v.push(run(x86::quantize_row_avx2));
            }
            if has(std::is_x86_feature_detected!("avx512f"))
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
            {
                v.push(run(x86::quantize_row));
            }
        }
        v
    }

    /// A random row of `nb` blocks of `block` values with zeros, ties,
    /// huge, tiny and non-finite values at `specials` (index, kind), and
    /// its second block all subnormals (the scale's inverse overflows).
    fn special_row(seed: u64, nb: usize, block: usize, specials: &[(usize, usize)]) -> Vec<f32> {
        let k = nb * block;
        let mut x = vec_f32(seed, k);
        for &(i, kind) in specials {
            if i < k {
                x[i] = [
                    0.0,
                    f32::NAN,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    2.5,
                    -1e30,
                    1e-44,
                    -3e-45,
                ][kind];
            }
        }
        if nb > 1 {
            let half = block as f32 / 2.0;
            x[block..2 * block]
                .iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v = (j as f32 - half) * 1e-45);
        }
        x
    }

    proptest::proptest! {
        /// The SIMD rows give the scalar row's bits on random rows of any
        /// whole number of blocks, with zeros, ties, huge, tiny (subnormal
        /// scale) and non-finite values mixed in.
        #[test]
        fn simd_rows_are_bit_identical(nb in 0usize..9, seed in proptest::prelude::any::<u64>(),
                                       specials in proptest::collection::vec((0usize..288, 0usize..8), 0..12)) {
            let k = nb * QK;
            let x = special_row(seed, nb, QK, &specials);
            let (mut q, mut d, mut s) = (vec![0i8; k], vec![0f32; nb], vec![0i32; nb]);
            quantize_row_scalar(&x, &mut q, &mut d, &mut s);
            for (q2, d2, s2) in simd_paths(&x) {
                proptest::prop_assert_eq!(&q2, &q);
                proptest::prop_assert_eq!(&s2, &s);
                proptest::prop_assert!(d2.iter().zip(&d).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    /// A 256-value row quantizer (`quantize_row_k` and its scalar twin).
    type KRowFn = fn(&[f32], &mut [i8], &mut [f32], &mut [i16]);

    proptest::proptest! {
        /// `quantize_row_k` (AVX-512 where this CPU has it) gives the
        /// scalar row's bits, with the specials of the 32-value test.
        #[test]
        fn k_rows_are_bit_identical(nb in 0usize..4, seed in proptest::prelude::any::<u64>(),
                                    specials in proptest::collection::vec((0usize..1024, 0usize..8), 0..12)) {
            let k = nb * QK_K;
            let x = special_row(seed, nb, QK_K, &specials);
            let run = |f: KRowFn| {
                let (mut q, mut d, mut s) = (vec![0i8; k], vec![0f32; nb], vec![0i16; 16 * nb]);
                f(&x, &mut q, &mut d, &mut s);
                (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), s)
            };
            proptest::prop_assert_eq!(run(quantize_row_k), run(quantize_row_k_scalar));
        }
    }

    #[test]
    fn zero_and_non_finite_blocks_do_not_panic() {
        let mut x = vec![0.0f32; 256];
        x[3] = f32::NAN;
        x[40] = f32::INFINITY;
        let a = ActQ8::quantize(&x, 1, 256);
        assert_eq!(a.d[0], 0.0);
        let _ = ActQ8K::quantize(&x, 1, 256);
        let e = ActQ8::quantize(&[], 0, 64);
        assert!(e.qs.is_empty());
    }
}
