//! Giving freed heap memory back to the operating system. Building a
//! tokenizer from a GGUF vocabulary makes ~150 MB of short-lived strings
//! and maps (Qwen3's 151k tokens and merges); glibc's allocator keeps such
//! freed memory mapped, so it would stay in the resident set beside the
//! weights for the whole run. `malloc_trim` returns it.

/// Returns freed heap pages to the OS where the allocator supports it
/// (glibc); a no-op elsewhere.
pub fn return_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only releases free memory; it takes
        // no pointers and is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}
