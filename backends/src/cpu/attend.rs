//! The inner loops of decode attention (`attention::sdpa_rows`): one key
//! head's group of query heads against its keys and values, stored as f32
//! or f16 (a KV cache), with AVX2 + FMA + F16C. Each key and value row is
//! loaded (and f16 widened in registers) once for the whole group; the
//! dots keep two accumulators per head so a long context is not bound by
//! one multiply-add chain. The generic path of `sdpa_rows` (a widened row
//! per key, then `dot`/`axpy`) is the reference these are tested against.

use half::f16;

use super::attention::Rows;

/// `scores[g * n + j] = scale * (q_g . k_j)` and `mx[g]` the largest score
/// of head `g`, for the `group` query heads in `q` (`group * d` values) and
/// keys `j < n` (row `j * hk + kh` of `k`). `false` when no fast path fits
/// (the caller runs the generic loop).
#[allow(clippy::too_many_arguments)]
pub(super) fn group_scores(
    q: &[f32],
    k: Rows,
    kh: usize,
    hk: usize,
    d: usize,
    n: usize,
    scale: f32,
    scores: &mut [f32],
    mx: &mut [f32],
) -> bool {
    let group = mx.len();
    if !fast(d, group) || q.len() < group * d || scores.len() < group * n {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! go {
            ($t:ty, $s:expr) => {{
                if !rows_fit($s.len(), n, hk, kh, d) {
                    return false;
                }
                let base = unsafe { $s.as_ptr().add(kh * d) };
                // SAFETY: features checked by `fast`; rows j < n of stride
                // hk * d from `base` lie inside the slice (checked above).
                unsafe {
                    match group {
                        1 => x86::scores::<$t, 1>(q, base, hk * d, d, n, scale, scores, mx),
                        2 => x86::scores::<$t, 2>(q, base, hk * d, d, n, scale, scores, mx),
                        3 => x86::scores::<$t, 3>(q, base, hk * d, d, n, scale, scores, mx),
                        _ => x86::scores::<$t, 4>(q, base, hk * d, d, n, scale, scores, mx),
                    }
                }
                true
            }};
        }
        match k {
            Rows::F32(s) => go!(f32, s),
            Rows::F16(s) => go!(f16, s),
            Rows::Q8_0(_) => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, kh, hk, n, scale);
        false
    }
}

/// `o[g * dv ..][..dv] += sum_j exps[g * n + j] * inv[g] * v_j` for the
/// group's heads (`o` zero on entry is the caller's). `false` when no fast
/// path fits.
#[allow(clippy::too_many_arguments)]
pub(super) fn group_values(
    exps: &[f32],
    inv: &[f32],
    v: Rows,
    kh: usize,
    hk: usize,
    dv: usize,
    n: usize,
    o: &mut [f32],
) -> bool {
    let group = inv.len();
    if !fast(dv, group) || exps.len() < group * n || o.len() < group * dv {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! go {
            ($t:ty, $s:expr) => {{
                if !rows_fit($s.len(), n, hk, kh, dv) {
                    return false;
                }
                let base = unsafe { $s.as_ptr().add(kh * dv) };
                // SAFETY: as in `group_scores`.
                unsafe {
                    match group {
                        1 => x86::values::<$t, 1>(exps, inv, base, hk * dv, dv, n, o),
                        2 => x86::values::<$t, 2>(exps, inv, base, hk * dv, dv, n, o),
                        3 => x86::values::<$t, 3>(exps, inv, base, hk * dv, dv, n, o),
                        _ => x86::values::<$t, 4>(exps, inv, base, hk * dv, dv, n, o),
                    }
                }
                true
            }};
        }
        match v {
            Rows::F32(s) => go!(f32, s),
            Rows::F16(s) => go!(f16, s),
            Rows::Q8_0(_) => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (v, kh, hk, n);
        false
    }
}

/// `dst = src` widened, with F16C in registers where the CPU has it (the
/// `half` crate's slice conversion calls out per 8 values).
pub(super) fn widen_f16(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if fast(8, 1) && src.len() == dst.len() {
        // SAFETY: features checked by `fast`; equal lengths.
        unsafe { x86::widen(src, dst) };
        return;
    }
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
}

/// Whether rows `j * hk + kh` (j < n) of `width` values lie inside a
/// slice of `len` values (and the head's first row starts inside it).
#[cfg(target_arch = "x86_64")]
fn rows_fit(len: usize, n: usize, hk: usize, kh: usize, width: usize) -> bool {
    let needed = match n {
        0 => kh * width,
        _ => ((n - 1) * hk + kh + 1) * width,
    };
    len >= needed
}

/// Whether the fast loops apply: x86 with AVX2, FMA and F16C, rows of whole
/// 8-value vectors, at most 4 query heads per key head.
fn fast(width: usize, group: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::qlinear::Isa::allows_avx2()
            && width > 0
            && width.is_multiple_of(8)
            && (1..=4).contains(&group)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, group);
        false
    }
}

