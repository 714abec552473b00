//! Linear over Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 weights
//! with 16 rows interleaved (`quant::packed`: `Q4_0x16`, `Q4_1x16`,
//! `Q5_0x16`, `Q5_1x16`, `Q8_0x16`, `IQ4_NLx16`, `MXFP4x16`), the layout
//! the CPU backend repacks weights into at load when it runs the AVX-512
//! VNNI or AVX2 kernels. The type is a const parameter: `Q4_0` ... `Q5_1`
//! below. IQ4_NL and MXFP4 are Q4_0's nibbles looked up in their tables
//! (one byte shuffle), then computed as Q8_0's signed codes; MXFP4's
//! scales are e8m0 bytes, turned into f32 by integer shifts (the bits
//! `e8m0_to_fp32_half` builds); Q5_0 and Q5_1 add each code's fifth bit
//! (`Q5_PICK`, `Q5_BIT`) to Q4_0's and Q4_1's nibbles.
//!
//! Per block of a 16-row group and activation row, the 512-bit path runs 8
//! `vpdpbusd` (each: 4 codes of all 16 rows against 4 activation bytes
//! broadcast to every lane), then one conversion and one multiply-add for
//! all 16 rows, with the 16 scales as one vector. The plain 32-value tiles
//! (`block32`, `zmm`) instead pay a conversion, a scale broadcast and a
//! multiply-add per row and block, which made prefill bound by that float
//! work rather than by the integer dot products.
//!
//! The scalar twin (`gemm_scalar`, also the path of every other ISA)
//! computes the same integers block by block.

use super::act_quant::ActQ8;
#[cfg(target_arch = "x86_64")]
use super::block32::Ctx;
#[cfg(target_arch = "x86_64")]
use super::x16_avx2;
use super::{Isa, Out};
use crate::quant::packed::ROWS;
use crate::quant::QK;

/// The packed kinds, as the const parameter of the kernels.
pub(super) const Q4_0: u8 = 0;
pub(super) const Q4_1: u8 = 1;
pub(super) const Q8_0: u8 = 2;
pub(super) const IQ4_NL: u8 = 3;
pub(super) const MXFP4: u8 = 4;
pub(super) const Q5_0: u8 = 5;
pub(super) const Q5_1: u8 = 6;

/// Whether a kind has a minimum (`w = d * q + m`: Q4_1, Q5_1).
pub(super) const fn has_min(kind: u8) -> bool {
    kind == Q4_1 || kind == Q5_1
}

/// Whether a kind's codes take a fifth bit from its first chunk (Q5_0,
/// Q5_1).
pub(super) const fn five_bits(kind: u8) -> bool {
    kind == Q5_0 || kind == Q5_1
}

/// Q5_0's fifth bits per 4-byte code chunk, for byte shuffles within each
/// 128-bit lane (4 rows): `Q5_PICK[2 t + h]` sends byte `t / 2 + 2 h` of a
/// row's 4 fifth-bit bytes (chunk 0) to all 4 bytes of that row (`h`: 0
/// the low nibbles' bits, elements `4t..`; 1 the high nibbles', `16 +
/// 4t..`), and `Q5_BIT[t % 2]` has bit `4 (t % 2) + j` in byte `j` of each
/// row: the bit of element `4t + j` (or `16 + 4t + j`).
#[cfg(target_arch = "x86_64")]
pub(super) static Q5_PICK: [[u8; 64]; 8] = q5_pick();
#[cfg(target_arch = "x86_64")]
pub(super) static Q5_BIT: [[u8; 64]; 2] = q5_bit();

#[cfg(target_arch = "x86_64")]
const fn q5_pick() -> [[u8; 64]; 8] {
    let mut out = [[0u8; 64]; 8];
    let mut th = 0;
    while th < 8 {
        let (t, h) = (th / 2, th % 2);
        let mut p = 0;
        while p < 64 {
            let row = (p % 16) / 4;
            out[th][p] = (4 * row + t / 2 + 2 * h) as u8;
            p += 1;
        }
        th += 1;
    }
    out
}

#[cfg(target_arch = "x86_64")]
const fn q5_bit() -> [[u8; 64]; 2] {
    let mut out = [[0u8; 64]; 2];
    let mut odd = 0;
    while odd < 2 {
        let mut p = 0;
        while p < 64 {
            out[odd][p] = 1 << (4 * odd + p % 4);
            p += 1;
        }
        odd += 1;
    }
    out
}

