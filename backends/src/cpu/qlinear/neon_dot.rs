//! The NEON helpers the block kernels share (`block32.rs`'s tiles, the
//! K-quant kernels): signed dot products with and without the dotprod
//! extension, `smmla`, nibble unpacking, f16 scales, and the lane loads
//! the i8mm tiles build their scale vectors from. Split from block32.rs to
//! keep that file to its tiles.

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;

/// `sum(w * a)` over 32 signed bytes as four i32 lanes: `sdot` with the
/// dotprod extension, widening multiplies without.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn dot_s8<const DOT: bool>(
    w: [std::arch::aarch64::int8x16_t; 2],
    a: [std::arch::aarch64::int8x16_t; 2],
) -> std::arch::aarch64::int32x4_t {
    use std::arch::aarch64::*;
    let acc = vdupq_n_s32(0);
    if DOT {
        sdot(sdot(acc, w[0], a[0]), w[1], a[1])
    } else {
        // |w * a| <= 128 * 127, so two products fit an i16 lane.
        let p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w[0]), vget_low_s8(a[0])), w[0], a[0]);
        let p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w[1]), vget_low_s8(a[1])), w[1], a[1]);
        vpadalq_s16(vpadalq_s16(acc, p0), p1)
    }
}

/// `acc + dot(a, b)` per 4-byte group (the `sdot` instruction; its
/// intrinsic is not stable yet).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "dotprod")]
#[inline]
pub(super) unsafe fn sdot(
    mut acc: std::arch::aarch64::int32x4_t,
    a: std::arch::aarch64::int8x16_t,
    b: std::arch::aarch64::int8x16_t,
) -> std::arch::aarch64::int32x4_t {
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// 16 bytes of packed nibbles -> low nibbles (elements 0..16) and high
/// nibbles (16..32), each 0..=15.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn nibbles_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
    use std::arch::aarch64::*;
    let q = vld1q_u8(p);
    [
        vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))),
        vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)),
    ]
}

/// The two little-endian f16 at `p` (a block's scale and minimum) as
/// f32, with one load and one `fcvtl` (exact, as `f16_neon` twice): the
/// 32-value tiles with a minimum spent a load, a move and a convert on
/// each.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn f16x2_neon(p: *const u8) -> (f32, f32) {
    use std::arch::aarch64::*;
    let out = f16x4_neon(vcreate_u32((p as *const u32).read_unaligned() as u64));
    (vgetq_lane_f32::<0>(out), vgetq_lane_f32::<1>(out))
}

/// Four f16 (the bits in `v`, lane order) as f32: one `fcvtl` (the f16
/// vector types are not stable Rust yet).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn f16x4_neon(
    v: std::arch::aarch64::uint32x2_t,
) -> std::arch::aarch64::float32x4_t {
    let out;
    std::arch::asm!(
        "fcvtl {o:v}.4s, {i:v}.4h",
        i = in(vreg) v,
        o = lateout(vreg) out,
        options(pure, nomem, nostack, preserves_flags)
    );
    out
}

/// The little-endian f16 at `p` as f32, with one `fcvt` (base ARMv8
/// floating point; exact). `half`'s conversion reads the CPU's features
/// and calls out of line, which cost the tiles their unrolled registers:
/// 2x the cycles per block in llvm-mca (bench/llvm_mca.sh).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn f16_neon(p: *const u8) -> f32 {
    // Loaded straight into the vector register (`ldr h`: no integer load
    // and move across; an unaligned address is fine on Linux).
    let out: f32;
    std::arch::asm!(
        "ldr {t:h}, [{p}]",
        "fcvt {o:s}, {t:h}",
        p = in(reg) p,
        t = out(vreg) _,
        o = lateout(vreg) out,
        options(pure, readonly, nostack, preserves_flags)
    );
    out
}

/// `acc + A B^T` for the 2x8 int8 matrices in `a` and `b` (`smmla`; its
/// intrinsic is not stable yet).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "i8mm")]
#[inline]
pub(super) unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    std::arch::asm!(
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// Rows `[x0 | x1]` of 8 bytes each, for half `h` (0: bytes 0..8 of each
/// 16, 1: bytes 8..16): `smmla`'s operand of two rows.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn zip8(x0: int8x16_t, x1: int8x16_t, h: usize) -> int8x16_t {
    let (a, b) = (vreinterpretq_s64_s8(x0), vreinterpretq_s64_s8(x1));
    vreinterpretq_s8_s64(if h == 0 {
        vzip1q_s64(a, b)
    } else {
        vzip2q_s64(a, b)
    })
}

