//! The kernel engine shared by the 32-value block types (Q4_0, Q4_1, Q8_0,
//! Q5_0, Q5_1, IQ4_NL, MXFP4):
//! each type describes its block once (`Block32`: codes, scales, how SIMD
//! code loads it), and this file tiles `R` weight rows by `C` activation
//! rows, so every weight block is decoded once per `C` activation rows and
//! every activation block loaded once per `R` weight rows.
//!
//! Per block pair the work is an integer dot product of 32 codes (exact),
//! then one float multiply-add by `d_w * d_a`. The scalar twin
//! (`vec_dot`) computes the same integers block by block; the SIMD paths
//! differ from it only in the order of the float additions.
//!
//! Within a path there is one order: each output is one multiply-add chain
//! over its blocks (block pairs on 512-bit vectors) in block order, never
//! several chains added at the end. Every tile shape (one, two or four
//! weight rows by one to four activation rows) so gives an output the same
//! bits, and a step of several rows gives each row exactly what a step of
//! that row alone gives: what speculative decoding's verification and a
//! server's batched slots rely on (`backends/tests/row_invariance.rs`).
//! Decode hides the chain's latency with two weight rows per tile instead.

use super::act_quant::ActQ8;
use super::{drive, Isa, Out};
use crate::quant::QK;

/// A 32-value ggml block as the kernels see it. The methods are
/// `#[inline(always)]` so that they inline into the `#[target_feature]`
/// tile functions (and their intrinsics with them).
pub(super) trait Block32 {
    /// Bytes per block.
    const SIZE: usize;
    /// Whether the block has a minimum (`w = d * q + m`).
    const HAS_MIN: bool;
    /// The integer codes with their true sign (`w = d * code (+ m)`).
    fn codes(b: &[u8]) -> [i32; QK];
    /// Whether `d` is an e8m0 byte (MXFP4: `2^(e - 128)`) instead of an
    /// f16.
    const E8M0: bool = false;
    /// `(d, m)` of the block (`m` is 0 without a minimum). Every type keeps
    /// `d` as the f16 (MXFP4: the e8m0 byte) at byte 0 and `m` as the f16
    /// at byte 2, which the SIMD tiles read directly (`dm_x86`, `dm_neon`).
    #[inline(always)]
    fn dm(b: &[u8]) -> (f32, f32) {
        if Self::E8M0 {
            return (crate::quant::mxfp4::e8m0_to_fp32_half(b[0]), 0.0);
        }
        let f16 = |i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        (f16(0), if Self::HAS_MIN { f16(2) } else { 0.0 })
    }

    /// The codes as 32 bytes, in element order, as `dot_x86` wants them.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i;
    /// Eight i32 lanes summing to `sum(code * a)` over the block.
    #[cfg(target_arch = "x86_64")]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        sum_a: i32,
    ) -> std::arch::x86_64::__m256i;
    /// `(d, m)` read with F16C (inlined into tiles that enable it), from
    /// the layout every type shares (see `dm`).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dm_x86(p: *const u8) -> (f32, f32) {
        if Self::E8M0 {
            return (crate::quant::mxfp4::e8m0_to_fp32_half(*p), 0.0);
        }
        let m = if Self::HAS_MIN { f16_at(p.add(2)) } else { 0.0 };
        (f16_at(p), m)
    }
    /// Blocks at `p0` and `p1` as 64 unsigned bytes, `code + OFFSET`, for
    /// the 512-bit VNNI tiles.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i;
    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32;

    /// The codes with their true sign as two i8x16 (elements 0..16,
    /// 16..32): NEON's dot instructions are signed by signed.
    #[cfg(target_arch = "aarch64")]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2];
}

