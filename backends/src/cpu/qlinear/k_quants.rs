//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights against `ActQ8K` activations
//! (256-value super-blocks with per-16 code sums).
//!
//! A K-quant's sub-block scales are small integers, so a whole super-block
//! reduces to integers before any float work:
//! - Q4_K/Q5_K: `sum(w * a) = da * (d * sum_j sc_j * sum(q * qa) -
//!   dmin * sum_j m_j * sum_j(qa))`; the per-32 activation sums come from
//!   the per-16 ones.
//! - Q6_K: `sum(w * a) = da * d * (sum_k sc_k * sum(q * qa) -
//!   32 * sum_k sc_k * sum_k(qa))` with unsigned 6-bit `q` (0..=63), so
//!   `maddubs`/`vpdpbusd` take it as their unsigned operand.
//! - Q2_K: as Q4_K with a 4-bit scale and a 4-bit min per 16 values
//!   (`sum_k m_k * sum_k(qa)` straight from the per-16 sums) and 2-bit
//!   codes.
//! - Q3_K: as Q6_K with 3-bit codes offset by 4 (0..=7) and `-4 * sum_k
//!   sc_k * sum_k(qa)`: the very integers of the Q6_K blocks it used to be
//!   repacked into, so the same bits.
//! - IQ4_XS: `sum(w * a) = da * d * sum_j (ls_j - 32) * sum(v * qa)` with
//!   `v` the table value (`KVALUES_IQ4NL`, -127..=113) of each 4-bit code;
//!   `v` is signed, so the SIMD paths multiply `|v|` by `qa` carrying
//!   `v`'s sign (`vpsignb`), exact since both stay within 127.
//!
//! The SIMD paths (AVX2 `maddubs` + `madd` by the scales, AVX-512 VNNI
//! `vpdpwssd` doing the scale multiply-add in one, NEON `sdot` or widening
//! multiplies + `mla` by the scale) produce the same integers as the scalar
//! twins and finish each super-block with the same float expression, so
//! all paths agree bit for bit.

use super::act_quant::ActQ8K;
use super::{drive, Isa, Tile};
use crate::quant::iq4::{BlockIQ4XS, KVALUES_IQ4NL};
use crate::quant::k_quants::{scale_min_k4, K_SCALE_SIZE};
use crate::quant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K};

#[inline(always)]
fn f16_le(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The eight 6-bit scales and mins of a Q4_K/Q5_K super-block.
#[inline(always)]
fn unpack_scales(b: &[u8]) -> ([i16; 8], [i16; 8]) {
    let mut packed = [0u8; K_SCALE_SIZE];
    packed.copy_from_slice(&b[..K_SCALE_SIZE]);
    let (mut sc, mut mn) = ([0i16; 8], [0i16; 8]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &packed);
        (sc[j], mn[j]) = (s as i16, m as i16);
    }
    (sc, mn)
}

/// The same scales and mins as `unpack_scales`, as bytes: words 0-1 the
/// eight scales, words 2-3 the eight mins, with word-wide masks and shifts
/// instead of eight byte-by-byte `scale_min_k4` calls. Sub-blocks 0-3 are
/// the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7
/// take their low 4 bits from the nibbles of bytes 8-11 and their top 2
/// from the top bits of bytes 0-3 (scales) and 4-7 (mins).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
pub(super) fn unpack_scales_u32(b: &[u8]) -> [u32; 4] {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    [
        w0 & LOW6,
        (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4),
        w1 & LOW6,
        ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4),
    ]
}

/// The float finish of one Q4_K/Q5_K super-block, shared by every path so
/// that they round alike.
#[inline(always)]
fn finish_q4k(d: f32, dmin: f32, da: f32, isum: i32, imin: i32) -> f32 {
    (d * da) * isum as f32 - (dmin * da) * imin as f32
}

/// `sum_j m_j * (sum of the 32 activation codes of sub-block j)`.
#[inline(always)]
fn min_sum(mins: &[i16; 8], bsums: &[i16]) -> i32 {
    (0..8)
        .map(|j| mins[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32))
        .sum()
}

