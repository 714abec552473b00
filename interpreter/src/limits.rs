//! Bounds on what one call into a script may do, so a hostile or broken
//! `.mdl` file cannot hang the process or exhaust its memory:
//!
//! - steps: every expression evaluated and every loop iteration is a step;
//!   a call (a forward, or building the model) taking more than
//!   `max_steps` is stopped. The language has no `while` and calls nest at
//!   most `MAX_CALL_DEPTH` deep, but nested loops over long ranges or a
//!   function calling itself twice still multiply without end.
//! - memory: the tensors a call's ops made and still holds (lists, frames,
//!   return values) may take at most `max_memory` bytes. Views share their
//!   input's storage and are not counted twice; weights and the KV cache
//!   are not the script's to count.
//! - value sizes: lists and strings the script builds by concatenation are
//!   capped like ranges (`MAX_ITEMS`), since doubling in a loop takes few
//!   steps.
//!
//! Defaults: `DEFAULT_MAX_STEPS`, and half the machine's memory; the
//! environment variables `MLLM_MAX_SCRIPT_STEPS` and
//! `MLLM_MAX_SCRIPT_MEMORY` (bytes, or with a K/M/G/T suffix) change them.

use std::sync::{Arc, Weak};

use mllm_backends::{env_limit, Buffer, Tensor};

use crate::error::{RtError, RtResult};

/// Steps one call may take: a real forward takes thousands (Qwen3-0.6B's
/// 28 layers: about 4,000; a prompt with images adds about ten per token),
/// and the interpreter runs over 10^7 steps a second, so a runaway script
/// stops within seconds.
pub const DEFAULT_MAX_STEPS: u64 = 100_000_000;

/// Items in one list (ranges, concatenations) and bytes in one string.
pub const MAX_ITEMS: usize = 1 << 24;

/// The memory limit when the machine's memory is unknown.
const FALLBACK_MEMORY: u64 = 8 << 30;

const STEPS_VAR: &str = "MLLM_MAX_SCRIPT_STEPS";
const MEMORY_VAR: &str = "MLLM_MAX_SCRIPT_MEMORY";

/// The limits of one script call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptLimits {
    pub max_steps: u64,
    /// Bytes of tensors the call's ops made that may be alive at once.
    pub max_memory: u64,
}

impl Default for ScriptLimits {
    fn default() -> ScriptLimits {
        ScriptLimits {
            max_steps: DEFAULT_MAX_STEPS,
            max_memory: default_memory(),
        }
    }
}

impl ScriptLimits {
    /// The defaults, changed by `MLLM_MAX_SCRIPT_STEPS` and
    /// `MLLM_MAX_SCRIPT_MEMORY` where set; a value that is not a positive
    /// number is an error naming the variable.
    pub fn from_env() -> Result<ScriptLimits, String> {
        let d = ScriptLimits::default();
        Ok(ScriptLimits {
            max_steps: env_limit::read_or(STEPS_VAR, d.max_steps)?,
            max_memory: env_limit::read_or(MEMORY_VAR, d.max_memory)?,
        })
    }
}

/// Half the physical memory (Linux `/proc/meminfo`), else 8 GiB; read once.
fn default_memory() -> u64 {
    static MEMORY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MEMORY.get_or_init(read_default_memory)
}

fn read_default_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    });
    total.map_or(FALLBACK_MEMORY, |t| t / 2)
}

/// Counts one call's steps and the tensors its ops made.
pub(crate) struct Budget {
    limits: ScriptLimits,
    steps: u64,
    /// Storage of tensors made by ops, with its size; dead ones are
    /// dropped at each sweep.
    made: Vec<(Weak<Buffer>, u64)>,
    /// Live bytes at the last sweep, and bytes made since.
    live: u64,
    fresh: u64,
    /// Entries at the last sweep (the vector is pruned when it doubles).
    swept_len: usize,
}

impl Budget {
    pub(crate) fn new(limits: ScriptLimits) -> Budget {
        Budget {
            limits,
            steps: 0,
            made: vec![],
            live: 0,
            fresh: 0,
            swept_len: 0,
        }
    }

    #[inline]
    pub(crate) fn step(&mut self) -> RtResult<()> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(RtError::new(
                "mdl::run::step_limit",
                format!(
                    "the script took more than {} steps in one call and was stopped",
                    self.limits.max_steps
                ),
            )
            .help(format!(
                "is a loop or a recursion running without end? A model's forward takes thousands of steps; \
                 {STEPS_VAR}=N raises the limit (default {DEFAULT_MAX_STEPS})"
            )));
        }
        Ok(())
    }

    /// Counts `out`, made by an op on `inputs`, unless it shares an
    /// input's storage (a view); errors when the live total is over the limit.
    pub(crate) fn record(&mut self, inputs: &[&Tensor], out: &Tensor) -> RtResult<()> {
        let buf = out.buffer();
        if inputs.iter().any(|t| Arc::ptr_eq(t.buffer(), buf)) {
            return Ok(());
        }
        let bytes = buffer_bytes(buf);
        if bytes == 0 {
            return Ok(());
        }
        self.made.push((Arc::downgrade(buf), bytes));
        self.fresh += bytes;
        if self.live + self.fresh > self.limits.max_memory
            || self.made.len() > 2 * self.swept_len + 4096
        {
            self.sweep();
            if self.live > self.limits.max_memory {
                return Err(RtError::new(
                    "mdl::run::memory_limit",
                    format!(
                        "the script holds {} of tensors, over the limit of {}, and was stopped",
                        mib(self.live),
                        mib(self.limits.max_memory)
                    ),
                )
                .help(format!(
                    "is a tensor or list growing without end? {MEMORY_VAR}=BYTES (e.g. 32G) raises the limit \
                     (default: half the machine's memory)"
                )));
            }
        }
        Ok(())
    }

    /// Drops dead entries and recounts the live bytes (each storage once).
    fn sweep(&mut self) {
        self.made.retain(|(w, _)| w.strong_count() > 0);
        self.made
            .sort_by_key(|(w, _)| w.as_ptr() as *const u8 as usize);
        self.made.dedup_by(|a, b| Weak::ptr_eq(&a.0, &b.0));
        self.live = self.made.iter().map(|(_, b)| b).sum();
        self.fresh = 0;
        self.swept_len = self.made.len();
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Bytes a buffer holds (device memory counted by its element count).
fn buffer_bytes(b: &Buffer) -> u64 {
    let (n, d) = (b.len() as u64, b.dtype());
    match b {
        Buffer::Bytes { len, .. } => *len as u64,
        _ => n * d.size() as u64 / d.block_size().max(1) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_budget_counts_live_tensors_once() {
        let mut b = Budget::new(ScriptLimits {
            max_steps: 10,
            max_memory: 1000,
        });
        let t = Tensor::from_f32(vec![0.0; 200], vec![200]).expect("t");
        b.record(&[], &t).expect("800 bytes fit");
        // A view of `t` shares its storage.
        let view = t.reshaped(vec![10, 20]).expect("view");
        b.record(&[&t], &view).expect("a view is free");
        drop(view);
        let u = Tensor::from_f32(vec![0.0; 200], vec![200]).expect("u");
        let err = b.record(&[], &u).expect_err("1600 live bytes");
        assert_eq!(err.code, "mdl::run::memory_limit");
        drop(t);
        let w = Tensor::from_f32(vec![0.0; 20], vec![20]).expect("w");
        b.record(&[], &w).expect("t was freed: 880 bytes live");
        for _ in 0..10 {
            b.step().expect("within the step limit");
        }
        assert_eq!(b.step().expect_err("11th").code, "mdl::run::step_limit");
    }
}
