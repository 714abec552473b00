//! Bounds on rendering a chat template, which comes from a model file a
//! stranger wrote: minijinja's fuel (every instruction, and every byte of
//! data the template makes, is paid for, so it bounds both time and memory),
//! its recursion limit (macros calling themselves), and a cap on the
//! rendered text. Defaults are far above what real templates need (Qwen3's
//! template renders a 1 MB, 200-message conversation on about 70,000 fuel);
//! `MLLM_TEMPLATE_FUEL`, `MLLM_TEMPLATE_MAX_DEPTH` and
//! `MLLM_TEMPLATE_MAX_OUTPUT` change them.

use mllm_backends::env_limit;

/// Fuel per render: about this many instructions, or 64 times as many
/// bytes of data made (minijinja charges 1/64 fuel a byte): at most about
/// 640 MB and well under a second of work.
pub const DEFAULT_FUEL: u64 = 10_000_000;
/// Nesting depth in minijinja's units (a loop or block frame is 1, a
/// macro call 4, an include 10): about 50 macro calls deep, far beyond
/// the recursive macros of tool-calling templates, and within the stack.
pub const DEFAULT_MAX_DEPTH: usize = 200;
/// Bytes of rendered text (a prompt of ~4M tokens, beyond any context).
pub const DEFAULT_MAX_OUTPUT: usize = 16 << 20;

/// The limits one render runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateLimits {
    pub fuel: u64,
    pub max_depth: usize,
    pub max_output: usize,
}

impl Default for TemplateLimits {
    fn default() -> TemplateLimits {
        TemplateLimits {
            fuel: DEFAULT_FUEL,
            max_depth: DEFAULT_MAX_DEPTH,
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }
}

impl TemplateLimits {
    /// The defaults, changed by the environment where set.
    pub fn from_env() -> Result<TemplateLimits, String> {
        let d = TemplateLimits::default();
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Ok(TemplateLimits {
            fuel: env_limit::read_or("MLLM_TEMPLATE_FUEL", d.fuel)?,
            max_depth: size(env_limit::read_or(
                "MLLM_TEMPLATE_MAX_DEPTH",
                d.max_depth as u64,
            )?),
            max_output: size(env_limit::read_or(
                "MLLM_TEMPLATE_MAX_OUTPUT",
                d.max_output as u64,
            )?),
        })
    }
}

/// Collects rendered text and fails the render once it passes `max` bytes.
pub(super) struct CappedOutput {
    pub(super) buf: Vec<u8>,
    max: usize,
    pub(super) overflowed: bool,
}

impl CappedOutput {
    pub(super) fn new(max: usize) -> CappedOutput {
        CappedOutput {
            buf: Vec::new(),
            max,
            overflowed: false,
        }
    }
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.max {
            self.overflowed = true;
            return Err(std::io::Error::other("the rendered text is too long"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
