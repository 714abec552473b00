//! Counters per model, read by `GET /metrics` in Prometheus' text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub struct ModelMetrics {
    pub slots: usize,
    /// Slots running a request now.
    pub busy: AtomicUsize,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens computed (the rest came from a slot's cache).
    pub prompt_computed: AtomicU64,
    /// Prompt tokens copied from another slot's cache (a shared prefix).
    pub prompt_shared: AtomicU64,
    /// Of those, tokens copied from the prefix cache (`--cache-ram`), and
    /// what that cache holds now.
    pub prompt_from_cache: AtomicU64,
    pub prefix_cache_bytes: AtomicUsize,
    pub prefix_cache_entries: AtomicUsize,
    pub prefix_cache_pages: AtomicUsize,
    pub generated: AtomicU64,
    /// Seconds spent on prompts and on decoding, in microseconds.
    prompt_us: AtomicU64,
    decode_us: AtomicU64,
    /// Speculative decoding: verification steps, tokens proposed, and
    /// how many of them the model kept.
    pub spec_steps: AtomicU64,
    pub spec_proposed: AtomicU64,
    pub spec_accepted: AtomicU64,
    /// Forward passes of a draft model while proposing.
    pub spec_draft_steps: AtomicU64,
}

impl ModelMetrics {
    pub fn new(slots: usize) -> ModelMetrics {
        ModelMetrics {
            slots: slots.max(1),
            busy: AtomicUsize::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            prompt_computed: AtomicU64::new(0),
            prompt_shared: AtomicU64::new(0),
            prompt_from_cache: AtomicU64::new(0),
            prefix_cache_bytes: AtomicUsize::new(0),
            prefix_cache_entries: AtomicUsize::new(0),
            prefix_cache_pages: AtomicUsize::new(0),
            generated: AtomicU64::new(0),
            prompt_us: AtomicU64::new(0),
            decode_us: AtomicU64::new(0),
            spec_steps: AtomicU64::new(0),
            spec_proposed: AtomicU64::new(0),
            spec_accepted: AtomicU64::new(0),
            spec_draft_steps: AtomicU64::new(0),
        }
    }

    pub fn add_prompt(&self, tokens: usize, computed: usize, secs: f64) {
        self.prompt_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        self.prompt_computed
            .fetch_add(computed as u64, Ordering::Relaxed);
        self.prompt_us
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// One slot's verification step: `proposed` tokens, `accepted` kept.
    pub fn add_speculation(&self, proposed: usize, accepted: usize) {
        self.spec_steps.fetch_add(1, Ordering::Relaxed);
        self.spec_proposed
            .fetch_add(proposed as u64, Ordering::Relaxed);
        self.spec_accepted
            .fetch_add(accepted as u64, Ordering::Relaxed);
    }

    pub fn add_decode(&self, secs: f64) {
        self.decode_us
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }
}

/// One model's figures for the exposition.
pub struct Sample<'a> {
    pub model: &'a str,
    pub metrics: &'a ModelMetrics,
    pub queued: usize,
}