/// Scalar twin for Q4_K (`Q5 = false`) and Q5_K: one weight row against
/// activation row `i`.
pub(super) fn vec_dot_q4k<const Q5: bool>(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let size = if Q5 { BlockQ5K::SIZE } else { BlockQ4K::SIZE };
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * size..(sb + 1) * size];
        let (d, dmin) = (f16_le(blk, 0), f16_le(blk, 2));
        let (sc, mn) = unpack_scales(&blk[4..]);
        let (qh, qs) = if Q5 {
            (&blk[16..48], &blk[48..])
        } else {
            (&blk[..0], &blk[16..])
        };
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let mut isum = 0i32;
        for p in 0..4 {
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                let q = qs[32 * p + l];
                let (mut ql, mut qh_) = ((q & 0x0F) as i32, (q >> 4) as i32);
                if Q5 {
                    ql |= (((qh[l] >> (2 * p)) & 1) as i32) << 4;
                    qh_ |= (((qh[l] >> (2 * p + 1)) & 1) as i32) << 4;
                }
                lo += ql * a[64 * p + l] as i32;
                hi += qh_ * a[64 * p + 32 + l] as i32;
            }
            isum += sc[2 * p] as i32 * lo + sc[2 * p + 1] as i32 * hi;
        }
        let bs = &act.bsums[(i * nsb + sb) * 16..(i * nsb + sb + 1) * 16];
        let da = act.d[i * nsb + sb];
        acc += finish_q4k(d, dmin, da, isum, min_sum(&mn, bs));
    }
    acc
}

/// The 6-bit code of element `e` (0..256) of a Q6_K block.
#[inline(always)]
fn q6_code(ql: &[u8], qh: &[u8], e: usize) -> i32 {
    let (n, r) = (e / 128, e % 128);
    let (g, l) = (r / 32, r % 32);
    let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
    let low = match g {
        0 => ql[l] & 0x0F,
        1 => ql[l + 32] & 0x0F,
        2 => ql[l] >> 4,
        _ => ql[l + 32] >> 4,
    };
    (low | (((qh[l] >> (2 * g)) & 3) << 4)) as i32
}

/// Scalar twin for Q6_K.
pub(super) fn vec_dot_q6k(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockQ6K::SIZE..(sb + 1) * BlockQ6K::SIZE];
        let (ql, qh, scales) = (&blk[..128], &blk[128..192], &blk[192..208]);
        let d = f16_le(blk, 208);
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let mut isum = 0i32;
        for (k, &sc) in scales.iter().enumerate() {
            let dot: i32 = (16 * k..16 * k + 16)
                .map(|e| (q6_code(ql, qh, e) - 32) * a[e] as i32)
                .sum();
            isum += sc as i8 as i32 * dot;
        }
        acc += (d * act.d[i * nsb + sb]) * isum as f32;
    }
    acc
}

/// The eight sub-block scales `ls - 32` (-32..=31) of the IQ4_XS block
/// `b`: low 4 bits from the nibbles of bytes 4-7, top 2 from the u16 at 2.
#[inline(always)]
pub(super) fn iq4xs_scales(b: &[u8]) -> [i16; 8] {
    let high = u16::from_le_bytes([b[2], b[3]]);
    std::array::from_fn(|j| {
        let lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
        let hi = ((high >> (2 * j)) & 3) as u8;
        (lo | (hi << 4)) as i16 - 32
    })
}

/// Scalar twin for Q2_K: code of element `128n + 32j + l` is bits `2j`
/// of `qs[32n + l]`; sub-block (scale and min) `e / 16`.
pub(super) fn vec_dot_q2k(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockQ2K::SIZE..(sb + 1) * BlockQ2K::SIZE];
        let (scales, qs) = (&blk[..16], &blk[16..80]);
        let (d, dmin) = (f16_le(blk, 80), f16_le(blk, 82));
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let mut isum = 0i32;
        for (k, &sc) in scales.iter().enumerate() {
            let dot: i32 = (16 * k..16 * k + 16)
                .map(|e| {
                    let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
                    ((qs[32 * n + l] >> (2 * j)) & 3) as i32 * a[e] as i32
                })
                .sum();
            isum += (sc & 0x0F) as i32 * dot;
        }
        let bs = &act.bsums[(i * nsb + sb) * 16..(i * nsb + sb + 1) * 16];
        let imin: i32 = (0..16)
            .map(|k| (scales[k] >> 4) as i32 * bs[k] as i32)
            .sum();
        acc += finish_q4k(d, dmin, act.d[i * nsb + sb], isum, imin);
    }
    acc
}

