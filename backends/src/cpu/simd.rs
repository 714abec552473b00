//! Inner loops shared by the CPU kernels, each with a portable reference and
//! SIMD paths picked at run time (AVX2+FMA on x86-64, NEON on aarch64).

/// Plain dot product, the reference for `dot`.
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Dot product of two equally long slices.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::qlinear::Isa::allows_avx2() {
            // SAFETY: the features were detected.
            return unsafe { x86::dot_avx2(a, b) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: NEON is part of the aarch64 baseline.
        return unsafe { arm::dot_neon(a, b) };
    }
    #[allow(unreachable_code)]
    dot_unrolled(a, b)
}

/// Portable dot with eight independent accumulators, which LLVM vectorises
/// on targets without an explicit path.
pub fn dot_unrolled(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        s += a[i] * b[i];
    }
    s
}

/// Dot product of f32 activations with bf16 weights, widening on the fly.
#[inline]
pub fn dot_bf16(a: &[f32], b: &[half::bf16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::qlinear::Isa::allows_avx2() {
            // SAFETY: the features were detected.
            return unsafe { x86::dot_bf16_avx2(a, b) };
        }
    }
    dot_bf16_ref(a, b)
}

/// Reference for `dot_bf16`.
pub fn dot_bf16_ref(a: &[f32], b: &[half::bf16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

/// Dot product of f32 activations with f16 weights, widening on the fly.
#[inline]
pub fn dot_f16(a: &[f32], b: &[half::f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::qlinear::Isa::allows_avx2() {
            // SAFETY: the features were detected.
            return unsafe { x86::dot_f16_avx2(a, b) };
        }
    }
    dot_f16_ref(a, b)
}

/// Reference for `dot_f16`.
pub fn dot_f16_ref(a: &[f32], b: &[half::f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y.to_f32()).sum()
}

/// Eight dot products at once: rows `a0, a1` against rows `b0..b3`
/// (all of length `k`), as `out[i * 4 + j] = a_i . b_j`. Sharing each load
/// across four (or two) products is what makes prefill compute-bound rather
/// than load-bound.
#[inline]
pub fn dot_2x4(a: [&[f32]; 2], b: [&[f32]; 4]) -> [f32; 8] {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::qlinear::Isa::allows_avx512() {
            // SAFETY: the features were detected.
            return unsafe { x86::dot_2x4_avx512(a, b) };
        }
        if crate::cpu::qlinear::Isa::allows_avx2() {
            // SAFETY: the features were detected.
            return unsafe { x86::dot_2x4_avx2(a, b) };
        }
    }
    let mut out = [0.0; 8];
    for i in 0..2 {
        for j in 0..4 {
            out[i * 4 + j] = dot(a[i], b[j]);
        }
    }
    out
}

/// `dot_2x4` for four rows of `a`: the same 16 dot products, each computed
/// exactly as `dot_2x4` computes it (its own accumulator, the same order
/// and reduction), so a 4x4 tile equals two 2x4 tiles bit for bit; on
/// AVX-512 the weight rows are loaded once for all four rows (half the
/// loads per multiply-add, which the 2x4 tile is bound by).
pub fn dot_4x4(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::qlinear::Isa::allows_avx512() {
        // SAFETY: the features were detected.
        return unsafe { x86::dot_4x4_avx512(a, b) };
    }
    let lo = dot_2x4([a[0], a[1]], b);
    let hi = dot_2x4([a[2], a[3]], b);
    let mut out = [0.0; 16];
    out[..8].copy_from_slice(&lo);
    out[8..].copy_from_slice(&hi);
    out
}

/// `y += alpha * x`.
#[inline]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(acc: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(acc, 1);
        let lo = _mm256_castps256_ps128(acc);
        let s4 = _mm_add_ps(hi, lo);
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        _mm_cvtss_f32(s1)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_2x4_avx2(a: [&[f32]; 2], b: [&[f32]; 4]) -> [f32; 8] {
        let n = a
            .iter()
            .map(|r| r.len())
            .chain(b.iter().map(|r| r.len()))
            .min()
            .unwrap_or(0);
        let (a0, a1) = (a[0].as_ptr(), a[1].as_ptr());
        let (b0, b1, b2, b3) = (b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr());
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut i = 0;
        while i + 8 <= n {
            let x0 = _mm256_loadu_ps(a0.add(i));
            let x1 = _mm256_loadu_ps(a1.add(i));
            let w0 = _mm256_loadu_ps(b0.add(i));
            let w1 = _mm256_loadu_ps(b1.add(i));
            let w2 = _mm256_loadu_ps(b2.add(i));
            let w3 = _mm256_loadu_ps(b3.add(i));
            acc[0] = _mm256_fmadd_ps(x0, w0, acc[0]);
            acc[1] = _mm256_fmadd_ps(x0, w1, acc[1]);
            acc[2] = _mm256_fmadd_ps(x0, w2, acc[2]);
            acc[3] = _mm256_fmadd_ps(x0, w3, acc[3]);
            acc[4] = _mm256_fmadd_ps(x1, w0, acc[4]);
            acc[5] = _mm256_fmadd_ps(x1, w1, acc[5]);
            acc[6] = _mm256_fmadd_ps(x1, w2, acc[6]);
            acc[7] = _mm256_fmadd_ps(x1, w3, acc[7]);
            i += 8;
        }
        let mut out = [0.0f32; 8];
        for (o, v) in out.iter_mut().zip(acc) {
            *o = hsum(v);
        }
        let rows = [a0, a1];
        let cols = [b0, b1, b2, b3];
        while i < n {
            for r in 0..2 {
                for c in 0..4 {
                    out[r * 4 + c] += *rows[r].add(i) * *cols[c].add(i);
                }
            }
            i += 1;
        }
        out
    }

    /// `dot_2x4` on 512-bit vectors (twice the products per load and
    /// multiply-add); the tail of `n % 16` values as masked loads.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn dot_2x4_avx512(a: [&[f32]; 2], b: [&[f32]; 4]) -> [f32; 8] {
        let n = a
            .iter()
            .map(|r| r.len())
            .chain(b.iter().map(|r| r.len()))
            .min()
            .unwrap_or(0);
        let rows = [a[0].as_ptr(), a[1].as_ptr()];
        let cols = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut step = |i: usize, m: __mmask16| {
            let x = [
                _mm512_maskz_loadu_ps(m, rows[0].add(i)),
                _mm512_maskz_loadu_ps(m, rows[1].add(i)),
            ];
            for c in 0..4 {
                let w = _mm512_maskz_loadu_ps(m, cols[c].add(i));
                acc[c] = _mm512_fmadd_ps(x[0], w, acc[c]);
                acc[4 + c] = _mm512_fmadd_ps(x[1], w, acc[4 + c]);
            }
        };
        let mut i = 0;
        while i + 16 <= n {
            step(i, 0xFFFF);
            i += 16;
        }
        if i < n {
            step(i, ((1u32 << (n - i)) - 1) as __mmask16);
        }
        let mut out = [0.0f32; 8];
        for (o, v) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(v);
        }
        out
    }

    /// `dot_2x4_avx512` for four rows: 16 accumulators, each fed exactly
    /// as there.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn dot_4x4_avx512(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
        let n = a
            .iter()
            .map(|r| r.len())
            .chain(b.iter().map(|r| r.len()))
            .min()
            .unwrap_or(0);
        let rows = [a[0].as_ptr(), a[1].as_ptr(), a[2].as_ptr(), a[3].as_ptr()];
        let cols = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut acc = [_mm512_setzero_ps(); 16];
        let mut step = |i: usize, m: __mmask16| {
            let x = [
                _mm512_maskz_loadu_ps(m, rows[0].add(i)),
                _mm512_maskz_loadu_ps(m, rows[1].add(i)),
                _mm512_maskz_loadu_ps(m, rows[2].add(i)),
                _mm512_maskz_loadu_ps(m, rows[3].add(i)),
            ];
            for c in 0..4 {
                let w = _mm512_maskz_loadu_ps(m, cols[c].add(i));
                for r in 0..4 {
                    acc[r * 4 + c] = _mm512_fmadd_ps(x[r], w, acc[r * 4 + c]);
                }
            }
        };
        let mut i = 0;
        while i + 16 <= n {
            step(i, 0xFFFF);
            i += 16;
        }
        if i < n {
            step(i, ((1u32 << (n - i)) - 1) as __mmask16);
        }
        let mut out = [0.0f32; 16];
        for (o, v) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(v);
        }
        out
    }

    /// bf16 -> f32 is a 16-bit shift: load 8 u16, zero-extend, shift left.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_bf16_avx2(a: &[f32], b: &[half::bf16]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr() as *const u16);
        let widen = |p: *const u16| {
            _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
                16,
            ))
        };
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), widen(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8)), widen(pb.add(i + 8)), acc1);
            i += 16;
        }
        while i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), widen(pb.add(i)), acc0);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            s += *pa.add(i) * f32::from_bits((*pb.add(i) as u32) << 16);
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f16_avx2(a: &[f32], b: &[half::f16]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr() as *const u16);
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i)),
                _mm256_cvtph_ps(_mm_loadu_si128(pb.add(i) as *const __m128i)),
                acc0,
            );
            acc1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_cvtph_ps(_mm_loadu_si128(pb.add(i + 8) as *const __m128i)),
                acc1,
            );
            i += 16;
        }
        while i + 8 <= n {
            acc0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i)),
                _mm256_cvtph_ps(_mm_loadu_si128(pb.add(i) as *const __m128i)),
                acc0,
            );
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            s += *pa.add(i) * half::f16::from_bits(*pb.add(i)).to_f32();
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                acc1,
            );
            acc2 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 16)),
                _mm256_loadu_ps(pb.add(i + 16)),
                acc2,
            );
            acc3 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 24)),
                _mm256_loadu_ps(pb.add(i + 24)),
                acc3,
            );
            i += 32;
        }
        while i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            i += 8;
        }
        let acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
        let hi = _mm256_extractf128_ps(acc, 1);
        let lo = _mm256_castps256_ps128(acc);
        let s4 = _mm_add_ps(hi, lo);
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        let mut s = _mm_cvtss_f32(s1);
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    pub unsafe fn dot_neon(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = vdupq_n_f32(0.0);
        let mut acc1 = vdupq_n_f32(0.0);
        let mut i = 0;
        while i + 8 <= n {
            acc0 = vfmaq_f32(acc0, vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
            acc1 = vfmaq_f32(acc1, vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)));
            i += 8;
        }
        let mut s = vaddvq_f32(vaddq_f32(acc0, acc1));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn dot_matches_reference(v in proptest::collection::vec((-4.0f32..4.0, -4.0f32..4.0), 0..300)) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let r = dot_ref(&a, &b);
            let tol = 1e-5 * (1.0 + a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum::<f32>());
            prop_assert!((dot(&a, &b) - r).abs() <= tol);
            prop_assert!((dot_unrolled(&a, &b) - r).abs() <= tol);
            let bb: Vec<half::bf16> = b.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let bh: Vec<half::f16> = b.iter().map(|&v| half::f16::from_f32(v)).collect();
            prop_assert!((dot_bf16(&a, &bb) - dot_bf16_ref(&a, &bb)).abs() <= tol);
            prop_assert!((dot_f16(&a, &bh) - dot_f16_ref(&a, &bh)).abs() <= tol);
        }

        // A 4x4 tile is two 2x4 tiles, bit for bit (so `linear` gives
        // every output the same value whichever tile computed it).
        #[test]
        fn dot_4x4_is_two_2x4_tiles_exactly(k in 0usize..90, seed in any::<u64>()) {
            let rows: Vec<Vec<f32>> = (0..8).map(|i| crate::cpu::testutil::vec_f32(seed ^ i, k)).collect();
            let a = [&rows[0][..], &rows[1], &rows[2], &rows[3]];
            let b = [&rows[4][..], &rows[5], &rows[6], &rows[7]];
            let got = dot_4x4(a, b);
            let lo = dot_2x4([a[0], a[1]], b);
            let hi = dot_2x4([a[2], a[3]], b);
            for j in 0..8 {
                prop_assert_eq!(got[j].to_bits(), lo[j].to_bits());
                prop_assert_eq!(got[8 + j].to_bits(), hi[j].to_bits());
            }
        }

        #[test]
        fn dot_2x4_matches_single_dots(k in 0usize..90, seed in any::<u64>()) {
            let rows: Vec<Vec<f32>> = (0..6).map(|i| crate::cpu::testutil::vec_f32(seed ^ i, k)).collect();
            let (a, b) = ([&rows[0][..], &rows[1]], [&rows[2][..], &rows[3], &rows[4], &rows[5]]);
            #[allow(unused_mut)] // pushed to on x86 only
            let mut paths = vec![dot_2x4(a, b)];
            // The AVX2 path too where AVX-512 takes the dispatch.
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                paths.push(unsafe { x86::dot_2x4_avx2(a, b) });
            }
            for got in paths {
                for i in 0..2 {
                    for j in 0..4 {
                        let r = dot_ref(&rows[i], &rows[2 + j]);
                        prop_assert!((got[i * 4 + j] - r).abs() <= 1e-4 * (1.0 + r.abs()));
                    }
                }
            }
        }
    }
}
