//! Q5_0 (`w = d * (q - 16)`, 22-byte blocks) and Q5_1 (`w = d * q + m`,
//! 24-byte blocks) against `ActQ8` activations. The fifth bits sit in a
//! u32 (`qh`, bit `i` for code `i`); SIMD code spreads them over the 32
//! code bytes (a byte shuffle, one bit tested per byte) and ORs 16 into
//! Q4_0's nibbles. The codes 0..=31 then go through Q4_0's dot (Q5_0: an
//! offset of 16 folded in from the activation sums) or Q4_1's (Q5_1: the
//! minimum from the activation sums).

use super::block32::Block32;
use crate::quant::q5::codes5;
use crate::quant::{BlockQ5_0, BlockQ5_1, QK};

pub(super) struct Q5_0;
pub(super) struct Q5_1;

/// The 32 codes (0..=31) of the block whose `qh` is at `qh` and whose
/// nibbles follow it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load5_x86(qh: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let h = i32::from_le_bytes([*qh, *qh.add(1), *qh.add(2), *qh.add(3)]);
    // Byte i takes byte i / 8 of `h` (both 128-bit lanes hold all of it),
    // then keeps bit i % 8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(h),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    let high = _mm256_and_si256(set, _mm256_set1_epi8(0x10));
    _mm256_or_si256(super::block32::nibbles(qh.add(4)), high)
}

/// A 5-bit block's codes (`qh` then the nibbles) on NEON: with `SIGNED`
/// (Q5_0) `code - 16`, the nibble less 16 where the high bit is clear
/// (a `bic` and a `sub` where the unsigned codes take an `and` and an
/// `orr`, and no `- 16 * sum(a)` term for the dots), else `code` (Q5_1).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn load5_neon<const SIGNED: bool>(qh: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
    use std::arch::aarch64::*;
    let h = vld1q_u8(
        [
            *qh,
            *qh.add(1),
            *qh.add(2),
            *qh.add(3),
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]
        .as_ptr(),
    );
    const IDX: [[u8; 16]; 2] = [
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
    ];
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bit = vld1q_u8(BIT.as_ptr());
    let nib = super::block32::nibbles_neon(qh.add(4));
    std::array::from_fn(|half| {
        let set = vtstq_u8(vqtbl1q_u8(h, vld1q_u8(IDX[half].as_ptr())), bit);
        if SIGNED {
            vsubq_s8(
                nib[half],
                vreinterpretq_s8_u8(vbicq_u8(vdupq_n_u8(0x10), set)),
            )
        } else {
            vorrq_s8(
                nib[half],
                vreinterpretq_s8_u8(vandq_u8(set, vdupq_n_u8(0x10))),
            )
        }
    })
}

/// `codes5` of a block whose `qh` starts at byte `at`, as i32.
#[inline(always)]
fn codes_at(b: &[u8], at: usize) -> [i32; QK] {
    let mut qh = [0u8; 4];
    qh.copy_from_slice(&b[at..at + 4]);
    let mut qs = [0u8; QK / 2];
    qs.copy_from_slice(&b[at + 4..at + 4 + QK / 2]);
    codes5(&qh, &qs).map(|q| q as i32)
}

impl Block32 for Q5_0 {
    const SIZE: usize = BlockQ5_0::SIZE;
    const HAS_MIN: bool = false;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        codes_at(b, 2).map(|q| q - 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        load5_x86(p.add(2))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        sum_a: i32,
    ) -> std::arch::x86_64::__m256i {
        super::block32::dot_offset::<VNNI, 16>(w, a, sum_a)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        _mm512_inserti64x4(
            _mm512_castsi256_si512(load5_x86(p0.add(2))),
            load5_x86(p1.add(2)),
            1,
        )
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 16;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        load5_neon::<true>(p.add(2))
    }
}

impl Block32 for Q5_1 {
    const SIZE: usize = BlockQ5_1::SIZE;
    const HAS_MIN: bool = true;

    #[inline(always)]
    fn codes(b: &[u8]) -> [i32; QK] {
        codes_at(b, 4)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_x86(p: *const u8) -> std::arch::x86_64::__m256i {
        load5_x86(p.add(4))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_x86<const VNNI: bool>(
        w: std::arch::x86_64::__m256i,
        a: std::arch::x86_64::__m256i,
        _sum_a: i32,
    ) -> std::arch::x86_64::__m256i {
        // Codes < 32: maddubs' pairs stay below i16 saturation.
        super::block32::dot_u8_i8::<VNNI>(w, a, 0)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_u8_pair(p0: *const u8, p1: *const u8) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        _mm512_inserti64x4(
            _mm512_castsi256_si512(load5_x86(p0.add(4))),
            load5_x86(p1.add(4)),
            1,
        )
    }

    #[cfg(target_arch = "x86_64")]
    const OFFSET: i32 = 0;

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load_neon(p: *const u8) -> [std::arch::aarch64::int8x16_t; 2] {
        load5_neon::<false>(p.add(4))
    }
}
