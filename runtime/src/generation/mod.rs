//! The one generation core: what turns a model's logits into an answer.
//! `run`, `chat`, every server slot, the C ABI and the Python package (and
//! the NPU host loop) all drive `Generation`, so sampling, EOS, stop
//! strings with hold-back, token limits, cancellation, log-probabilities
//! and penalties behave the same everywhere.
//!
//! Where the next capabilities plug in:
//! - constrained decoding (JSON schemas, grammars, tool calls) is a
//!   `LogitsProcessor` added with `Generation::add_processor`;
//! - speculative decoding computes the logits of several proposed tokens in
//!   one step and hands them to `Generation::verify`, which keeps exactly
//!   the tokens `next` would have chosen one at a time.
//!
//! The defaults live once, here: `SamplerConfig::DEFAULT` and
//! `DEFAULT_MAX_TOKENS`.

pub mod constrain;
mod core;
mod for_model;
mod mask_ahead;
pub mod processors;
pub mod reasoning;
pub mod sampler;
pub mod stop;
#[cfg(test)]
mod tests;

pub use self::core::{
    Detokenize, Generation, GenerationConfig, GenerationError, Step, StopReason, TokenLogprob,
};
pub use constrain::{Constraint, ConstraintError, ConstraintSpec, Grammars};
pub use processors::{LogitsProcessor, ProcessorError};
pub use sampler::{argmax, clock_seed, Sampler, SamplerConfig};
pub use stop::StopFilter;

/// Most tokens an answer may have when the caller says nothing (`mllm
/// run`'s `-n`, the C ABI's and the Python package's `max_tokens`).
pub const DEFAULT_MAX_TOKENS: usize = 512;
