//! Flush-to-zero for kernels whose values underflow: a scope guard that
//! sets the x86 MXCSR's FTZ (results below f32's normal range become 0)
//! and DAZ (such inputs read as 0) bits for the current thread and
//! restores the previous mode when dropped.
//!
//! Why: x86 cores take a microcode assist, ~100 cycles, for every
//! operation that makes or reads a subnormal. The chunked gated delta
//! rule multiplies by `exp(cum_i - cum_j)`, which strong decays (Qwen3.5's
//! `g` reaches tens per token) drive below 1e-38 for tokens far apart in a
//! chunk: a Qwen3.5-0.8B prefill spent 14x the kernel's normal time there
//! (`examples/delta_bench.rs`). Flushed, such a term is 0 instead of a
//! value below 1.2e-38 beside terms near 1, a difference no f32 result
//! can show. AArch64 NEON handles subnormals at full speed on the cores
//! we target, so the guard does nothing there.

/// While alive, subnormal f32 results and inputs are zero on this thread.
pub struct FlushToZero {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

/// MXCSR bits: flush to zero (15) and denormals are zero (6).
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

impl FlushToZero {
    #[allow(clippy::new_without_default)]
    pub fn new() -> FlushToZero {
        #[cfg(target_arch = "x86_64")]
        {
            let saved = read_mxcsr();
            write_mxcsr(saved | FTZ_DAZ);
            FlushToZero { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushToZero {}
    }
}

impl Drop for FlushToZero {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        write_mxcsr(self.saved);
    }
}

#[cfg(target_arch = "x86_64")]
fn read_mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: stmxcsr stores the 4-byte control register into `v`.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut v as *mut u32, options(nostack, preserves_flags))
    };
    v
}

#[cfg(target_arch = "x86_64")]
fn write_mxcsr(v: u32) {
    // SAFETY: ldmxcsr loads a control word read from MXCSR with only the
    // FTZ/DAZ bits changed (no reserved bit set).
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &v as *const u32, options(nostack, preserves_flags, readonly))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    /// MIN_POSITIVE / 2, a subnormal unless flushed; the operands pass
    /// through `black_box` here so the product is computed at this point
    /// (LLVM otherwise treats it as free to reuse across mode changes).
    fn half_of_min() -> f32 {
        black_box(black_box(f32::MIN_POSITIVE) * black_box(0.5f32))
    }

    #[test]
    fn subnormals_flush_inside_the_guard_only() {
        assert!(half_of_min() > 0.0, "subnormal results exist by default");
        {
            let _g = FlushToZero::new();
            #[cfg(target_arch = "x86_64")]
            assert_eq!(half_of_min(), 0.0, "flushed inside the guard");
        }
        assert!(half_of_min() > 0.0, "the mode is restored");
    }
}
