//! Q4_1 weights (`w = d * q + m`, 20-byte blocks) against `ActQ8`
//! activations: `sum(w * a) = d * da * sum(q * qa) + m * da * sum(qa)`, the
//! second term from the activation block sums, so the inner loop is the
//! same unsigned-nibble dot as Q4_0's without an offset.

use super::block32::Block32;
use crate::quant::{BlockQ4_1, QK};

pub(super) struct Q4_1;

impl Block32 for Q4_1 {
    const SIZE: usize = BlockQ4_1::SIZE;
    const HAS_MIN: bool = true;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        let mut c = [0i32; QK];
        for (j, &q) in b[4..Self::SIZE].iter().enumerate() {
            c[j] = (q & 0x0F) as i32;
            c[j + QK / 2] = (q >> 4) as i32;
        }
        c
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        super::block32::nibbles(p.add(4))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        _sum_a: i32,
    ) -> std::arch::x86_64::__m256i {
        super::block32::dot_u8_i8::<VNNI>(w, a, 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let lo = super::block32::nibbles(p0.add(4));
        _mm512_inserti64x4(
            _mm512_castsi256_si512(lo),
            super::block32::nibbles(p1.add(4)),
            1,
        )
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 0;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        super::block32::nibbles_neon(p.add(4))
    }
}