/// Per row-block bytes of the plain type.
pub(super) const fn type_size(kind: u8) -> usize {
    match kind {
        Q4_0 | IQ4_NL => 18,
        Q4_1 => 20,
        MXFP4 => 17,
        Q5_0 => 22,
        Q5_1 => 24,
        _ => 34,
    }
}

/// Bytes of fields per row-block before the codes (the f16 scale; Q4_1
/// also the minimum; MXFP4 its e8m0 byte).
pub(super) const fn head(kind: u8) -> usize {
    match kind {
        Q4_1 | Q5_1 => 4,
        MXFP4 => 1,
        _ => 2,
    }
}

/// Whether the nibbles index a table (IQ4_NL, MXFP4) of signed values.
pub(super) const fn looked_up(kind: u8) -> bool {
    kind == IQ4_NL || kind == MXFP4
}

/// The table of a `looked_up` kind.
pub(super) fn table(kind: u8) -> &'static [i8; 16] {
    if kind == MXFP4 {
        &crate::quant::mxfp4::KVALUES_MXFP4
    } else {
        &crate::quant::iq4::KVALUES_IQ4NL
    }
}

/// What is subtracted from the stored unsigned code (Q8_0's codes are
/// signed and offset by 128 in the 512-bit path).
const fn offset(kind: u8) -> i32 {
    match kind {
        Q4_0 => 8,
        Q4_1 | Q5_1 => 0,
        Q5_0 => 16,
        _ => 128,
    }
}

/// Code of element `e` (0..32) of lane `l` in a group block at `p`.
#[inline(always)]
fn code<const KIND: u8>(p: &[u8], l: usize, e: usize) -> i32 {
    let chunks = &p[head(KIND) * ROWS..];
    if five_bits(KIND) {
        // Chunk 0: the row's 4 bytes of fifth bits (Q5_0's `qh`).
        let h = &chunks[4 * l..4 * l + 4];
        let qh = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (t, j) = ((e % 16) / 4, e % 4);
        let byte = chunks[(t + 1) * 4 * ROWS + 4 * l + j];
        let nib = if e < 16 { byte & 0x0F } else { byte >> 4 };
        return (nib as i32 | (((qh >> e) & 1) << 4) as i32) - offset(KIND);
    }
    if KIND == Q8_0 {
        let (t, j) = (e / 4, e % 4);
        chunks[t * 4 * ROWS + 4 * l + j] as i8 as i32
    } else {
        let half = e / 16;
        let (t, j) = ((e % 16) / 4, e % 4);
        let byte = chunks[t * 4 * ROWS + 4 * l + j];
        let nib = if half == 0 { byte & 0x0F } else { byte >> 4 };
        if looked_up(KIND) {
            table(KIND)[nib as usize] as i32
        } else {
            nib as i32 - offset(KIND)
        }
    }
}

/// Field `h` (0: scale, 1: minimum) of lane `l` in a group block: an f16,
/// or MXFP4's e8m0 scale.
fn field<const KIND: u8>(p: &[u8], h: usize, l: usize) -> f32 {
    if KIND == MXFP4 {
        return crate::quant::mxfp4::e8m0_to_fp32_half(p[l]);
    }
    let at = h * 2 * ROWS + 2 * l;
    half::f16::from_le_bytes([p[at], p[at + 1]]).to_f32()
}

/// The scalar twin: `out [m][nr] = act . w^T` for `nr` rows (whole
/// groups), block by block as the plain types' twin (`block32::vec_dot`).
///
/// # Safety
/// As `gemm`'s.
unsafe fn gemm_scalar<const KIND: u8>(w: &[u8], nr: usize, act: &ActQ8, out: Out) {
    let (m, nb) = (act.m, act.blocks_per_row());
    let gb = ROWS * type_size(KIND);
    for g in 0..nr / ROWS {
        for i in 0..m {
            let qs = &act.qs[i * act.k..(i + 1) * act.k];
            let ds = &act.d[i * nb..(i + 1) * nb];
            let sums = &act.sum[i * nb..(i + 1) * nb];
            for l in 0..ROWS {
                let mut acc = 0.0f32;
                let mut acc_min = 0.0f32;
                for b in 0..nb {
                    let p = &w[(g * nb + b) * gb..][..gb];
                    let a = &qs[b * QK..(b + 1) * QK];
                    let isum: i32 = (0..QK).map(|e| code::<KIND>(p, l, e) * a[e] as i32).sum();
                    acc += (field::<KIND>(p, 0, l) * ds[b]) * isum as f32;
                    if has_min(KIND) {
                        acc_min += field::<KIND>(p, 1, l) * (ds[b] * sums[b] as f32);
                    }
                }
                *out.at(i, g * ROWS + l) = acc + acc_min;
            }
        }
    }
}

