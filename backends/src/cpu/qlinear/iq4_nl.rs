//! IQ4_NL weights (`w = d * KVALUES_IQ4NL[q]`, 18-byte blocks) against
//! `ActQ8` activations: Q4_0's nibbles, looked up in the non-linear table
//! (one byte shuffle, `vpshufb` / `tbl`), then computed as Q8_0 computes
//! its signed codes (every table value fits an i8, |v| <= 127):
//! - AVX2: `maddubs(|v|, a * sign(v))`;
//! - AVX-512 VNNI: `vpdpbusd(v + 128, a) - 128 * sum(a)`;
//! - NEON: `sdot` (or widening multiplies) on the signed values.

use super::block32::Block32;
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::{BlockIQ4NL, QK};

pub(super) struct IQ4NL;

/// The 16 table values of 32 nibbles `q` (0..=15 per byte), both 128-bit
/// lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lookup_x86(q: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), q)
}

impl Block32 for IQ4NL {
    const SIZE: usize = BlockIQ4NL::SIZE;
    const HAS_MIN: bool = false;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        crate::quant::iq4::lookup(&b[2..Self::SIZE]).map(|v| v as i32)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        lookup_x86(super::block32::nibbles(p.add(2)))
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
        let lo = Self::load_x86(p0);
        let hi = Self::load_x86(p1);
        let both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        _mm512_xor_si512(both, _mm512_set1_epi8(-128))
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 128;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        use std::arch::aarch64::*;
        let t = vld1q_s8(KVALUES_IQ4NL.as_ptr());
        let [lo, hi] = super::block32::nibbles_neon(p.add(2));
        [
            vqtbl1q_s8(t, vreinterpretq_u8_s8(lo)),
            vqtbl1q_s8(t, vreinterpretq_u8_s8(hi)),
        ]
    }
}