/// Scalar integer twin: one weight row against activation row `i`.
pub(super) fn vec_dot<B: Block32>(w: &[u8], act: &ActQ8, i: usize) -> f32 {
    let nb = act.blocks_per_row();
    let qs = &act.qs[i * act.k..(i + 1) * act.k];
    let (ds, sums) = (&act.d[i * nb..(i + 1) * nb], &act.sum[i * nb..(i + 1) * nb]);
    let mut acc = 0.0f32;
    let mut acc_min = 0.0f32;
    for b in 0..nb {
        let blk = &w[b * B::SIZE..(b + 1) * B::SIZE];
        let codes = B::codes(blk);
        let a = &qs[b * QK..(b + 1) * QK];
        let isum: i32 = codes.iter().zip(a).map(|(&c, &a)| c * a as i32).sum();
        let (d, m) = B::dm(blk);
        acc += (d * ds[b]) * isum as f32;
        if B::HAS_MIN {
            acc_min += m * (ds[b] * sums[b] as f32);
        }
    }
    acc + acc_min
}

/// Everything a tile needs: weight rows (`row_bytes` apart), the quantized
/// activations and the output `[m][nr]`, rows `ldo` apart.
pub(super) struct Ctx {
    pub(super) w: *const u8,
    pub(super) row_bytes: usize,
    pub(super) nb: usize,
    pub(super) aq: *const i8,
    pub(super) ad: *const f32,
    pub(super) asum: *const i32,
    /// `ActQ8::pairs` (the i8mm tiles' activations).
    #[cfg(target_arch = "aarch64")]
    pub(super) apairs: *const i8,
    /// `ActQ8::dsum` (the i8mm tiles' minimum terms).
    #[cfg(target_arch = "aarch64")]
    pub(super) adsum: *const f32,
    pub(super) out: *mut f32,
    /// Weight rows (the x86 x16 tiles walk their groups by it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) nr: usize,
    pub(super) ldo: usize,
    /// Activation rows of the whole step (how often a weight is read; the
    /// x86 tiles' prefetch distance).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) m: usize,
}

type TileFn = super::Tile<Ctx>;

