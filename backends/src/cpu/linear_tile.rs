//! The one way a float linear computes an output: `R` activation rows by
//! `C` weight rows (f32, f16 or bf16, widened on the fly), each output with
//! its own accumulator fed the same chunks in the same order, reduced the
//! same way. Every tile shape therefore gives an output the same bits, and
//! so does a weight row widened beforehand (widening is exact): `linear`
//! gives each row of a step exactly what a step of that row alone gives
//! (`cpu::ROW_INVARIANT_STEP`), whichever tiles its row count picks.
//!
//! Per path: AVX-512 F/BW/VL, one 16-lane accumulator and a masked last
//! chunk; AVX2 + FMA, one 8-lane accumulator, then the last `k % 8` products
//! added one by one; elsewhere (NEON, portable) `simd::dot` on the widened
//! weight row.

use half::{bf16, f16};

/// A weight element the tiles read: f32, or a half type widened exactly.
pub trait Weight: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    /// The row itself when it is f32 already (no widened copy).
    #[inline(always)]
    fn as_f32(_row: &[Self]) -> Option<&[f32]> {
        None
    }
    /// 16 values at `p` (lanes where `mask` is clear read nothing, are 0).
    ///
    /// # Safety
    /// The lanes of `mask` must be readable; AVX-512 F/BW/VL present.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self, mask: u16) -> std::arch::x86_64::__m512;
    /// 8 values at `p`.
    ///
    /// # Safety
    /// 8 values readable; AVX2 + FMA + F16C present.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

impl Weight for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn as_f32(row: &[f32]) -> Option<&[f32]> {
        Some(row)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32, mask: u16) -> __m512 {
        _mm512_maskz_loadu_ps(mask, p)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
}

impl Weight for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f16, mask: u16) -> __m512 {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p as *const i16))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
}

impl Weight for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    /// bf16 -> f32 is a 16-bit shift of the zero-extended value.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const bf16, mask: u16) -> __m512 {
        let h = _mm256_maskz_loadu_epi16(mask, p as *const i16);
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const bf16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}

/// Which tiles run: the widest this CPU has unless one is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Avx512,
    Avx2,
    Portable,
}

impl Path {
    /// What `linear` uses (`MLLM_ISA` can narrow it, as for the quantized
    /// kernels).
    pub fn best() -> Path {
        if super::qlinear::Isa::allows_avx512() {
            Path::Avx512
        } else if super::qlinear::Isa::allows_avx2() {
            Path::Avx2
        } else {
            Path::Portable
        }
    }

    /// Every path this CPU can run (for tests).
    pub fn available() -> Vec<Path> {
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut v = vec![Path::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c");
            if avx2 {
                v.push(Path::Avx2);
            }
            if avx2
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
            {
                v.push(Path::Avx512);
            }
        }
        v
    }

    /// Activation rows a tile of this path takes at once (4 on AVX-512,
    /// whose 32 registers hold 16 accumulators; 2 elsewhere).
    pub fn rows(self) -> usize {
        match self {
            Path::Avx512 => 4,
            _ => 2,
        }
    }
}