/// The Prometheus text exposition of every model's counters.
pub fn render(models: &[Sample], http_requests: u64) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&Sample) -> String| {
        let _ = writeln!(out, "# HELP mllm_{name} {help}");
        let _ = writeln!(out, "# TYPE mllm_{name} {kind}");
        for m in models {
            let _ = writeln!(
                out,
                "mllm_{name}{{model=\"{}\"}} {}",
                escape(m.model),
                value(m)
            );
        }
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    family(
        "requests_total",
        "counter",
        "Requests answered to the end (generation, embeddings, reranking).",
        &|m| load(&m.metrics.finished).to_string(),
    );
    family(
        "requests_failed_total",
        "counter",
        "Requests that ended in an error.",
        &|m| load(&m.metrics.failed).to_string(),
    );
    family(
        "requests_cancelled_total",
        "counter",
        "Requests whose client left.",
        &|m| load(&m.metrics.cancelled).to_string(),
    );
    family(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens received.",
        &|m| load(&m.metrics.prompt_tokens).to_string(),
    );
    family(
        "prompt_tokens_computed_total",
        "counter",
        "Prompt tokens computed (not reused from a slot's cache).",
        &|m| load(&m.metrics.prompt_computed).to_string(),
    );
    family(
        "prompt_tokens_shared_total",
        "counter",
        "Prompt tokens copied from another slot's cache or the prefix cache (the computed prefix the two prompts share).",
        &|m| load(&m.metrics.prompt_shared).to_string(),
    );
    family(
        "prompt_tokens_from_prefix_cache_total",
        "counter",
        "Of the shared prompt tokens, those copied from the prefix cache (--cache-ram): prefixes kept after their slot moved on.",
        &|m| load(&m.metrics.prompt_from_cache).to_string(),
    );
    family(
        "prefix_cache_bytes",
        "gauge",
        "Bytes of KV cache the prefix cache holds (at most --cache-ram).",
        &|m| {
            m.metrics
                .prefix_cache_bytes
                .load(Ordering::Relaxed)
                .to_string()
        },
    );
    family(
        "prefix_cache_entries",
        "gauge",
        "Distinct prompt prefixes the prefix cache holds (its tree's leaves).",
        &|m| {
            m.metrics
                .prefix_cache_entries
                .load(Ordering::Relaxed)
                .to_string()
        },
    );
    family(
        "prefix_cache_pages",
        "gauge",
        "Pages of 16 positions the prefix cache holds (prefixes that begin alike share theirs).",
        &|m| {
            m.metrics
                .prefix_cache_pages
                .load(Ordering::Relaxed)
                .to_string()
        },
    );
    family(
        "generated_tokens_total",
        "counter",
        "Tokens generated.",
        &|m| load(&m.metrics.generated).to_string(),
    );
    family(
        "speculative_steps_total",
        "counter",
        "Verification steps of speculative decoding (--spec-type), one per slot and step.",
        &|m| load(&m.metrics.spec_steps).to_string(),
    );
    family(
        "speculative_proposed_tokens_total",
        "counter",
        "Tokens proposed by speculative decoding.",
        &|m| load(&m.metrics.spec_proposed).to_string(),
    );
    family(
        "speculative_accepted_tokens_total",
        "counter",
        "Proposed tokens the model kept (each saved a decode step).",
        &|m| load(&m.metrics.spec_accepted).to_string(),
    );
    family(
        "speculative_draft_steps_total",
        "counter",
        "Forward passes of the draft model (--model-draft) while proposing, of any number of rows each.",
        &|m| load(&m.metrics.spec_draft_steps).to_string(),
    );
    family(
        "queue_depth",
        "gauge",
        "Requests waiting for a slot.",
        &|m| m.queued.to_string(),
    );
    family("slots_busy", "gauge", "Slots running a request.", &|m| {
        m.metrics.busy.load(Ordering::Relaxed).to_string()
    });
    family("slots_total", "gauge", "Slots (--parallel).", &|m| {
        m.metrics.slots.to_string()
    });
    family(
        "prefill_tokens_per_second",
        "gauge",
        "Prompt tokens computed per second of prompt time, over the server's life.",
        &|m| rate(load(&m.metrics.prompt_computed), load(&m.metrics.prompt_us)),
    );
    family("decode_tokens_per_second", "gauge", "Tokens generated per second of one request's decode time, averaged over the server's life.", &|m| {
        rate(load(&m.metrics.generated), load(&m.metrics.decode_us))
    });
    let _ = writeln!(
        out,
        "# HELP mllm_http_requests_total HTTP requests received."
    );
    let _ = writeln!(out, "# TYPE mllm_http_requests_total counter");
    let _ = writeln!(out, "mllm_http_requests_total {http_requests}");
    out
}

fn rate(count: u64, micros: u64) -> String {
    if micros == 0 {
        return "0".into();
    }
    format!("{:.3}", count as f64 / (micros as f64 / 1e6))
}

/// Label values escape backslash, quote and newline.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
