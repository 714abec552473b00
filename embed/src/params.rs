//! What callers pass in and get back: load and generation settings,
//! conversation turns, prompts, and the outcome of an answer.

use mllm_runtime::generation::{
    clock_seed, ConstraintSpec, GenerationConfig, SamplerConfig, DEFAULT_MAX_TOKENS,
};
use mllm_runtime::model_files::ModelFiles;

/// How a model loads.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadConfig {
    /// Compute threads. Rayon has one global pool per process: the first
    /// load that names a count sizes it and later counts are ignored.
    /// `None`: one per core (or `RAYON_NUM_THREADS`).
    pub threads: Option<usize>,
    /// The context length in tokens (KV cache rows, captured graphs);
    /// `None`: the model's own (`max_position_embeddings`).
    pub context: Option<usize>,
}

/// Sampling and stopping for one answer; the defaults are `mllm run`'s.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub max_tokens: usize,
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// `None`: from the clock.
    pub seed: Option<u64>,
    /// Generation stops when one of these appears; it is not returned.
    pub stop: Vec<String>,
    /// Qwen3-style thinking switch passed to the chat template.
    pub enable_thinking: Option<bool>,
    /// What the answer must follow: a JSON schema, a grammar, a regex.
    pub constraint: Option<ConstraintSpec>,
}

impl Default for Params {
    fn default() -> Params {
        let s = SamplerConfig::DEFAULT;
        Params {
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            repeat_penalty: s.repeat_penalty,
            repeat_last_n: s.repeat_last_n,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            seed: None,
            stop: vec![],
            enable_thinking: None,
            constraint: None,
        }
    }
}

impl Params {
    /// What an answer from `files`' model is asked.
    pub(crate) fn generation_config(&self, files: &ModelFiles) -> GenerationConfig {
        let seed = self.seed.unwrap_or_else(clock_seed);
        let sampler = SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
        };
        files.generation_config(sampler, self.max_tokens, self.stop.clone())
    }
}

/// One message of a conversation, with the image files shown in it
/// (they come before its text).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    pub role: String,
    pub content: String,
    pub images: Vec<String>,
}

impl Turn {
    pub fn new(role: &str, content: &str) -> Turn {
        Turn {
            role: role.to_string(),
            content: content.to_string(),
            images: vec![],
        }
    }
}

/// What the model is asked.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// What `mllm run` sends: one user message (after an optional system
    /// message, with images) through the chat template; the plain text
    /// when `raw` or when the model has no chat template.
    Prompt {
        system: Option<&'a str>,
        prompt: &'a str,
        images: &'a [String],
        raw: bool,
    },
    /// A whole conversation through the chat template (a generation prompt
    /// is added after its last message).
    Conversation(&'a [Turn]),
}

/// Why an answer ended (`mllm_stop_reason` in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-sequence token.
    Eos = 0,
    /// A stop string appeared.
    StopString = 1,
    /// `max_tokens` were generated.
    MaxTokens = 2,
    /// Cancelled (`mllm_cancel`), or the text callback asked to stop.
    Cancelled = 3,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::StopString => "stop",
            StopReason::MaxTokens => "length",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// An answer and its numbers.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The whole text (what the callback saw, joined).
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens actually computed (the rest were in the cache).
    pub prompt_computed: usize,
    pub generated_tokens: usize,
    pub stop_reason: StopReason,
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
}