/// `out[r][c] = a[r] . b[c]` (all `k` long) on `path`, which must be one
/// of `Path::available()`.
#[inline]
pub fn tile<W: Weight, const R: usize, const C: usize>(
    path: Path,
    a: [&[f32]; R],
    b: [&[W]; C],
) -> [[f32; C]; R] {
    let k = a.first().map_or(0, |r| r.len());
    debug_assert!(a.iter().all(|r| r.len() == k) && b.iter().all(|r| r.len() == k));
    match path {
        // SAFETY: the path is available (the caller's contract, checked by
        // `Path::best` / `Path::available`), and every row is `k` long.
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { x86::tile512::<W, R, C>(a, b, k) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { x86::tile256::<W, R, C>(a, b, k) },
        _ => portable(a, b),
    }
}

/// `simd::dot` against each weight row (widened into a per-thread buffer
/// unless f32).
fn portable<W: Weight, const R: usize, const C: usize>(
    a: [&[f32]; R],
    b: [&[W]; C],
) -> [[f32; C]; R] {
    thread_local! {
        static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut out = [[0.0; C]; R];
    for (c, bc) in b.iter().enumerate() {
        if let Some(row) = W::as_f32(bc) {
            for (r, ar) in a.iter().enumerate() {
                out[r][c] = super::simd::dot(ar, row);
            }
            continue;
        }
        WIDE.with_borrow_mut(|wide| {
            wide.clear();
            wide.extend(bc.iter().map(|v| v.to_f32()));
            for (r, ar) in a.iter().enumerate() {
                out[r][c] = super::simd::dot(ar, wide);
            }
        });
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Weight;
    use std::arch::x86_64::*;

    /// Each tile prefetches, beside every chunk it loads, the same chunk of
    /// the weight rows `C` further on: the next tile's (`linear::sweep`
    /// takes a block's rows in order, and they follow each other in
    /// memory; a prefetch past the block's end is wasted, never a fault).
    /// A decode step's tile (one activation row) waits on memory: its loop
    /// is a few instructions per 16 weights, so the core's window holds too
    /// few loads in flight for half-precision rows (2 bytes a weight), and
    /// rows of a KiB or two end before the hardware prefetcher gets ahead.
    /// `QBENCH_SHAPE=NxK qbench 2 bf16`, GEMV from memory, 2 threads:
    /// 3072x1024 19.6 -> 34 GB/s, 1536x576 19.8 -> 31, 576x1536 31 -> 40,
    /// 49152x576 19.1 -> 29-30 (f32 unchanged at ~42-50). The same row 1
    /// KiB ahead instead gained on the first shape only (its target is the
    /// row after, which the next stream reads already). Into L2: a tile's
    /// lookahead is C rows (e.g. 32 KiB for 4 f32 rows of 2048).
    const HINT: i32 = _MM_HINT_T1;

    /// Whether the chunk of `n` weights at `i` starts a new 64-byte span of
    /// its row: only then does a tile prefetch, once per cache line (a
    /// prefetch per chunk asked for each line of a half-precision row
    /// twice, or four times in 8-weight chunks, and every prefetch takes a
    /// load slot beside the loads the tile waits on).
    #[inline(always)]
    fn starts_line<W>(i: usize, n: usize) -> bool {
        let chunks = (64 / (n * std::mem::size_of::<W>())).max(1);
        (i / n).is_multiple_of(chunks)
    }

    /// One chunk of 16 weights (`m`: the lanes that exist) for every tile
    /// row and column. A function, not a closure inside `tile512`: LLVM
    /// left that closure out of line for the larger tiles, and then the
    /// accumulators lived on the stack, loaded and stored at every chunk
    /// (F16 GEMMs of 8 to 128 rows ran at under half this speed).
    #[inline(always)]
    unsafe fn step512<W: Weight, const R: usize, const C: usize>(
        acc: &mut [[__m512; C]; R],
        a: &[&[f32]; R],
        b: &[&[W]; C],
        k: usize,
        i: usize,
        m: u16,
    ) {
        let mut x = [_mm512_setzero_ps(); R];
        for r in 0..R {
            x[r] = _mm512_maskz_loadu_ps(m, a[r].as_ptr().add(i));
        }
        let pf = starts_line::<W>(i, 16);
        for c in 0..C {
            if pf {
                let ahead = b[c].as_ptr().wrapping_add(i + C * k);
                _mm_prefetch::<HINT>(ahead as *const i8);
            }
            let w = W::load16(b[c].as_ptr().add(i), m);
            for r in 0..R {
                acc[r][c] = _mm512_fmadd_ps(x[r], w, acc[r][c]);
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub unsafe fn tile512<W: Weight, const R: usize, const C: usize>(
        a: [&[f32]; R],
        b: [&[W]; C],
        k: usize,
    ) -> [[f32; C]; R] {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut i = 0;
        while i + 16 <= k {
            step512(&mut acc, &a, &b, k, i, 0xFFFF);
            i += 16;
        }
        if i < k {
            step512(&mut acc, &a, &b, k, i, ((1u32 << (k - i)) - 1) as u16);
        }
        let mut out = [[0.0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = _mm512_reduce_add_ps(acc[r][c]);
            }
        }
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tile256<W: Weight, const R: usize, const C: usize>(
        a: [&[f32]; R],
        b: [&[W]; C],
        k: usize,
    ) -> [[f32; C]; R] {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut i = 0;
        while i + 8 <= k {
            let mut x = [_mm256_setzero_ps(); R];
            for r in 0..R {
                x[r] = _mm256_loadu_ps(a[r].as_ptr().add(i));
            }
            let pf = starts_line::<W>(i, 8);
            for c in 0..C {
                if pf {
                    let ahead = b[c].as_ptr().wrapping_add(i + C * k);
                    _mm_prefetch::<HINT>(ahead as *const i8);
                }
                let w = W::load8(b[c].as_ptr().add(i));
                for r in 0..R {
                    acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
                }
            }
            i += 8;
        }
        let mut out = [[0.0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let mut s = hsum(acc[r][c]);
                for e in i..k {
                    s += a[r][e] * b[c][e].to_f32();
                }
                out[r][c] = s;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::dot_ref;
    use crate::cpu::testutil::vec_f32;
    use proptest::prelude::*;

    proptest! {
        // Every path near the plain dot; every tile shape the same bits as
        // a 1x1 tile, for f32 and for half weights against their widened
        // f32 copy.
        #[test]
        fn tiles_agree_with_one_by_one(k in 0usize..100, seed in any::<u64>()) {
            let rows: Vec<Vec<f32>> = (0..8).map(|i| vec_f32(seed ^ i, k)).collect();
            let a = [&rows[0][..], &rows[1], &rows[2], &rows[3]];
            let wf = [&rows[4][..], &rows[5], &rows[6], &rows[7]];
            let wh: Vec<Vec<f16>> = rows[4..].iter().map(|r| r.iter().map(|&v| f16::from_f32(v)).collect()).collect();
            let wh_wide: Vec<Vec<f32>> = wh.iter().map(|r| r.iter().map(|v| v.to_f32()).collect()).collect();
            for path in Path::available() {
                let t = tile::<f32, 4, 4>(path, a, wf);
                let h = tile::<f16, 4, 4>(path, a, [&wh[0][..], &wh[1], &wh[2], &wh[3]]);
                for r in 0..4 {
                    for c in 0..4 {
                        let one = tile::<f32, 1, 1>(path, [a[r]], [wf[c]])[0][0];
                        prop_assert_eq!(t[r][c].to_bits(), one.to_bits(), "{:?} f32 [{}][{}]", path, r, c);
                        let want = dot_ref(a[r], wf[c]);
                        prop_assert!((one - want).abs() <= 1e-4 * (1.0 + want.abs()));
                        let wide = tile::<f32, 1, 1>(path, [a[r]], [&wh_wide[c][..]])[0][0];
                        prop_assert_eq!(h[r][c].to_bits(), wide.to_bits(), "{:?} f16 [{}][{}]", path, r, c);
                    }
                }
            }
        }
    }
}
