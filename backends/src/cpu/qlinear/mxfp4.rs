//! MXFP4 weights (`w = 2^(e - 128) * KVALUES_MXFP4[q]`, 17-byte blocks:
//! the e8m0 byte, then Q4_0's nibbles) against `ActQ8` activations: IQ4_NL's
//! kernel with MXFP4's table (the e2m1 values doubled, integers up to 12)
//! and the power-of-two scale read from its byte (`Block32::E8M0`). Every
//! table value fits an i8, so the integer dot is exact as IQ4_NL's.

use super::block32::Block32;
use crate::quant::mxfp4::{BlockMXFP4, KVALUES_MXFP4};
use crate::quant::QK;

pub(super) struct Mxfp4;

/// The table values of 32 nibbles `q` (0..=15 per byte), both 128-bit
/// lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lookup_x86(q: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let t = _mm_loadu_si128(KVALUES_MXFP4.as_ptr() as *const __m128i);
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), q)
}

impl Block32 for Mxfp4 {
    const SIZE: usize = BlockMXFP4::SIZE;
    const HAS_MIN: bool = false;
    const E8M0: bool = true;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        std::array::from_fn(|e| {
            let byte = b[1 + e % 16];
            let q = if e < 16 { byte & 0x0F } else { byte >> 4 };
            KVALUES_MXFP4[q as usize] as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        lookup_x86(super::block32::nibbles(p.add(1)))
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
        let t = vld1q_s8(KVALUES_MXFP4.as_ptr());
        let [lo, hi] = super::block32::nibbles_neon(p.add(1));
        [
            vqtbl1q_s8(t, vreinterpretq_u8_s8(lo)),
            vqtbl1q_s8(t, vreinterpretq_u8_s8(hi)),
        ]
    }
}