/// The tile function `$f::<B, R, C>` for an `r x c` tile: R of 4, 2 or 1
/// weight rows, C of 1 to 4 activation rows (what `drive` asks for); one
/// table for every path (x86 256-bit, AVX-512 `zmm`, NEON).
macro_rules! tile_table {
    ($f:ident, $r:expr, $c:expr) => {
        match ($r, $c) {
            (4, 4) => $f::<B, 4, 4>,
            (4, 3) => $f::<B, 4, 3>,
            (4, 2) => $f::<B, 4, 2>,
            (4, 1) => $f::<B, 4, 1>,
            (2, 4) => $f::<B, 2, 4>,
            (2, 3) => $f::<B, 2, 3>,
            (2, 2) => $f::<B, 2, 2>,
            (2, 1) => $f::<B, 2, 1>,
            (1, 4) => $f::<B, 1, 4>,
            (1, 3) => $f::<B, 1, 3>,
            (1, 2) => $f::<B, 1, 2>,
            _ => $f::<B, 1, 1>,
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(super) use tile_table;

/// `out [m][nr] = act [m, k] . w [nr, k]^T` for weight rows `w`
/// (`nr` whole rows) with the kernels of `isa`.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
pub(super) unsafe fn gemm<B: Block32>(isa: Isa, w: &[u8], nr: usize, act: &ActQ8, out: Out) {
    let (m, nb) = (act.m, act.blocks_per_row());
    let row_bytes = nb * B::SIZE;
    assert!(w.len() == nr * row_bytes && out.ld >= nr);
    let ctx = Ctx {
        w: w.as_ptr(),
        row_bytes,
        nb,
        aq: act.qs.as_ptr(),
        ad: act.d.as_ptr(),
        asum: act.sum.as_ptr(),
        #[cfg(target_arch = "aarch64")]
        apairs: act.pairs.as_ptr(),
        #[cfg(target_arch = "aarch64")]
        adsum: act.dsum.as_ptr(),
        out: out.ptr,
        nr,
        ldo: out.ld,
        m,
    };
    // SAFETY (all arms): the tiles read rows j..j+R < nr of `w` (checked
    // above), rows i..i+C < m of the activations and write those cells of
    // `out` (the caller's); `isa` was detected on this machine.
    // Decode (a few activation rows): two weight rows per tile, whose
    // two multiply-add chains per activation row hide each other's
    // latency (every output sums in one chain: row invariance); tiles of 4
    // rows that stream in parallel measured 2x slower from memory (172 vs
    // 83 us for Q4_0 [3072 x 1024], 2 threads), tiles of 2 faster than one
    // row with two chains (qbench, AVX-512 VNNI: GEMV 0.85-0.9x the time).
    // Prefill: 4 rows per tile, each weight block decoded once per up to 4
    // activation rows.
    let rm = if m <= 4 { 2 } else { 4 };
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { drive(&ctx, nr, m, rm, 2, x86::tile_fn::<B, false>) },
        // 512-bit vectors, two blocks per instruction (`zmm.rs`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => unsafe { drive(&ctx, nr, m, rm, 4, super::zmm::tile_fn::<B>) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { drive(&ctx, nr, m, rm, 2, neon::tile_fn::<B, false>) },
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDot => unsafe { drive(&ctx, nr, m, rm, 4, neon::tile_fn::<B, true>) },
        // smmla computes a 2x2 tile at once, each block's integers summed
        // before the float finish (another order than the dotprod tiles):
        // prompt chunks only, so that decode, verification and batched
        // steps stay row-invariant (`ROW_INVARIANT_STEP`). Its activations
        // are the row pairs `ActQ8` made for it (read up to pair m / 2).
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm
            if m > crate::cpu::ROW_INVARIANT_STEP
                && act.pairs.len() == m / 2 * 2 * act.k
                && act.dsum.len() == act.d.len() =>
        unsafe { drive(&ctx, nr, m, 2, 2, neon::tile_fn_mm::<B>) },
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm => unsafe { drive(&ctx, nr, m, rm, 4, neon::tile_fn::<B, true>) },
        _ => {
            for j in 0..nr {
                let row = &w[j * row_bytes..(j + 1) * row_bytes];
                for i in 0..m {
                    *out.at(i, j) = vec_dot::<B>(row, act, i);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Block32, Ctx, TileFn};

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
    }

    /// One block of an R x C tile into the sums `acc` (a function,
    /// not a closure: closures are not always inlined, and out of line
    /// the intrinsics would be calls).
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn step<
        B: Block32,
        const R: usize,
        const C: usize,
        const VNNI: bool,
    >(
        acc: &mut [[__m256; C]; R],
        acc_min: &mut [[f32; C]; R],
        ctx: &Ctx,
        w0: *const u8,
        i: usize,
        b: usize,
    ) {
        let (nb, k) = (ctx.nb, ctx.nb * 32);
        let mut wv = [_mm256_setzero_si256(); R];
        let mut dw = [_mm256_setzero_ps(); R];
        let mut mw = [0.0f32; R];
        for r in 0..R {
            let p = w0.add(r * ctx.row_bytes + b * B::SIZE);
            wv[r] = B::load_x86(p);
            let d;
            (d, mw[r]) = B::dm_x86(p);
            // Broadcast once per block: a pair's scale is then one vector
            // multiply (same bits as a scalar multiply and a broadcast).
            dw[r] = _mm256_set1_ps(d);
            // Decode tiles: the same block of the next tile's rows, which
            // helps the hardware prefetchers when the weight streams
            // from memory (measured: Q8_0 decode 27 -> 33 GB/s). A
            // prefetch never faults; wrapping_add keeps the address
            // computation defined past the end.
            if R <= 2 {
                let ahead = p.wrapping_add(R * ctx.row_bytes);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
            }
        }
        for c in 0..C {
            let ai = (i + c) * nb + b;
            let a = _mm256_loadu_si256(ctx.aq.add((i + c) * k + b * 32) as *const __m256i);
            let da = *ctx.ad.add(ai);
            let dav = _mm256_set1_ps(da);
            let sa = *ctx.asum.add(ai);
            for r in 0..R {
                let dot = B::dot_x86::<VNNI>(wv[r], a, sa);
                acc[r][c] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(dot),
                    _mm256_mul_ps(dw[r], dav),
                    acc[r][c],
                );
                if B::HAS_MIN {
                    acc_min[r][c] += mw[r] * (da * sa as f32);
                }
            }
        }
    }

    /// R x C tile over all blocks of the row: one multiply-add chain per
    /// output, in block order (the module's one order).
    #[inline(always)]
    unsafe fn tile_body<B: Block32, const R: usize, const C: usize, const VNNI: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let w0 = ctx.w.add(j * ctx.row_bytes);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc_min = [[0.0f32; C]; R];
        for b in 0..ctx.nb {
            step::<B, R, C, VNNI>(&mut acc, &mut acc_min, ctx, w0, i, b);
        }
        for r in 0..R {
            for c in 0..C {
                *ctx.out.add((i + c) * ctx.ldo + j + r) = hsum(acc[r][c]) + acc_min[r][c];
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_avx2<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
        tile_body::<B, R, C, false>(ctx, j, i)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    unsafe fn tile_vnni<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
        tile_body::<B, R, C, true>(ctx, j, i)
    }

    pub(super) fn tile_fn<B: Block32, const VNNI: bool>(r: usize, c: usize) -> TileFn {
        if VNNI {
            tile_table!(tile_vnni, r, c)
        } else {
            tile_table!(tile_avx2, r, c)
        }
    }

    /// `sum(w * a)` of unsigned `w` (< 128 when `!VNNI`: maddubs saturates
    /// pairs at i16) and signed `a`, as eight i32 lanes, plus `init` (added
    /// to lane 0; a block's offset correction).
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn dot_u8_i8<const VNNI: bool>(
        w: __m256i,
        a: __m256i,
        init: i32,
    ) -> __m256i {
        let init = _mm256_castsi128_si256(_mm_cvtsi32_si128(init));
        if VNNI {
            _mm256_dpbusd_epi32(init, w, a)
        } else {
            let p16 = _mm256_maddubs_epi16(w, a);
            _mm256_add_epi32(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)), init)
        }
    }

    /// `sum(w * a)` of signed codes `w` (|w| <= 128) and activations `a`
    /// (Q8_0, IQ4_NL): VNNI takes `w + 128` unsigned and subtracts `128 *
    /// sum(a)`; AVX2 uses ggml's sign trick, `maddubs(|w|, a * sign(w))`
    /// (activation codes never reach -128, so negating them is exact, and
    /// pairs stay below i16 saturation).
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn dot_signed<const VNNI: bool>(
        w: __m256i,
        a: __m256i,
        sum_a: i32,
    ) -> __m256i {
        if VNNI {
            let wu = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
            dot_u8_i8::<true>(wu, a, -128 * sum_a)
        } else {
            let p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
            _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
        }
    }

    /// `sum((w - OFF) * a)` of unsigned codes `w` (Q4_0: 8, Q5_0: 16):
    /// VNNI folds the offset in from the activation sum; AVX2 subtracts it
    /// and takes the sign trick (one `sign` per pair instead of moving and
    /// adding the offset term; the code's subtract and abs are the same for
    /// every activation row of a tile, so the compiler hoists them).
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn dot_offset<const VNNI: bool, const OFF: i8>(
        w: __m256i,
        a: __m256i,
        sum_a: i32,
    ) -> __m256i {
        if VNNI {
            dot_u8_i8::<true>(w, a, -(OFF as i32) * sum_a)
        } else {
            dot_signed::<false>(_mm256_sub_epi8(w, _mm256_set1_epi8(OFF)), a, sum_a)
        }
    }

    /// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..16)
    /// then high nibbles (16..32), the Q4_0/Q4_1 order.
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn nibbles(p: *const u8) -> __m256i {
        let q = _mm_loadu_si128(p as *const __m128i);
        let both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }

    /// A little-endian f16 at `p`, with F16C.
    #[inline(always)]
    pub(in crate::cpu::qlinear) unsafe fn f16_at(p: *const u8) -> f32 {
        let bits = u16::from_le_bytes([*p, *p.add(1)]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{dot_offset, dot_signed, dot_u8_i8, f16_at, nibbles, step as step_x86};

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::{Block32, Ctx, TileFn};

    /// `(d, m)` of the block at `p`: `d` is the f16 at byte 0 and `m` the
    /// f16 at byte 2 in every 32-value type that has one (`B::dm`'s
    /// fields, converted inline).
    #[inline(always)]
    unsafe fn dm_neon<B: Block32>(p: *const u8) -> (f32, f32) {
        if B::E8M0 {
            (crate::quant::mxfp4::e8m0_to_fp32_half(*p), 0.0)
        } else if B::HAS_MIN {
            super::f16x2_neon(p)
        } else {
            (super::f16_neon(p), 0.0)
        }
    }

    /// One block of an R x C tile into the sums `acc` (see x86).
    #[inline(always)]
    unsafe fn step<B: Block32, const R: usize, const C: usize, const DOT: bool>(
        acc: &mut [[float32x4_t; C]; R],
        acc_min: &mut [[f32; C]; R],
        ctx: &Ctx,
        w0: *const u8,
        i: usize,
        b: usize,
    ) {
        let (nb, k) = (ctx.nb, ctx.nb * 32);
        let mut wv = [[vdupq_n_s8(0); 2]; R];
        let mut dw = [0.0f32; R];
        let mut mw = [0.0f32; R];
        for r in 0..R {
            let p = w0.add(r * ctx.row_bytes + b * B::SIZE);
            wv[r] = B::load_neon(p);
            (dw[r], mw[r]) = dm_neon::<B>(p);
        }
        for c in 0..C {
            let ai = (i + c) * nb + b;
            let pa = ctx.aq.add((i + c) * k + b * 32);
            let a = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
            let da = *ctx.ad.add(ai);
            for r in 0..R {
                let dot = super::dot_s8::<DOT>(wv[r], a);
                acc[r][c] = vfmaq_n_f32(acc[r][c], vcvtq_f32_s32(dot), dw[r] * da);
                if B::HAS_MIN {
                    let sa = *ctx.asum.add(ai);
                    acc_min[r][c] += mw[r] * (da * sa as f32);
                }
            }
        }
    }

    /// R x C tile over all blocks of the row: one multiply-add chain per
    /// output, in block order (as on x86).
    #[inline(always)]
    unsafe fn tile_body<B: Block32, const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let w0 = ctx.w.add(j * ctx.row_bytes);
        let mut acc = [[vdupq_n_f32(0.0); C]; R];
        let mut acc_min = [[0.0f32; C]; R];
        // Decode tiles (R x C <= 2) take two blocks per iteration: the
        // same operations in the same order, with half the loop overhead
        // and the activation scales of two blocks loaded together
        // (llvm-mca: 1-10% fewer cycles per block, bench/llvm_mca.sh).
        let mut b = 0;
        if R * C <= 2 {
            while b + 2 <= ctx.nb {
                step::<B, R, C, DOT>(&mut acc, &mut acc_min, ctx, w0, i, b);
                step::<B, R, C, DOT>(&mut acc, &mut acc_min, ctx, w0, i, b + 1);
                b += 2;
            }
        }
        for b in b..ctx.nb {
            step::<B, R, C, DOT>(&mut acc, &mut acc_min, ctx, w0, i, b);
        }
        for r in 0..R {
            for c in 0..C {
                *ctx.out.add((i + c) * ctx.ldo + j + r) = vaddvq_f32(acc[r][c]) + acc_min[r][c];
            }
        }
    }

    unsafe fn tile_neon<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
        tile_body::<B, R, C, false>(ctx, j, i)
    }

    #[target_feature(enable = "dotprod")]
    unsafe fn tile_dot<B: Block32, const R: usize, const C: usize>(ctx: &Ctx, j: usize, i: usize) {
        tile_body::<B, R, C, true>(ctx, j, i)
    }

    /// 2 weight rows x 2 activation rows with `smmla`: per block, each 8-code
    /// slice of both weight rows is paired with the same slice of both
    /// activation rows (paired once, at quantization: `ActQ8::pairs`), and
    /// one instruction adds all four row-pair dots (lanes (w0,a0), (w0,a1),
    /// (w1,a0), (w1,a1)). The codes are signed (no offset term), the
    /// integers per block those of the twin; the float finish per block is
    /// the twin's per-pair arithmetic on four lanes at once (scales, and
    /// with a minimum its terms from `ActQ8::dsum`).
    #[target_feature(enable = "dotprod,i8mm")]
    unsafe fn tile_mm<B: Block32>(ctx: &Ctx, j: usize, i: usize) {
        let (nb, k) = (ctx.nb, ctx.nb * 32);
        let w0 = ctx.w.add(j * ctx.row_bytes);
        let mut facc = vdupq_n_f32(0.0);
        let mut acc_min = vdupq_n_f32(0.0);
        for b in 0..nb {
            let p = [w0.add(b * B::SIZE), w0.add(ctx.row_bytes + b * B::SIZE)];
            let x = [B::load_neon(p[0]), B::load_neon(p[1])];
            let ai = [i * nb + b, (i + 1) * nb + b];
            // Rows i and i + 1 (i is even) already paired: slice (q, h).
            let pa = ctx.apairs.add(i * k + b * 64);
            let mut iacc = vdupq_n_s32(0);
            for q in 0..2 {
                for h in 0..2 {
                    let a = vld1q_s8(pa.add(32 * q + 16 * h));
                    iacc = super::smmla(iacc, super::zip8(x[0][q], x[1][q], h), a);
                }
            }
            // [da0, da1, da0, da1] and the weight rows' [d0, d0, d1, d1].
            let da = vreinterpretq_f32_u32(super::cols2(ctx.ad.add(ai[0]), ctx.ad.add(ai[1])));
            let (dw, mw) = if B::E8M0 {
                let d = super::e8m0x2_neon(super::u8x2_at(p[0], p[1]));
                let d = vcombine_f32(d, d);
                (vzip1q_f32(d, d), vdupq_n_f32(0.0))
            } else if B::HAS_MIN {
                // Both rows' (d, m) f16 pairs converted at once: [d0, m0, d1, m1].
                let dm = super::f16x4_neon(super::u32x2_at(p[0], p[1]));
                (vtrn1q_f32(dm, dm), vtrn2q_f32(dm, dm))
            } else {
                let d = super::f16x4_neon(super::u16x2_at(p[0], p[1]));
                (vzip1q_f32(d, d), vdupq_n_f32(0.0))
            };
            facc = vfmaq_f32(facc, vcvtq_f32_s32(iacc), vmulq_f32(dw, da));
            if B::HAS_MIN {
                let ds =
                    vreinterpretq_f32_u32(super::cols2(ctx.adsum.add(ai[0]), ctx.adsum.add(ai[1])));
                acc_min = vaddq_f32(acc_min, vmulq_f32(mw, ds));
            }
        }
        let mut f = [0.0f32; 4];
        vst1q_f32(f.as_mut_ptr(), vaddq_f32(facc, acc_min));
        for r in 0..2 {
            for c in 0..2 {
                *ctx.out.add((i + c) * ctx.ldo + j + r) = f[r * 2 + c];
            }
        }
    }

    /// Two weight rows by one activation row (the last odd activation row
    /// of an i8mm sweep), as two dotprod rows.
    #[target_feature(enable = "dotprod")]
    unsafe fn tile_dot_2x1<B: Block32>(ctx: &Ctx, j: usize, i: usize) {
        tile_body::<B, 1, 1, true>(ctx, j, i);
        tile_body::<B, 1, 1, true>(ctx, j + 1, i);
    }

    /// Tiles for `drive(.., 2, 2, ..)`: `smmla` for full 2x2 tiles, dotprod
    /// for the edges (2x1, and 1xC for an odd last weight row).
    pub(super) fn tile_fn_mm<B: Block32>(r: usize, c: usize) -> TileFn {
        match (r, c) {
            (2, 2) => tile_mm::<B>,
            (2, _) => tile_dot_2x1::<B>,
            _ => tile_fn::<B, true>(r, c),
        }
    }

    pub(super) fn tile_fn<B: Block32, const DOT: bool>(r: usize, c: usize) -> TileFn {
        if DOT {
            tile_table!(tile_dot, r, c)
        } else {
            tile_table!(tile_neon, r, c)
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(super) use super::neon_dot::{
    cols2, dot_s8, e8m0x2_neon, f16_neon, f16x2_neon, f16x4_neon, nibbles_neon, sdot, smmla,
    u16x2_at, u32x2_at, u8x2_at, zip8,
};
