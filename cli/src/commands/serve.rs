//! `mllm serve --model PATH [--model NAME=PATH]...`: the OpenAI-compatible
//! server (mllm-server); this only reports where it listens.

use crate::{CliError, CliResult};

pub fn run(cfg: mllm_server::ServerConfig) -> CliResult<()> {
    mllm_server::run(cfg, |url| {
        eprintln!("mllm serve: listening on {url} (Ctrl-C stops)");
    })
    .map_err(|e| CliError::invalid(e.to_string()))
}