/// The sixteen scales `sc - 32` (-32..=31) of a Q3_K block from its 12
/// scale bytes: low 4 bits in nibble `i / 8` of byte `i % 8`, top 2 in
/// bits `2 (i / 4)..` of byte `8 + i % 4`.
#[inline(always)]
pub(super) fn q3k_scales(b: &[u8]) -> [i16; 16] {
    std::array::from_fn(|i| {
        let lo = (b[i % 8] >> (4 * (i / 8))) & 0x0F;
        let hi = (b[8 + i % 4] >> (2 * (i / 4))) & 3;
        (lo | (hi << 4)) as i16 - 32
    })
}

/// Scalar twin for Q3_K: element `e = 128n + 32j + l` has the 2 low bits
/// of `qs[32n + l] >> 2j` and, as bit 2, bit `e / 32` of `hmask[l]` (the
/// code plus 4).
pub(super) fn vec_dot_q3k(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockQ3K::SIZE..(sb + 1) * BlockQ3K::SIZE];
        let (hmask, qs) = (&blk[..32], &blk[32..96]);
        let scales = q3k_scales(&blk[96..108]);
        let d = f16_le(blk, 108);
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let bs = &act.bsums[(i * nsb + sb) * 16..(i * nsb + sb + 1) * 16];
        let mut isum = 0i32;
        for (k, &s) in scales.iter().enumerate() {
            let dot: i32 = (16 * k..16 * k + 16)
                .map(|e| {
                    let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
                    let low = (qs[32 * n + l] >> (2 * j)) & 3;
                    let high = (hmask[l] >> (e / 32)) & 1;
                    (low | (high << 2)) as i32 * a[e] as i32
                })
                .sum();
            isum += s as i32 * (dot - 4 * bs[k] as i32);
        }
        acc += (d * act.d[i * nsb + sb]) * isum as f32;
    }
    acc
}

/// Scalar twin for IQ4_XS.
pub(super) fn vec_dot_iq4xs(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockIQ4XS::SIZE..(sb + 1) * BlockIQ4XS::SIZE];
        let d = f16_le(blk, 0);
        let scales = iq4xs_scales(blk);
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let mut isum = 0i32;
        for (j, &s) in scales.iter().enumerate() {
            let qs = &blk[8 + 16 * j..8 + 16 * (j + 1)];
            let a = &a[32 * j..32 * (j + 1)];
            let dot: i32 = (0..16)
                .map(|l| {
                    let lo = KVALUES_IQ4NL[(qs[l] & 0x0F) as usize] as i32;
                    let hi = KVALUES_IQ4NL[(qs[l] >> 4) as usize] as i32;
                    lo * a[l] as i32 + hi * a[l + 16] as i32
                })
                .sum();
            isum += s as i32 * dot;
        }
        acc += (d * act.d[i * nsb + sb]) * isum as f32;
    }
    acc
}

/// Everything a tile needs; as in block32, rows `row_bytes` apart.
pub(super) struct Ctx {
    pub(super) w: *const u8,
    pub(super) row_bytes: usize,
    pub(super) nsb: usize,
    pub(super) aq: *const i8,
    pub(super) ad: *const f32,
    pub(super) abs: *const i16,
    pub(super) out: *mut f32,
    pub(super) nr: usize,
}

/// Writes a tile's sums: cell `(r, c)` is output `[i + c][j + r]`.
///
/// # Safety
/// The cells must lie inside `ctx.out`.
#[allow(dead_code)] // unused where no SIMD path is compiled
#[inline(always)]
pub(super) unsafe fn store<const R: usize, const C: usize>(
    ctx: &Ctx,
    j: usize,
    i: usize,
    acc: &[[f32; C]; R],
) {
    for r in 0..R {
        for c in 0..C {
            *ctx.out.add((i + c) * ctx.nr + j + r) = acc[r][c];
        }
    }
}

/// Which K-quant a `gemm` call runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Q4K,
    Q5K,
    Q6K,
    IQ4XS,
    Q2K,
    Q3K,
}

impl Kind {
    fn size(self) -> usize {
        match self {
            Kind::Q4K => BlockQ4K::SIZE,
            Kind::Q5K => BlockQ5K::SIZE,
            Kind::Q6K => BlockQ6K::SIZE,
            Kind::IQ4XS => BlockIQ4XS::SIZE,
            Kind::Q2K => BlockQ2K::SIZE,
            Kind::Q3K => BlockQ3K::SIZE,
        }
    }
}

