//! Q4_0 weights (`w = d * (q - 8)`, 18-byte blocks) against `ActQ8`
//! activations. The kernels keep the unsigned nibble `q` (so it can be the
//! unsigned operand of `maddubs`/`vpdpbusd`) and fold the `- 8` into the
//! block's integer dot as `- 8 * sum(a)`, from the activation block sums.

use super::block32::Block32;
use crate::quant::{BlockQ4_0, QK};

pub(super) struct Q4_0;

impl Block32 for Q4_0 {
    const SIZE: usize = BlockQ4_0::SIZE;
    const HAS_MIN: bool = false;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        let mut c = [0i32; QK];
        for (j, &q) in b[2..Self::SIZE].iter().enumerate() {
            c[j] = (q & 0x0F) as i32 - 8;
            c[j + QK / 2] = (q >> 4) as i32 - 8;
        }
        c
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        super::block32::nibbles(p.add(2))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        sum_a: i32,
    ) -> std::arch::x86_64::__m256i {
        super::block32::dot_offset::<VNNI, 8>(w, a, sum_a)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let lo = super::block32::nibbles(p0.add(2));
        _mm512_inserti64x4(
            _mm512_castsi256_si512(lo),
            super::block32::nibbles(p1.add(2)),
            1,
        )
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 8;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        // Signed codes (`q - 8`, two subtractions): NEON's dots are signed
        // by signed, and the `- 8 * sum(a)` term the unsigned codes need
        // cost more (a load, a move from a general register into a lane,
        // and for `smmla` four lanes built from two sums; llvm-mca).
        use std::arch::aarch64::*;
        let [lo, hi] = super::block32::nibbles_neon(p.add(2));
        let eight = vdupq_n_s8(8);
        [vsubq_s8(lo, eight), vsubq_s8(hi, eight)]
    }
}
