//! mllm-interpreter runs checked .mdl programs. It owns runtime values, the
//! evaluator (slots resolved by the checker; no name lookups per op), module
//! construction with weight binding by member path, configs from
//! config.json, the KV cache, and the `Executor` seam through which every
//! native op passes (eager on a backend today, recorded for graph capture
//! later). It reads no checkpoint format itself: weights arrive through
//! `mllm_backends::weights::WeightSource`.

// Runtime errors carry spans, a call trace and help text; they are built on
// the cold path only, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

pub mod arith;
pub mod bind;
mod bind_experts;
pub mod builtins;
pub mod cache;
pub mod capture;
pub mod compile;
pub mod config;
pub mod construct;
pub mod error;
pub mod eval;
pub mod executor;
pub mod index;
pub mod limits;
pub mod model;
pub mod mrope;
pub mod numerics;
pub mod value;

pub use cache::KvCache;
pub use capture::Capture;
pub use compile::CompiledModel;
pub use error::{RtError, RtResult};
pub use eval::Interp;
pub use executor::{Eager, Executor, Trace};
pub use limits::ScriptLimits;
pub use model::{ForwardInputs, Model};
pub use value::Value;