// The kernels index small register arrays by head on purpose.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    /// Eight values of a row as f32 lanes.
    pub(super) trait Load8 {
        unsafe fn load8(p: *const Self) -> __m256;
    }

    impl Load8 for f32 {
        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
    }

    impl Load8 for f16 {
        #[inline(always)]
        unsafe fn load8(p: *const f16) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen(src: &[f16], dst: &mut [f32]) {
        let n = src.len();
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(d.add(i), f16::load8(s.add(i)));
            i += 8;
        }
        while i < n {
            *d.add(i) = (*s.add(i)).to_f32();
            i += 1;
        }
    }

    /// Rows ahead that the loops below prefetch. A decode step finds the
    /// cache rows cold (the weights streamed through the caches since the
    /// last step) and reads a head's rows at a stride of `hk` rows, which
    /// the hardware prefetchers pick up too late for a short context:
    /// before, the scores and values loops stalled on every row (~5% of a
    /// 1-thread Q8_0 decode at 64 tokens of context).
    const AHEAD: usize = 6;

    /// Prefetches the `bytes` of the row at `p` into L1.
    #[inline(always)]
    unsafe fn prefetch_row(p: *const u8, bytes: usize) {
        let mut b = 0;
        while b < bytes {
            _mm_prefetch::<_MM_HINT_T0>(p.add(b) as *const i8);
            b += 64;
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn scores<T: Load8, const G: usize>(
        q: &[f32],
        k: *const T,
        stride: usize,
        d: usize,
        n: usize,
        scale: f32,
        scores: &mut [f32],
        mx: &mut [f32],
    ) {
        let qp = q.as_ptr();
        let mut best = [f32::NEG_INFINITY; G];
        let bytes = d * std::mem::size_of::<T>();
        for j in 0..n {
            let kj = k.add(j * stride);
            if j + AHEAD < n {
                prefetch_row(k.add((j + AHEAD) * stride) as *const u8, bytes);
            }
            let mut acc = [[_mm256_setzero_ps(); 2]; G];
            let mut c = 0;
            while c + 16 <= d {
                let (k0, k1) = (T::load8(kj.add(c)), T::load8(kj.add(c + 8)));
                for g in 0..G {
                    let qg = qp.add(g * d + c);
                    acc[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), k0, acc[g][0]);
                    acc[g][1] = _mm256_fmadd_ps(_mm256_loadu_ps(qg.add(8)), k1, acc[g][1]);
                }
                c += 16;
            }
            if c < d {
                let k0 = T::load8(kj.add(c));
                for g in 0..G {
                    let qg = qp.add(g * d + c);
                    acc[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), k0, acc[g][0]);
                }
            }
            for g in 0..G {
                let s = hsum(_mm256_add_ps(acc[g][0], acc[g][1])) * scale;
                *scores.get_unchecked_mut(g * n + j) = s;
                best[g] = best[g].max(s);
            }
        }
        mx[..G].copy_from_slice(&best);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn values<T: Load8, const G: usize>(
        exps: &[f32],
        inv: &[f32],
        v: *const T,
        stride: usize,
        dv: usize,
        n: usize,
        o: &mut [f32],
    ) {
        let op = o.as_mut_ptr();
        let bytes = dv * std::mem::size_of::<T>();
        for j in 0..n {
            let vj = v.add(j * stride);
            if j + AHEAD < n {
                prefetch_row(v.add((j + AHEAD) * stride) as *const u8, bytes);
            }
            let mut p = [_mm256_setzero_ps(); G];
            for g in 0..G {
                p[g] = _mm256_set1_ps(*exps.get_unchecked(g * n + j) * inv[g]);
            }
            let mut c = 0;
            while c < dv {
                let x = T::load8(vj.add(c));
                for g in 0..G {
                    let dst = op.add(g * dv + c);
                    _mm256_storeu_ps(dst, _mm256_fmadd_ps(p[g], x, _mm256_loadu_ps(dst)));
                }
                c += 8;
            }
        }
    }
}
