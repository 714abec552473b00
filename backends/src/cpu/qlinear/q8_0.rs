//! Q8_0 weights (`w = d * q`, signed 8-bit `q`, 34-byte blocks) against
//! `ActQ8` activations. Both operands are signed, so:
//! - AVX2: `maddubs(|q|, a * sign(q))` (ggml's sign trick; activation codes
//!   never reach -128, so negating them is exact);
//! - AVX-512 VNNI: `vpdpbusd(q + 128, a) - 128 * sum(a)`, the offset folded
//!   in from the activation block sums;
//! - NEON: `sdot` (or widening multiplies) take signed bytes directly.

use super::block32::Block32;
use crate::quant::{BlockQ8_0, QK};

pub(super) struct Q8_0;

impl Block32 for Q8_0 {
    const SIZE: usize = BlockQ8_0::SIZE;
    const HAS_MIN: bool = false;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        let mut c = [0i32; QK];
        for (c, &q) in c.iter_mut().zip(&b[2..Self::SIZE]) {
            *c = q as i8 as i32;
        }
        c
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_loadu_si256(p.add(2) as *const __m256i)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        sum_a: i32,
    ) -> std::arch::x86_64::__m256i {
        super::block32::dot_signed::<VNNI>(w, a, sum_a)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let lo = _mm256_loadu_si256(p0.add(2) as *const __m256i);
        let hi = _mm256_loadu_si256(p1.add(2) as *const __m256i);
        let both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        _mm512_xor_si512(both, _mm512_set1_epi8(-128))
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 128;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        use std::arch::aarch64::*;
        let p = p.add(2) as *const i8;
        [vld1q_s8(p), vld1q_s8(p.add(16))]
    }
}
