//! The 32-value table types against `ActQ8` activations: IQ4_NL (`w = d *
//! KVALUES_IQ4NL[q]`, an f16 `d` then Q4_0's nibbles, 18-byte blocks) and
//! MXFP4 (`w = 2^(e - 128) * KVALUES_MXFP4[q]`, its e8m0 byte then the
//! same nibbles, 17 bytes; `Block32::E8M0`). One type, `Lut`, with the
//! table and the scale's width as its parameter: the nibbles are looked up
//! in the table (one byte shuffle, `vpshufb` / `tbl`), then computed as
//! Q8_0 computes its signed codes (every table value fits an i8, |v| <=
//! 127):
//! - AVX2: `maddubs(|v|, a * sign(v))`;
//! - AVX-512 VNNI: `vpdpbusd(v + 128, a) - 128 * sum(a)`;
//! - NEON: `sdot` (or widening multiplies) on the signed values.

use super::block32::Block32;
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::mxfp4::KVALUES_MXFP4;
use crate::quant::QK;

/// IQ4_NL (`MX = false`) or MXFP4 (`MX = true`) blocks.
pub(super) struct Lut<const MX: bool>;
pub(super) type IQ4NL = Lut<false>;
pub(super) type Mxfp4 = Lut<true>;

impl<const MX: bool> Lut<MX> {
    /// Bytes before the nibbles: the f16 `d`, or MXFP4's e8m0 byte.
    const HEAD: usize = if MX { 1 } else { 2 };
    const TABLE: &'static [i8; 16] = if MX { &KVALUES_MXFP4 } else { &KVALUES_IQ4NL };

    /// The table values of 32 nibbles `q` (0..=15 per byte), both 128-bit
    /// lanes.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn lookup_x86(q: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        let t = _mm_loadu_si128(Self::TABLE.as_ptr() as *const __m128i);
        _mm256_shuffle_epi8(_mm256_set_m128i(t, t), q)
    }
}

impl<const MX: bool> Block32 for Lut<MX> {
    const SIZE: usize = Self::HEAD + QK / 2;
    const HAS_MIN: bool = false;
    const E8M0: bool = MX;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        let qs = &b[Self::HEAD..Self::SIZE];
        std::array::from_fn(|e| {
            let q = if e < 16 {
                qs[e] & 0x0F
            } else {
                qs[e - 16] >> 4
            };
            Self::TABLE[q as usize] as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        Self::lookup_x86(super::block32::nibbles(p.add(Self::HEAD)))
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
        let t = vld1q_s8(Self::TABLE.as_ptr());
        let [lo, hi] = super::block32::nibbles_neon(p.add(Self::HEAD));
        [
            vqtbl1q_s8(t, vreinterpretq_u8_s8(lo)),
            vqtbl1q_s8(t, vreinterpretq_u8_s8(hi)),
        ]
    }
}