/// `out [m][nr] = act [m, k] . w [nr, k]^T` for `nr` whole weight rows.
pub(super) fn gemm(kind: Kind, isa: Isa, w: &[u8], nr: usize, act: &ActQ8K, out: &mut [f32]) {
    let (m, nsb) = (act.m, act.blocks_per_row());
    let row_bytes = nsb * kind.size();
    assert!(w.len() == nr * row_bytes && out.len() == m * nr);
    let ctx = Ctx {
        w: w.as_ptr(),
        row_bytes,
        nsb,
        aq: act.qs.as_ptr(),
        ad: act.d.as_ptr(),
        abs: act.bsums.as_ptr(),
        out: out.as_mut_ptr(),
        nr,
    };
    // As in block32: one weight row per tile for decode, four for prefill.
    let rm = if m <= 4 { 1 } else { 4 };
    // Prefill on x86: weight rows unpacked once per block of activation
    // rows (`panel`). The 512-bit Q6_K tiles keep their own path.
    #[cfg(target_arch = "x86_64")]
    if m >= PANEL_MIN_ROWS {
        match (isa, kind) {
            // SAFETY: as below; `panel` reads the same rows and cells.
            (Isa::Avx2, _) => return unsafe { panel::gemm(kind, false, &ctx, nr, m) },
            (Isa::Avx512Vnni, Kind::Q4K | Kind::Q5K | Kind::IQ4XS | Kind::Q2K | Kind::Q3K) => {
                return unsafe { panel::gemm(kind, true, &ctx, nr, m) }
            }
            _ => {}
        }
    }
    // SAFETY (all arms): tiles stay inside the rows and cells checked
    // above; `isa` was detected on this machine.
    #[allow(unreachable_patterns)]
    match (isa, kind) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => unsafe {
            drive(&ctx, nr, m, rm, 1, |r, c| x86::tile_fn::<false>(kind, r, c))
        },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, Kind::Q6K) => unsafe { drive(&ctx, nr, m, rm, 2, super::k_zmm::tile_fn) },
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, _) => unsafe {
            drive(&ctx, nr, m, rm, 2, |r, c| x86::tile_fn::<true>(kind, r, c))
        },
        #[cfg(target_arch = "aarch64")]
        (Isa::Neon, _) => unsafe {
            drive(&ctx, nr, m, rm, 2, |r, c| {
                neon::tile_fn::<false>(kind, r, c)
            })
        },
        #[cfg(target_arch = "aarch64")]
        (Isa::NeonDot | Isa::NeonI8mm, _) => unsafe {
            drive(&ctx, nr, m, rm, 2, |r, c| neon::tile_fn::<true>(kind, r, c))
        },
        _ => {
            for j in 0..nr {
                let row = &w[j * row_bytes..(j + 1) * row_bytes];
                for i in 0..m {
                    out[i * nr + j] = match kind {
                        Kind::Q4K => vec_dot_q4k::<false>(row, act, i),
                        Kind::Q5K => vec_dot_q4k::<true>(row, act, i),
                        Kind::Q6K => vec_dot_q6k(row, act, i),
                        Kind::IQ4XS => vec_dot_iq4xs(row, act, i),
                        Kind::Q2K => vec_dot_q2k(row, act, i),
                        Kind::Q3K => vec_dot_q3k(row, act, i),
                    };
                }
            }
        }
    }
}

/// Activation rows from which x86 runs the panel tiles: below, unpacking
/// a panel costs about what it saves.
#[cfg(target_arch = "x86_64")]
const PANEL_MIN_ROWS: usize = 8;

