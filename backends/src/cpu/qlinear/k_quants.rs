//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_KS and TQ2_0 weights against `ActQ8K` activations
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
//! - Q8_KS: as Q6_K with one byte per code, offset by 64 (0..=127), and
//!   `-64 * sum_k sc_k * sum_k(qa)`: `maddubs` stays exact (two products
//!   of at most 127 * 128 fit an i16).
//! - IQ4_XS: `sum(w * a) = da * d * sum_j (ls_j - 32) * sum(v * qa)` with
//!   `v` the table value (`KVALUES_IQ4NL`, -127..=113) of each 4-bit code;
//!   `v` is signed, so the SIMD paths multiply `|v|` by `qa` carrying
//!   `v`'s sign (`vpsignb`), exact since both stay within 127.
//! - TQ2_0: `sum(w * a) = da * d * (sum(q * qa) - sum(qa))` with 2-bit
//!   codes `q = t + 1` in Q2_K's layout and no scales (`tq2`).
//!
//! The SIMD paths (AVX2 `maddubs` + `madd` by the scales, AVX-512 VNNI
//! `vpdpwssd` doing the scale multiply-add in one, NEON `sdot` or widening
//! multiplies + `mla` by the scale) produce the same integers as the scalar
//! twins and finish each super-block with the same float expression, so
//! all paths agree bit for bit.

use super::act_quant::ActQ8K;
use super::{drive, Isa, Out, Tile};
use crate::quant::iq4::{BlockIQ4XS, KVALUES_IQ4NL};
use crate::quant::k_quants::{scale_min_k4, K_SCALE_SIZE};
use crate::quant::q8_ks::{BlockQ8KS, Q8KS_OFFSET};
use crate::quant::tq::BlockTQ2_0;
use crate::quant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QuantType, QK_K};

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