/// `out [m][nr] = act [m, k] . w [nr, k]^T` for `nr` rows (a multiple of
/// 16) of a packed weight of `KIND`.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
pub(super) unsafe fn gemm<const KIND: u8>(isa: Isa, w: &[u8], nr: usize, act: &ActQ8, out: Out) {
    let nb = act.blocks_per_row();
    assert!(nr.is_multiple_of(ROWS) && w.len() == nr * nb * type_size(KIND) && out.ld >= nr);
    // The tiles' shared arguments; `asum` is the per-block activation term
    // each ISA's tile starts from.
    #[cfg(target_arch = "x86_64")]
    let ctx = |asum: *const i32| Ctx {
        w: w.as_ptr(),
        row_bytes: nb * type_size(KIND),
        nb,
        aq: act.qs.as_ptr(),
        ad: act.d.as_ptr(),
        asum,
        out: out.ptr,
        nr,
        ldo: out.ld,
        m: act.m,
    };
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // Q4_0 / Q8_0 tiles start each block's integer sum at the
            // offset term (`-o * sum(a)`); Q4_1 reads the plain sums.
            let asum = match KIND {
                // Q5_0: twice this (`x86::tile`).
                Q4_0 | Q5_0 => act.neg8.as_ptr(),
                Q8_0 | IQ4_NL | MXFP4 => act.neg128.as_ptr(),
                _ => act.sum.as_ptr(),
            };
            // SAFETY: the tiles read groups g < nr / 16 of `w` (checked
            // above) and rows i..i+C < m of the activations and write
            // those cells of `out` (the caller's); the CPU has the features.
            unsafe { x86::run::<KIND>(&ctx(asum), act.m) }
        }
        // AVX2: half a group (8 rows, one 256-bit vector) per tile
        // (`x16_avx2.rs`); Q8_0, IQ4_NL and MXFP4 take signed codes there
        // (no offset term).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // Q5_0: twice this (`x16_avx2::tile`).
            let asum = if KIND == Q4_0 || KIND == Q5_0 {
                act.neg8.as_ptr()
            } else {
                act.sum.as_ptr()
            };
            // SAFETY: as for the 512-bit arm.
            unsafe { x16_avx2::run::<KIND>(&ctx(asum), act.m) }
        }
        _ => gemm_scalar::<KIND>(w, nr, act, out),
    }
}

/// Decode tiles (one or two activation rows) read each weight byte once
/// with too little work between their loads for the hardware prefetcher
/// alone (which also stops at 4 KiB pages) to keep the stream at the
/// memory's speed, so they also prefetch the bytes this far ahead of the
/// block they read. Qwen3-0.6B decode on an AVX-512 Xeon VM (same run,
/// best of 4-5, ~12 GB/s per core): Q4_0 1 thread 20.5 -> 24-27 tok/s,
/// 2 threads 33 -> 44-47; Q8_0 14.9 -> 17-19 and 27 -> 31-34. Distances
/// of 2-6 KiB measured alike; 1 KiB gained half as much. Steps of up to 8
/// rows (a server's batched decode, short prompts) stream the same way:
/// prefetching in their tiles too, not only in 1-2 row tiles, took
/// Qwen3-0.6B Q8_0 at 2 threads (same run, 2 pairs) from 71/73 to 90/88
/// tok/s with 4 sequences, pp8 from 138/135 to 177/168 (AVX2 tiles: 70/69
/// to 90/89, pp8 134/146 to 151/158).
#[cfg(target_arch = "x86_64")]
pub(super) const PREFETCH_AHEAD: usize = 4096;

