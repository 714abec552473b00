//! What can go wrong between a name and files on disk, each said with what
//! to do about it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{reference}` is not a Hugging Face model reference: {why}. Write [hf://]ORG/NAME[@REVISION][:FILE_OR_QUANT], e.g. `hf://Qwen/Qwen3-0.6B` or `hf://ggml-org/Qwen3-0.6B-GGUF:Q4_K_M`")]
    BadReference { reference: String, why: String },

    #[error("{endpoint}/{repo} was not found, or it is private or gated and {}", if *.had_token { "the token in HF_TOKEN (or the saved login) may not read it: check the name, and that the token's account has access" } else { "needs a token: check the name, or set HF_TOKEN to a token that may read it (https://huggingface.co/settings/tokens)" })]
    RepoNotFound {
        repo: String,
        endpoint: String,
        had_token: bool,
    },

    #[error("{endpoint}/{repo} is gated: accept its conditions on the model's page with the account whose token HF_TOKEN holds, then run again")]
    Gated { repo: String, endpoint: String },

    #[error("{repo} has no revision `{revision}` (a branch, tag or commit); leave out @{revision} for the main branch")]
    RevisionNotFound { repo: String, revision: String },

    #[error("{repo} has no file {file} at revision {revision} (the Hub answered {status})")]
    FileNotFound {
        repo: String,
        file: String,
        revision: String,
        status: u16,
    },

    #[error("{repo} has no file or quantization `{selector}`{}; its files: {}", if tags.is_empty() { String::new() } else { format!("; its GGUF types: {} (pick one with hf://{repo}:TYPE)", tags.join(", ")) }, files.join(", "))]
    NoSuchFile {
        repo: String,
        selector: String,
        tags: Vec<String>,
        files: Vec<String>,
    },

    #[error("`{selector}` matches several files of {repo}: {}; name one with hf://{repo}:FILE", candidates.join(", "))]
    Ambiguous {
        repo: String,
        selector: String,
        candidates: Vec<String>,
    },

    #[error("{repo}'s {file} is one of {parts} parts of a split GGUF, and mllm reads a GGUF as one file: download the parts (`mllm pull {repo}:PART` each) and merge them with `llama-gguf-split --merge FIRST_PART OUT.gguf`, or pick another type")]
    SplitGguf {
        repo: String,
        file: String,
        parts: usize,
    },

    #[error("{repo} holds nothing mllm runs: no config.json with safetensors, no GGUF, no single .mllm file; its files: {}", files.join(", "))]
    NothingToRun { repo: String, files: Vec<String> },

    #[error("{repo}'s {index} names the shard {shard}, which the repository does not have")]
    MissingShard {
        repo: String,
        index: String,
        shard: String,
    },

    #[error("HF_HUB_OFFLINE is set and {repo} (revision {revision}) is not in the cache {cache}: unset HF_HUB_OFFLINE to download it, or run `mllm pull {repo}` where the Hub is reachable")]
    NotCached {
        repo: String,
        revision: String,
        cache: PathBuf,
    },

    #[error("HF_HUB_OFFLINE is set and {file} of {repo} is not in the cached snapshot {snapshot}: unset HF_HUB_OFFLINE to download it")]
    FileNotCached {
        repo: String,
        file: String,
        snapshot: PathBuf,
    },

    #[error("cannot reach the Hub at {endpoint} ({detail}), and {repo} is not in the cache {cache}: check the network, or HF_ENDPOINT for a mirror")]
    Unreachable {
        repo: String,
        endpoint: String,
        detail: String,
        cache: PathBuf,
    },

    #[error("{file} of {repo} arrived damaged ({detail}); it was removed, so running again downloads it again")]
    Damaged {
        repo: String,
        file: String,
        detail: String,
    },

    #[error("downloading {file} of {repo}: {detail}")]
    Download {
        repo: String,
        file: String,
        detail: String,
    },

    #[error("the Hugging Face cache at {}: {source}", path.display())]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}