#[cfg(target_arch = "x86_64")]
mod panel;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use super::super::block32::sdot;
    use super::{
        f16_le, finish_q4k, iq4xs_scales, min_sum, q3k_scales, store, unpack_scales, Ctx, Kind,
        Tile,
    };
    use crate::quant::iq4::KVALUES_IQ4NL;
    use crate::quant::QK_K;

    /// Dot of 16 signed bytes as four i32 lanes.
    #[inline(always)]
    unsafe fn dot16<const DOT: bool>(w: int8x16_t, a: int8x16_t) -> int32x4_t {
        if DOT {
            sdot(vdupq_n_s32(0), w, a)
        } else {
            // |w| <= 63 and |a| <= 127: two products fit an i16 lane.
            vpaddlq_s16(vmlal_high_s8(
                vmull_s8(vget_low_s8(w), vget_low_s8(a)),
                w,
                a,
            ))
        }
    }

    #[inline(always)]
    unsafe fn dot32<const DOT: bool>(w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t {
        vaddq_s32(dot16::<DOT>(w[0], a[0]), dot16::<DOT>(w[1], a[1]))
    }

    #[inline(always)]
    unsafe fn tile_q4k<const R: usize, const C: usize, const DOT: bool, const Q5: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let nsb = ctx.nsb;
        let k = nsb * QK_K;
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut d = [0.0f32; R];
            let mut dmin = [0.0f32; R];
            let mut sc = [[0i16; 8]; R];
            let mut mn = [[0i16; 8]; R];
            let mut qs = [std::ptr::null::<u8>(); R];
            let mut qh = [std::ptr::null::<u8>(); R];
            for r in 0..R {
                let p = ctx
                    .w
                    .add((j + r) * ctx.row_bytes + sb * if Q5 { 176 } else { 144 });
                let blk = std::slice::from_raw_parts(p, 16);
                d[r] = f16_le(blk, 0);
                dmin[r] = f16_le(blk, 2);
                (sc[r], mn[r]) = unpack_scales(&blk[4..]);
                if Q5 {
                    qh[r] = p.add(16);
                    qs[r] = p.add(48);
                } else {
                    qs[r] = p.add(16);
                }
            }
            let mut iacc = [[vdupq_n_s32(0); C]; R];
            for pp in 0..4 {
                let mut lo = [[vdupq_n_s8(0); 2]; R];
                let mut hi = [[vdupq_n_s8(0); 2]; R];
                for r in 0..R {
                    for h in 0..2 {
                        let q = vld1q_u8(qs[r].add(32 * pp + 16 * h));
                        let mut l = vandq_u8(q, vdupq_n_u8(0x0F));
                        let mut u = vshrq_n_u8::<4>(q);
                        if Q5 {
                            let bits = vld1q_u8(qh[r].add(16 * h));
                            let b0 = vtstq_u8(bits, vdupq_n_u8(1 << (2 * pp)));
                            let b1 = vtstq_u8(bits, vdupq_n_u8(2 << (2 * pp)));
                            l = vorrq_u8(l, vandq_u8(b0, vdupq_n_u8(16)));
                            u = vorrq_u8(u, vandq_u8(b1, vdupq_n_u8(16)));
                        }
                        lo[r][h] = vreinterpretq_s8_u8(l);
                        hi[r][h] = vreinterpretq_s8_u8(u);
                    }
                }
                for c in 0..C {
                    let pa = ctx.aq.add((i + c) * k + sb * QK_K + 64 * pp);
                    let alo = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
                    let ahi = [vld1q_s8(pa.add(32)), vld1q_s8(pa.add(48))];
                    for r in 0..R {
                        let t =
                            vmlaq_n_s32(iacc[r][c], dot32::<DOT>(lo[r], alo), sc[r][2 * pp] as i32);
                        iacc[r][c] =
                            vmlaq_n_s32(t, dot32::<DOT>(hi[r], ahi), sc[r][2 * pp + 1] as i32);
                    }
                }
            }
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                let da = *ctx.ad.add(bi);
                let bs = std::slice::from_raw_parts(ctx.abs.add(bi * 16), 16);
                for r in 0..R {
                    let isum = vaddvq_s32(iacc[r][c]);
                    acc[r][c] += finish_q4k(d[r], dmin[r], da, isum, min_sum(&mn[r], bs));
                }
            }
        }
        store(ctx, j, i, &acc);
    }

    /// Adds to each (weight row, activation row) accumulator the two
    /// 16-value dot products of the row's codes `q[r]` with the activation
    /// codes at `at`, times the row's pair of scales `s[r]` (Q2_K, Q3_K and
    /// Q6_K share this step).
    #[inline(always)]
    unsafe fn per16_acc<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        i: usize,
        at: usize,
        q: &[[int8x16_t; 2]; R],
        s: &[[i32; 2]; R],
        iacc: &mut [[int32x4_t; C]; R],
    ) {
        let k = ctx.nsb * QK_K;
        for c in 0..C {
            let pa = ctx.aq.add((i + c) * k + at);
            let a = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
            for r in 0..R {
                let t = vmlaq_n_s32(iacc[r][c], dot16::<DOT>(q[r][0], a[0]), s[r][0]);
                iacc[r][c] = vmlaq_n_s32(t, dot16::<DOT>(q[r][1], a[1]), s[r][1]);
            }
        }
    }

    #[inline(always)]
    unsafe fn tile_q6k<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let nsb = ctx.nsb;
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut d = [0.0f32; R];
            let mut blk = [std::ptr::null::<u8>(); R];
            let mut iacc = [[vdupq_n_s32(0); C]; R];
            let mut corr = [[0i32; C]; R];
            for r in 0..R {
                let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 210);
                blk[r] = p;
                d[r] = f16_le(std::slice::from_raw_parts(p.add(208), 2), 0);
                for c in 0..C {
                    let bs = ctx.abs.add(((i + c) * nsb + sb) * 16);
                    corr[r][c] = (0..16)
                        .map(|kk| *p.add(192 + kk) as i8 as i32 * *bs.add(kk) as i32)
                        .sum::<i32>();
                }
            }
            for n in 0..2 {
                for g in 0..4 {
                    let mut q = [[vdupq_n_s8(0); 2]; R];
                    for r in 0..R {
                        let p = blk[r];
                        for h in 0..2 {
                            let ql = vld1q_u8(p.add(64 * n + 32 * (g & 1) + 16 * h));
                            let qh = vld1q_u8(p.add(128 + 32 * n + 16 * h));
                            let low = if g < 2 {
                                vandq_u8(ql, vdupq_n_u8(0x0F))
                            } else {
                                vshrq_n_u8::<4>(ql)
                            };
                            let hm = vandq_u8(qh, vdupq_n_u8(3 << (2 * g)));
                            let high = match g {
                                0 => vshlq_n_u8::<4>(hm),
                                1 => vshlq_n_u8::<2>(hm),
                                2 => hm,
                                _ => vshrq_n_u8::<2>(hm),
                            };
                            q[r][h] = vreinterpretq_s8_u8(vorrq_u8(low, high));
                        }
                    }
                    let s: [[i32; 2]; R] = std::array::from_fn(|r| {
                        let at = |kk: usize| *blk[r].add(192 + kk) as i8 as i32;
                        [at(8 * n + 2 * g), at(8 * n + 2 * g + 1)]
                    });
                    let at = sb * QK_K + 128 * n + 32 * g;
                    per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
                }
            }
            for c in 0..C {
                let da = *ctx.ad.add((i + c) * nsb + sb);
                for r in 0..R {
                    let isum = vaddvq_s32(iacc[r][c]) - 32 * corr[r][c];
                    acc[r][c] += (d[r] * da) * isum as f32;
                }
            }
        }
        store(ctx, j, i, &acc);
    }

    /// IQ4_XS tile: the table values (|v| <= 127) by the activation codes,
    /// `sdot` or widening multiplies (two products fit an i16), times each
    /// sub-block's scale.
    #[inline(always)]
    unsafe fn tile_iq4xs<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let nsb = ctx.nsb;
        let k = nsb * QK_K;
        let table = vld1q_s8(KVALUES_IQ4NL.as_ptr());
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut d = [0.0f32; R];
            let mut sc = [[0i16; 8]; R];
            let mut blk = [std::ptr::null::<u8>(); R];
            for r in 0..R {
                let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 136);
                let head = std::slice::from_raw_parts(p, 8);
                (blk[r], d[r], sc[r]) = (p, f16_le(head, 0), iq4xs_scales(head));
            }
            let mut iacc = [[vdupq_n_s32(0); C]; R];
            for t in 0..8 {
                let mut v = [[vdupq_n_s8(0); 2]; R];
                for r in 0..R {
                    let q = vld1q_u8(blk[r].add(8 + 16 * t));
                    v[r][0] = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
                    v[r][1] = vqtbl1q_s8(table, vshrq_n_u8::<4>(q));
                }
                for c in 0..C {
                    let pa = ctx.aq.add((i + c) * k + sb * QK_K + 32 * t);
                    let a = [vld1q_s8(pa), vld1q_s8(pa.add(16))];
                    for r in 0..R {
                        let dot = dot32::<DOT>(v[r], a);
                        iacc[r][c] = vmlaq_n_s32(iacc[r][c], dot, sc[r][t] as i32);
                    }
                }
            }
            for c in 0..C {
                let da = *ctx.ad.add((i + c) * nsb + sb);
                for r in 0..R {
                    acc[r][c] += (d[r] * da) * vaddvq_s32(iacc[r][c]) as f32;
                }
            }
        }
        store(ctx, j, i, &acc);
    }

    /// Q2_K tile: 2-bit codes by the activation codes per 16, times the
    /// 4-bit scales; the mins from the per-16 activation sums.
    #[inline(always)]
    unsafe fn tile_q2k<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let nsb = ctx.nsb;
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut blk = [std::ptr::null::<u8>(); R];
            let mut iacc = [[vdupq_n_s32(0); C]; R];
            for r in 0..R {
                blk[r] = ctx.w.add((j + r) * ctx.row_bytes + sb * 84);
            }
            for n in 0..2 {
                for g in 0..4 {
                    let mut q = [[vdupq_n_s8(0); 2]; R];
                    for r in 0..R {
                        for h in 0..2 {
                            let b = vld1q_u8(blk[r].add(16 + 32 * n + 16 * h));
                            let c = match g {
                                0 => b,
                                1 => vshrq_n_u8::<2>(b),
                                2 => vshrq_n_u8::<4>(b),
                                _ => vshrq_n_u8::<6>(b),
                            };
                            q[r][h] = vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(3)));
                        }
                    }
                    let s: [[i32; 2]; R] = std::array::from_fn(|r| {
                        let at = |kk: usize| (*blk[r].add(kk) & 0x0F) as i32;
                        [at(8 * n + 2 * g), at(8 * n + 2 * g + 1)]
                    });
                    let at = sb * QK_K + 128 * n + 32 * g;
                    per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
                }
            }
            for c in 0..C {
                let bi = (i + c) * nsb + sb;
                let da = *ctx.ad.add(bi);
                for r in 0..R {
                    let p = blk[r];
                    let imin: i32 = (0..16)
                        .map(|kk| (*p.add(kk) >> 4) as i32 * *ctx.abs.add(bi * 16 + kk) as i32)
                        .sum();
                    let head = std::slice::from_raw_parts(p.add(80), 4);
                    let (d, dmin) = (f16_le(head, 0), f16_le(head, 2));
                    acc[r][c] += finish_q4k(d, dmin, da, vaddvq_s32(iacc[r][c]), imin);
                }
            }
        }
        store(ctx, j, i, &acc);
    }

    /// Q3_K tile: codes plus 4 (0..=7) by the activation codes per 16,
    /// times the scales, less `4 * sum_k sc_k * bsum_k`.
    #[inline(always)]
    unsafe fn tile_q3k<const R: usize, const C: usize, const DOT: bool>(
        ctx: &Ctx,
        j: usize,
        i: usize,
    ) {
        let nsb = ctx.nsb;
        let mut acc = [[0.0f32; C]; R];
        for sb in 0..nsb {
            let mut d = [0.0f32; R];
            let mut sc = [[0i16; 16]; R];
            let mut blk = [std::ptr::null::<u8>(); R];
            let mut iacc = [[vdupq_n_s32(0); C]; R];
            let mut corr = [[0i32; C]; R];
            for r in 0..R {
                let p = ctx.w.add((j + r) * ctx.row_bytes + sb * 110);
                blk[r] = p;
                d[r] = f16_le(std::slice::from_raw_parts(p.add(108), 2), 0);
                sc[r] = q3k_scales(std::slice::from_raw_parts(p.add(96), 12));
                for c in 0..C {
                    let bs = ctx.abs.add(((i + c) * nsb + sb) * 16);
                    corr[r][c] = (0..16)
                        .map(|kk| sc[r][kk] as i32 * *bs.add(kk) as i32)
                        .sum();
                }
            }
            for n in 0..2 {
                for g in 0..4 {
                    let mut q = [[vdupq_n_s8(0); 2]; R];
                    for r in 0..R {
                        for h in 0..2 {
                            let b = vld1q_u8(blk[r].add(32 + 32 * n + 16 * h));
                            let m = vld1q_u8(blk[r].add(16 * h));
                            let low = vshlq_u8(b, vdupq_n_s8(-(2 * g as i8)));
                            let high = vshlq_u8(m, vdupq_n_s8(-((4 * n + g) as i8)));
                            let low = vandq_u8(low, vdupq_n_u8(3));
                            let high = vshlq_n_u8::<2>(vandq_u8(high, vdupq_n_u8(1)));
                            q[r][h] = vreinterpretq_s8_u8(vorrq_u8(low, high));
                        }
                    }
                    let s: [[i32; 2]; R] = std::array::from_fn(|r| {
                        [sc[r][8 * n + 2 * g] as i32, sc[r][8 * n + 2 * g + 1] as i32]
                    });
                    let at = sb * QK_K + 128 * n + 32 * g;
                    per16_acc::<R, C, DOT>(ctx, i, at, &q, &s, &mut iacc);
                }
            }
            for c in 0..C {
                let da = *ctx.ad.add((i + c) * nsb + sb);
                for r in 0..R {
                    let isum = vaddvq_s32(iacc[r][c]) - 4 * corr[r][c];
                    acc[r][c] += (d[r] * da) * isum as f32;
                }
            }
        }
        store(ctx, j, i, &acc);
    }

    unsafe fn tile_neon<const R: usize, const C: usize>(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
        match kind {
            Kind::Q4K => tile_q4k::<R, C, false, false>(ctx, j, i),
            Kind::Q5K => tile_q4k::<R, C, false, true>(ctx, j, i),
            Kind::Q6K => tile_q6k::<R, C, false>(ctx, j, i),
            Kind::IQ4XS => tile_iq4xs::<R, C, false>(ctx, j, i),
            Kind::Q2K => tile_q2k::<R, C, false>(ctx, j, i),
            Kind::Q3K => tile_q3k::<R, C, false>(ctx, j, i),
        }
    }

    #[target_feature(enable = "dotprod")]
    unsafe fn tile_dot<const R: usize, const C: usize>(kind: Kind, ctx: &Ctx, j: usize, i: usize) {
        match kind {
            Kind::Q4K => tile_q4k::<R, C, true, false>(ctx, j, i),
            Kind::Q5K => tile_q4k::<R, C, true, true>(ctx, j, i),
            Kind::Q6K => tile_q6k::<R, C, true>(ctx, j, i),
            Kind::IQ4XS => tile_iq4xs::<R, C, true>(ctx, j, i),
            Kind::Q2K => tile_q2k::<R, C, true>(ctx, j, i),
            Kind::Q3K => tile_q3k::<R, C, true>(ctx, j, i),
        }
    }

    macro_rules! per_kind {
        ($f:ident, $r:literal, $c:literal) => {{
            unsafe fn q4k(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::Q4K, ctx, j, i)
            }
            unsafe fn q5k(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::Q5K, ctx, j, i)
            }
            unsafe fn q6k(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::Q6K, ctx, j, i)
            }
            unsafe fn iq4xs(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::IQ4XS, ctx, j, i)
            }
            unsafe fn q2k(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::Q2K, ctx, j, i)
            }
            unsafe fn q3k(ctx: &Ctx, j: usize, i: usize) {
                $f::<$r, $c>(Kind::Q3K, ctx, j, i)
            }
            [q4k as Tile<Ctx>, q5k, q6k, iq4xs, q2k, q3k]
        }};
    }

    pub(super) fn tile_fn<const DOT: bool>(kind: Kind, r: usize, c: usize) -> Tile<Ctx> {
        let table = match (DOT, r, c) {
            (false, 4, 2) => per_kind!(tile_neon, 4, 2),
            (false, 4, _) => per_kind!(tile_neon, 4, 1),
            (false, _, 2) => per_kind!(tile_neon, 1, 2),
            (false, _, _) => per_kind!(tile_neon, 1, 1),
            (true, 4, 2) => per_kind!(tile_dot, 4, 2),
            (true, 4, _) => per_kind!(tile_dot, 4, 1),
            (true, _, 2) => per_kind!(tile_dot, 1, 2),
            (true, _, _) => per_kind!(tile_dot, 1, 1),
        };
        table[kind as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::{unpack_scales, unpack_scales_u32};
    use proptest::prelude::*;

    proptest! {
        /// The word-wide unpacking gives `scale_min_k4`'s values for any
        /// 12 packed bytes.
        #[test]
        fn word_unpacking_matches_scale_min_k4(b in proptest::array::uniform12(any::<u8>())) {
            let (sc, mn) = unpack_scales(&b);
            let u = unpack_scales_u32(&b);
            let bytes: Vec<u8> = u.iter().flat_map(|w| w.to_le_bytes()).collect();
            for j in 0..8 {
                prop_assert_eq!(bytes[j] as i16, sc[j]);
                prop_assert_eq!(bytes[8 + j] as i16, mn[j]);
            }
        }
    }
}