/// Prefetches the `len` bytes at `p + ahead` (a prefetch never faults).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn prefetch_block(p: *const u8, len: usize, ahead: usize) {
    use std::arch::x86_64::*;
    if ahead == 0 {
        return;
    }
    let at = p.wrapping_add(ahead);
    for line in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line) as *const i8);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{
        five_bits, has_min, head, looked_up, prefetch_block, table, type_size, Ctx, MXFP4,
        PREFETCH_AHEAD, Q4_0, Q5_0, Q5_BIT, Q5_PICK, Q8_0, ROWS,
    };

    /// `2^(e - 128)` of 16 e8m0 bytes at `p`, as `e8m0_to_fp32_half`
    /// builds its bits: `(e - 1) << 23`, or `0x00200000 << e` for the f32
    /// subnormals `e < 2`.
    #[inline(always)]
    pub(super) unsafe fn e8m0_x16(p: *const u8) -> __m512 {
        let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i));
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny))
    }

    /// One 16-row group `g` against activation rows `i..i + C`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const KIND: u8, const C: usize>(ctx: &Ctx, g: usize, i: usize) {
        let (nb, k) = (ctx.nb, ctx.nb * 32);
        let gb = ROWS * type_size(KIND);
        let base = ctx.w.add(g * nb * gb);
        let mut facc = [_mm512_setzero_ps(); C];
        let mut fmin = [_mm512_setzero_ps(); C];
        // Decode tiles, and the first tile of a group in a small batch
        // (every weight byte read about once), stream from memory; a long
        // prompt's later tiles find the group's weights in cache.
        let ahead = if C <= 2 || (i == 0 && ctx.m <= 8) {
            PREFETCH_AHEAD
        } else {
            0
        };
        for b in 0..nb {
            let p = base.add(b * gb);
            prefetch_block(p, gb, ahead);
            let scales = if KIND == MXFP4 {
                e8m0_x16(p)
            } else {
                _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
            };
            let codes = p.add(head(KIND) * ROWS);
            let mut ia = [[_mm512_setzero_si512(); 2]; C];
            if !has_min(KIND) {
                for c in 0..C {
                    // `asum` holds `-offset * sum(a)` here (see `gemm`;
                    // Q5_0's offset 16 is twice the -8 it holds).
                    let o = *ctx.asum.add((i + c) * nb + b);
                    ia[c][0] = _mm512_set1_epi32(if KIND == Q5_0 { 2 * o } else { o });
                }
            }
            let act = |c: usize, e: usize| -> __m512i {
                let a = ctx.aq.add((i + c) * k + b * 32 + e) as *const i32;
                _mm512_set1_epi32(a.read_unaligned())
            };
            if KIND == Q8_0 {
                for t in 0..8 {
                    let raw = _mm512_loadu_si512(codes.add(t * 64) as *const __m512i);
                    let wu = _mm512_xor_si512(raw, _mm512_set1_epi8(-128));
                    for c in 0..C {
                        ia[c][t & 1] = _mm512_dpbusd_epi32(ia[c][t & 1], wu, act(c, 4 * t));
                    }
                }
            } else {
                let mask = _mm512_set1_epi8(0x0F);
                // IQ4_NL / MXFP4: the table's signed values plus 128.
                let tab = _mm512_broadcast_i32x4(_mm_xor_si128(
                    _mm_loadu_si128(table(KIND).as_ptr() as *const __m128i),
                    _mm_set1_epi8(-128),
                ));
                // Q5_0: chunk 0 holds the fifth bits, the nibbles follow.
                let (qh, nibbles) = if five_bits(KIND) {
                    (_mm512_loadu_si512(codes as *const __m512i), codes.add(64))
                } else {
                    (_mm512_setzero_si512(), codes)
                };
                for t in 0..4 {
                    let raw = _mm512_loadu_si512(nibbles.add(t * 64) as *const __m512i);
                    let mut lo = _mm512_and_si512(raw, mask);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
                    if looked_up(KIND) {
                        lo = _mm512_shuffle_epi8(tab, lo);
                        hi = _mm512_shuffle_epi8(tab, hi);
                    }
                    if five_bits(KIND) {
                        let bit = _mm512_loadu_si512(Q5_BIT[t % 2].as_ptr() as *const __m512i);
                        let pick = |h: usize| {
                            let ix = Q5_PICK[2 * t + h].as_ptr() as *const __m512i;
                            _mm512_test_epi8_mask(
                                _mm512_shuffle_epi8(qh, _mm512_loadu_si512(ix)),
                                bit,
                            )
                        };
                        let sixteen = _mm512_set1_epi8(16);
                        lo = _mm512_mask_add_epi8(lo, pick(0), lo, sixteen);
                        hi = _mm512_mask_add_epi8(hi, pick(1), hi, sixteen);
                    }
                    for c in 0..C {
                        // One chain per activation row: C chains are
                        // enough in flight, and the block then needs no
                        // add of two partial sums.
                        ia[c][0] = _mm512_dpbusd_epi32(ia[c][0], lo, act(c, 4 * t));
                        ia[c][0] = _mm512_dpbusd_epi32(ia[c][0], hi, act(c, 16 + 4 * t));
                    }
                }
            }
            for c in 0..C {
                let da = *ctx.ad.add((i + c) * nb + b);
                let isum = if KIND == Q4_0 {
                    ia[c][0]
                } else {
                    _mm512_add_epi32(ia[c][0], ia[c][1])
                };
                let scale = _mm512_mul_ps(scales, _mm512_set1_ps(da));
                facc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, facc[c]);
                if has_min(KIND) {
                    let mins =
                        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * ROWS) as *const __m256i));
                    let sa = *ctx.asum.add((i + c) * nb + b);
                    fmin[c] = _mm512_fmadd_ps(mins, _mm512_set1_ps(da * sa as f32), fmin[c]);
                }
            }
        }
        for c in 0..C {
            let v = if has_min(KIND) {
                _mm512_add_ps(facc[c], fmin[c])
            } else {
                facc[c]
            };
            _mm512_storeu_ps(ctx.out.add((i + c) * ctx.ldo + g * ROWS), v);
        }
    }

    /// Every group against every activation row, in tiles of up to 8 rows
    /// (4 for Q4_1, whose minimum terms take registers of their own): each
    /// unpacked weight chunk then serves 8 activation rows.
    pub(super) unsafe fn run<const KIND: u8>(ctx: &Ctx, m: usize) {
        let widest = if has_min(KIND) { 4 } else { 8 };
        for g in 0..ctx.nr / ROWS {
            let mut i = 0;
            while i < m {
                let c = (m - i).min(widest);
                match c {
                    8 => tile::<KIND, 8>(ctx, g, i),
                    7 => tile::<KIND, 7>(ctx, g, i),
                    6 => tile::<KIND, 6>(ctx, g, i),
                    5 => tile::<KIND, 5>(ctx, g, i),
                    4 => tile::<KIND, 4>(ctx, g, i),
                    3 => tile::<KIND, 3>(ctx, g, i),
                    2 => tile::<KIND, 2>(ctx, g, i),
                    _ => tile::<KIND, 1>(ctx, g, i),
                }
                i += c;
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::arch::x86_64::*;

    use crate::quant::mxfp4::e8m0_to_fp32_half;

    #[target_feature(enable = "avx512f")]
    unsafe fn x16(p: *const u8, out: &mut [f32; 16]) {
        _mm512_storeu_ps(out.as_mut_ptr(), super::x86::e8m0_x16(p));
    }

    /// Every e8m0 byte becomes `e8m0_to_fp32_half`'s exact bits, 16 at a
    /// time (the kernels' random weights keep their scales in 2^-12..2^-5,
    /// so the f32 subnormals of `e < 2` and the largest scales are checked
    /// here).
    #[test]
    fn e8m0_x16_is_e8m0_to_fp32_half_for_every_byte() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 here: e8m0_x16 not run (x16_avx2's e8m0_x8 is tested)");
            return;
        }
        let bytes: Vec<u8> = (0..=255).collect();
        for c in bytes.chunks_exact(16) {
            let mut out = [0.0f32; 16];
            // SAFETY: 16 readable bytes; the CPU has AVX-512F (checked).
            unsafe { x16(c.as_ptr(), &mut out) };
            for (e, v) in c.iter().zip(out) {
                assert_eq!(v.to_bits(), e8m0_to_fp32_half(*e).to_bits(), "e = {e}");
            }
        }
    }
}