/// Scalar twin for Q8_KS: Q6_K's sum with a byte per code.
pub(super) fn vec_dot_q8ks(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockQ8KS::SIZE..(sb + 1) * BlockQ8KS::SIZE];
        let (qs, scales) = (&blk[..QK_K], &blk[QK_K..QK_K + 16]);
        let d = f16_le(blk, QK_K + 16);
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let mut isum = 0i32;
        for (k, &sc) in scales.iter().enumerate() {
            let dot: i32 = (16 * k..16 * k + 16)
                .map(|e| (qs[e] as i32 - Q8KS_OFFSET) * a[e] as i32)
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

/// Scalar twin for TQ2_0: codes as Q2_K's, no scales, one offset of 1
/// (the activation sum, from the per-16 sums).
pub(super) fn vec_dot_tq2(w: &[u8], act: &ActQ8K, i: usize) -> f32 {
    let nsb = act.blocks_per_row();
    let mut acc = 0.0f32;
    for sb in 0..nsb {
        let blk = &w[sb * BlockTQ2_0::SIZE..(sb + 1) * BlockTQ2_0::SIZE];
        let d = f16_le(blk, 64);
        let a = &act.qs[i * act.k + sb * QK_K..i * act.k + (sb + 1) * QK_K];
        let bs = &act.bsums[(i * nsb + sb) * 16..(i * nsb + sb + 1) * 16];
        let dot: i32 = (0..QK_K)
            .map(|e| {
                let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
                ((blk[32 * n + l] >> (2 * j)) & 3) as i32 * a[e] as i32
            })
            .sum();
        let asum: i32 = bs.iter().map(|&s| s as i32).sum();
        acc += (d * act.d[i * nsb + sb]) * (dot - asum) as f32;
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
    /// `ActQ8K::pairs` (Arm's i8mm tiles, `neon_mm`).
    #[cfg(target_arch = "aarch64")]
    pub(super) apairs: *const i8,
    pub(super) out: *mut f32,
    /// Values from one activation row's outputs to the next (`Out::ld`).
    pub(super) ldo: usize,
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
            *ctx.out.add((i + c) * ctx.ldo + j + r) = acc[r][c];
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
    Q8KS,
    TQ2,
}

impl Kind {
    /// The kind of a K-quant weight type (the scaled ones: of their
    /// plain blocks); `None` for every other type.
    pub(super) fn of(ty: QuantType) -> Option<Kind> {
        Some(match ty {
            QuantType::Q4_K => Kind::Q4K,
            QuantType::Q5_K => Kind::Q5K,
            QuantType::Q6_K | QuantType::Q6KScaled { .. } => Kind::Q6K,
            QuantType::Q8KS { .. } => Kind::Q8KS,
            QuantType::IQ4_XS => Kind::IQ4XS,
            QuantType::Q2_K => Kind::Q2K,
            QuantType::Q3_K => Kind::Q3K,
            QuantType::TQ2_0 => Kind::TQ2,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Kind::Q4K => BlockQ4K::SIZE,
            Kind::Q5K => BlockQ5K::SIZE,
            Kind::Q6K => BlockQ6K::SIZE,
            Kind::IQ4XS => BlockIQ4XS::SIZE,
            Kind::Q2K => BlockQ2K::SIZE,
            Kind::Q3K => BlockQ3K::SIZE,
            Kind::Q8KS => BlockQ8KS::SIZE,
            Kind::TQ2 => BlockTQ2_0::SIZE,
        }
    }
}

/// `out [m][nr] = act [m, k] . w [nr, k]^T` for `nr` whole weight rows.
///
/// # Safety
/// `out` must be valid for writes of every cell `[i < m][j < nr]` that no
/// other thread makes or reads during the call.
pub(super) unsafe fn gemm(kind: Kind, isa: Isa, w: &[u8], nr: usize, act: &ActQ8K, out: Out) {
    let (m, nsb) = (act.m, act.blocks_per_row());
    let row_bytes = nsb * kind.size();
    assert!(w.len() == nr * row_bytes && out.ld >= nr);
    let ctx = Ctx {
        w: w.as_ptr(),
        row_bytes,
        nsb,
        aq: act.qs.as_ptr(),
        ad: act.d.as_ptr(),
        abs: act.bsums.as_ptr(),
        #[cfg(target_arch = "aarch64")]
        apairs: act.pairs.as_ptr(),
        out: out.ptr,
        ldo: out.ld,
    };
    // As in block32: one weight row per tile for decode, four for prefill.
    let rm = if m <= 4 { 1 } else { 4 };
    // Prefill on x86: weight rows unpacked once per block of activation
    // rows, sixteen interleaved on AVX-512 VNNI (`panel16`), four on AVX2
    // (`panel`).
    #[cfg(target_arch = "x86_64")]
    if m >= PANEL_MIN_ROWS {
        match isa {
            // SAFETY: as below; the panels read the same rows and cells.
            Isa::Avx2 => return unsafe { panel::gemm(kind, false, &ctx, nr, m) },
            Isa::Avx512Vnni => return unsafe { panel16::gemm(kind, &ctx, nr, m) },
            _ => {}
        }
    }
    // SAFETY (all arms): tiles stay inside the rows checked above and the
    // cells the caller vouched for; `isa` was detected on this machine.
    // One-row decode of the K-quants on x86 (Q6_K on AVX2 only): four weight rows finished
    // together (`rows4`; with more activation rows the tiles below read
    // each weight once per two of them, which wins).
    #[cfg(target_arch = "x86_64")]
    if m == 1 && matches!(isa, Isa::Avx2 | Isa::Avx512Vnni) {
        if let Some(four) = rows4::tile_fn(kind, isa == Isa::Avx512Vnni) {
            let vnni = isa == Isa::Avx512Vnni;
            return unsafe {
                drive(&ctx, nr, m, 4, 1, |r, c| {
                    if r == 4 {
                        four
                    } else if vnni {
                        x86::tile_fn::<true>(kind, r, c)
                    } else {
                        x86::tile_fn::<false>(kind, r, c)
                    }
                })
            };
        }
    }
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
        // Arm i8mm: 2x2 `smmla` tiles for Q4_K, Q5_K and Q6_K prompt
        // chunks (the twin's bits like every tile here; kept to chunks
        // until a device shows they pay for a few rows too), on the
        // activation row pairs quantization made for them (read up to pair
        // m / 2).
        #[cfg(target_arch = "aarch64")]
        (Isa::NeonI8mm, Kind::Q4K | Kind::Q5K | Kind::Q6K)
            if m > crate::cpu::ROW_INVARIANT_STEP && act.pairs.len() == m / 2 * 2 * act.k =>
        unsafe {
            match neon_mm::tile_fn_mm(kind) {
                Some(tiles) => drive(&ctx, nr, m, 2, 2, tiles),
                None => drive(&ctx, nr, m, rm, 2, |r, c| neon::tile_fn::<true>(kind, r, c)),
            }
        },
        #[cfg(target_arch = "aarch64")]
        (Isa::NeonDot | Isa::NeonI8mm, _) => unsafe {
            drive(&ctx, nr, m, rm, 2, |r, c| neon::tile_fn::<true>(kind, r, c))
        },
        _ => {
            for j in 0..nr {
                let row = &w[j * row_bytes..(j + 1) * row_bytes];
                for i in 0..m {
                    let v = match kind {
                        Kind::Q4K => vec_dot_q4k::<false>(row, act, i),
                        Kind::Q5K => vec_dot_q4k::<true>(row, act, i),
                        Kind::Q6K => vec_dot_q6k(row, act, i),
                        Kind::IQ4XS => vec_dot_iq4xs(row, act, i),
                        Kind::Q2K => vec_dot_q2k(row, act, i),
                        Kind::Q3K => vec_dot_q3k(row, act, i),
                        Kind::Q8KS => vec_dot_q8ks(row, act, i),
                        Kind::TQ2 => vec_dot_tq2(row, act, i),
                    };
                    // SAFETY: inside the cells the caller vouched for.
                    unsafe { *out.at(i, j) = v };
                }
            }
        }
    }
}

/// Whether a call of `m` activation rows on `isa` runs the 16-row panels
/// (for most K-quants), so that tasks should hold whole panels.
pub(super) fn sixteen_rows(isa: Isa, m: usize) -> bool {
    cfg!(target_arch = "x86_64") && isa == Isa::Avx512Vnni && m >= PANEL_MIN_ROWS
}

/// Activation rows from which x86 runs the panel tiles: below, unpacking
/// a panel costs about what it saves.
const PANEL_MIN_ROWS: usize = 8;

/// `$body` once per literal, `$i` bound to it: a super-block's chunk loop
/// unrolled by hand. Left as a loop (the four-row tiles are too big for the
/// compiler to unroll), each chunk's scale-pick mask and code shifts were
/// built at run time or dispatched through a jump table.
#[cfg(target_arch = "x86_64")]
macro_rules! unroll {
    ($i:ident in [$($v:literal),*] $body:block) => {$({
        let $i: usize = $v;
        $body
    })*};
}

#[cfg(target_arch = "x86_64")]
mod panel;
#[cfg(target_arch = "x86_64")]
mod panel16;
#[cfg(target_arch = "x86_64")]
mod rows4;
mod tq2;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_per16;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_mm;

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