/// The 4 bytes at `p0` and at `p1` (unaligned) as the two lanes of a
/// vector: `ldr s` and a lane load in asm. Built from intrinsics, LLVM
/// moved the values through general registers, one move across per
/// lane (11 micro-ops on Neoverse V2 for `cols2` instead of 4,
/// llvm-mca).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn u32x2_at<T>(p0: *const T, p1: *const T) -> uint32x2_t {
    let out;
    std::arch::asm!(
        "ldr {o:s}, [{p0}]",
        "ld1 {{ {o:v}.s }}[1], [{p1}]",
        p0 = in(reg) p0,
        p1 = in(reg) p1,
        o = out(vreg) out,
        options(pure, readonly, nostack, preserves_flags)
    );
    out
}

/// `[x(p0), x(p1), x(p0), x(p1)]`: one 4-byte value of each of two
/// activation rows, in the lane order of `smmla`'s 2x2 result
/// (`(w0,a0), (w0,a1), (w1,a0), (w1,a1)`).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn cols2<T>(p0: *const T, p1: *const T) -> uint32x4_t {
    let v = u32x2_at(p0, p1);
    vcombine_u32(v, v)
}

/// The byte at `p0` and the byte at `p1` as the two lanes of a vector
/// (zero-extended). `ldr b` clears the rest of the register, so the lane
/// load does not merge into the previous iteration's value: built from
/// intrinsics, LLVM inserted both bytes into a live register, a
/// loop-carried chain that made MXFP4's i8mm tile 2.6x slower than
/// IQ4_NL's on Neoverse V2 (llvm-mca).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn u8x2_at(p0: *const u8, p1: *const u8) -> uint32x2_t {
    let out;
    std::arch::asm!(
        "ldr {o:b}, [{p0}]",
        "ld1 {{ {o:v}.b }}[4], [{p1}]",
        p0 = in(reg) p0,
        p1 = in(reg) p1,
        o = out(vreg) out,
        options(pure, readonly, nostack, preserves_flags)
    );
    out
}

/// `e8m0_to_fp32_half` of both lanes (each an e8m0 byte): `2^(e - 128)`,
/// the exact bits, subnormals included (as x86's `e8m0_x16`).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn e8m0x2_neon(e: uint32x2_t) -> float32x2_t {
    let normal = vshl_n_u32::<23>(vsub_u32(e, vdup_n_u32(1)));
    let tiny = vshl_u32(vdup_n_u32(0x0020_0000), vreinterpret_s32_u32(e));
    let small = vclt_u32(e, vdup_n_u32(2));
    vreinterpret_f32_u32(vbsl_u32(small, tiny, normal))
}

/// The 2 bytes at `p0` and at `p1` (unaligned) as lanes 0 and 1.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(super) unsafe fn u16x2_at(p0: *const u8, p1: *const u8) -> uint32x2_t {
    let out;
    std::arch::asm!(
        "ldr {o:h}, [{p0}]",
        "ld1 {{ {o:v}.h }}[1], [{p1}]",
        p0 = in(reg) p0,
        p1 = in(reg) p1,
        o = out(vreg) out,
        options(pure, readonly, nostack, preserves_flags)
    );
    out
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use std::arch::aarch64::*;

    use crate::quant::mxfp4::e8m0_to_fp32_half;

    /// Every pair of e8m0 bytes, read as `u8x2_at` reads two blocks' heads,
    /// becomes `e8m0_to_fp32_half`'s exact bits (subnormals included).
    #[test]
    fn e8m0x2_is_e8m0_to_fp32_half_for_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        for e0 in 0..=255u8 {
            let e1 = e0.wrapping_mul(37).wrapping_add(11);
            let mut out = [0.0f32; 2];
            // SAFETY: both pointers are into `bytes`; NEON is baseline.
            unsafe {
                let v =
                    super::e8m0x2_neon(super::u8x2_at(&bytes[e0 as usize], &bytes[e1 as usize]));
                vst1_f32(out.as_mut_ptr(), v);
            }
            assert_eq!(
                out[0].to_bits(),
                e8m0_to_fp32_half(e0).to_bits(),
                "e = {e0}"
            );
            assert_eq!(
                out[1].to_bits(),
                e8m0_to_fp32_half(e1).to_bits(),
                "e = {e1}"
            );
        }
    }
}
