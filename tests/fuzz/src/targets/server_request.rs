//! `mllm serve`'s request parsing: the input is an HTTP request body, fed to
//! the parser of every endpoint (chat and text completions, tokenize,
//! detokenize, apply-template). Each request that parses is checked as the
//! handlers do (sampling parameters, the messages with their data URIs
//! decoded from base64 but not as images, which the `image` target covers,
//! `enable_thinking`, the completion prompt); each error is rendered as the
//! body a client gets, and must be a 400. The same bytes, as text, are a
//! `--model` argument (`ModelSpec::parse`) whose name then labels a
//! Prometheus exposition (`/metrics`), which must keep one sample per line.

use mllm_server::api::error::ApiError;
use mllm_server::api::request::{
    parse_body, parse_chat, parse_completion, ChatRequest, DetokenizeRequest, GenParams,
    TemplateRequest, TokenizeRequest, MAX_TOP_LOGPROBS,
};
use mllm_server::metrics::{render, ModelMetrics, Sample};
use mllm_server::ModelSpec;

/// A client's mistake: a 400 whose body serializes.
fn refused(e: &ApiError) {
    assert_eq!(e.status.as_u16(), 400, "not a 400: {e:?}");
    let body = e.body();
    assert!(serde_json::to_string(&body).is_ok());
}

fn check<T>(r: Result<T, ApiError>) -> Option<T> {
    r.map_err(|e| refused(&e)).ok()
}

/// What the limits promise of accepted parameters.
fn params(p: Result<GenParams, ApiError>) {
    if let Some(p) = check(p) {
        assert!(p.stops.len() <= 16);
        assert!(p.logprobs.is_none_or(|k| k as u64 <= MAX_TOP_LOGPROBS));
        assert_ne!(p.max_tokens, Some(0));
    }
}

/// A chat's parameters, messages and template switches.
fn chat(r: &ChatRequest) {
    params(r.params());
    if let Some(m) = check(r.messages()) {
        assert_eq!(m.len(), r.messages.len());
    }
    check(r.enable_thinking());
}

/// One fuzz input.
pub fn run(data: &[u8]) {
    if let Some(r) = check(parse_chat(data)) {
        assert!(!r.messages.is_empty());
        chat(&r);
        let _ = r.common.include_usage();
    }
    if let Some(r) = check(parse_completion(data)) {
        params(r.params());
        check(r.prompt());
        let _ = r.common.include_usage();
    }
    check(parse_body::<TokenizeRequest>(data));
    check(parse_body::<DetokenizeRequest>(data));
    if let Some(r) = check(parse_body::<TemplateRequest>(data)) {
        chat(&r.as_chat());
    }

    let spec = ModelSpec::parse(&String::from_utf8_lossy(data));
    let metrics = ModelMetrics::new(data.len() % 8);
    metrics.add_prompt(data.len(), data.len() / 2, data.len() as f64 * 1e-3);
    metrics.add_decode(data.first().map_or(0.0, |&b| f64::from(b) * 1e-4));
    let samples = [
        Sample {
            model: &spec.name,
            metrics: &metrics,
            queued: data.len(),
        },
        Sample {
            model: &spec.path,
            metrics: &metrics,
            queued: 0,
        },
    ];
    let text = render(&samples, data.len() as u64);
    // 20 families of a HELP, a TYPE and one line per model, then the HTTP
    // request counter's three lines: a label value that broke a line would
    // corrupt the exposition.
    let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count() - 1;
    assert_eq!(families, 20, "{text}");
    assert_eq!(text.lines().count(), families * (2 + samples.len()) + 3);
}
