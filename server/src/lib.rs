//! mllm-server owns `mllm serve`: an OpenAI-compatible HTTP server (axum on
//! tokio) over mllm-runtime. Each `--model` gets a worker thread that owns
//! the model and `--parallel` slots (a KV cache each); requests are routed
//! by their `model` field, join and leave the running set at token
//! boundaries, and stream back as server-sent events; `/` is a chat page
//! (`webui`). The engine's threads
//! never run on the async executor, and a request's failure (even a panic)
//! stays that request's. What a caller on the network may do beyond that
//! (hosts, origins, local files, keys, TLS) is `security`'s and `tls`'s.

pub mod access_log;
pub mod api;
pub mod metrics;
pub mod security;
pub mod tls;
pub mod webui;
pub mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mllm_runtime::model_files::LoadOptions;

use worker::embed::EmbedHandle;
use worker::{ModelHandle, WorkerConfig, DRAINING};

/// One `--model`: `NAME=PATH`, or a path served under its file or
/// directory name.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub name: String,
    pub path: String,
    /// The vision tower of a GGUF `path` (`--mmproj`): llama.cpp's mmproj file.
    pub mmproj: Option<String>,
    /// Served for `/v1/embeddings` instead of generation (`--embedding`).
    pub embedding: bool,
    /// Served for `/v1/rerank` instead of generation (`--rerank`).
    pub rerank: bool,
}

impl ModelSpec {
    pub fn parse(arg: &str) -> ModelSpec {
        if let Some((name, path)) = arg.split_once('=') {
            if !name.is_empty() && !name.contains(['/', '\\']) {
                return ModelSpec {
                    name: name.to_string(),
                    path: path.to_string(),
                    mmproj: None,
                    embedding: false,
                    rerank: false,
                };
            }
        }
        let p = std::path::Path::new(arg.trim_end_matches('/'));
        let file = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = match file {
            Some(n) if p.is_file() => n
                .strip_suffix(".gguf")
                .or_else(|| n.strip_suffix(".mllm"))
                .unwrap_or(&n)
                .to_string(),
            Some(n) => n,
            None => arg.to_string(),
        };
        ModelSpec {
            name,
            path: arg.to_string(),
            mmproj: None,
            embedding: false,
            rerank: false,
        }
    }

    /// Gives each `--mmproj [NAME=]FILE` to its model: NAME picks one by
    /// name; a bare FILE needs exactly one model.
    pub fn attach_mmproj(specs: &mut [ModelSpec], args: &[String]) -> Result<(), String> {
        for arg in args {
            let (name, file) = match arg.split_once('=') {
                Some((n, f)) if !n.is_empty() && !n.contains(['/', '\\']) => (Some(n), f),
                _ => (None, arg.as_str()),
            };
            let spec = match name {
                Some(n) => specs.iter_mut().find(|s| s.name == n).ok_or_else(|| {
                    format!("--mmproj {arg}: no model is named `{n}` (name models with --model NAME=PATH)")
                })?,
                None if specs.len() == 1 => &mut specs[0],
                None => {
                    return Err(format!(
                        "--mmproj {arg}: {} models are served; say which with --mmproj NAME=FILE",
                        specs.len()
                    ))
                }
            };
            if spec.mmproj.is_some() {
                return Err(format!("--mmproj: model `{}` has two", spec.name));
            }
            spec.mmproj = Some(file.to_string());
        }
        Ok(())
    }

    /// Marks the models `--embedding` (or, with `rerank`, `--rerank`)
    /// names: `*` (the flag without a value) every model, NAME one of them.
    pub fn attach_role(
        specs: &mut [ModelSpec],
        args: &[String],
        rerank: bool,
    ) -> Result<(), String> {
        let flag = if rerank { "--rerank" } else { "--embedding" };
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        for arg in args {
            let mut any = false;
            for s in specs.iter_mut().filter(|s| arg == "*" || s.name == *arg) {
                any = true;
                if rerank {
                    s.rerank = true
                } else {
                    s.embedding = true
                }
                if s.rerank && s.embedding {
                    return Err(format!(
                        "model `{}` has both --embedding and --rerank; a model is served for one",
                        s.name
                    ));
                }
            }
            if !any {
                return Err(format!(
                    "{flag} {arg}: no model is named `{arg}` (models: {})",
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub models: Vec<ModelSpec>,
    /// A script that overrides the one picked by each model's architecture.
    pub script: Option<String>,
    pub host: String,
    pub port: u16,
    /// Slots per model: requests that run at once.
    pub parallel: usize,
    /// Tokens per slot (default: the model's context, at most 4096 unless
    /// asked).
    pub ctx_size: Option<usize>,
    /// Requests that may wait for a slot, per model, beyond which a 503.
    pub queue: usize,
    /// `--api-key` and `--api-key-file`: requests must carry one.
    pub api_keys: security::ApiKeys,
    /// `--allowed-local-media-path`: directories whose files requests may
    /// name as images (none by default).
    pub allowed_local_media: Vec<PathBuf>,
    /// `--allowed-host`: names besides addresses and localhost.
    pub allowed_hosts: Vec<String>,
    /// `--cors-origin`: web origins that may call the server.
    pub cors_origins: Vec<String>,
    /// `--ssl-cert-file` and `--ssl-key-file`.
    pub tls: Option<tls::TlsFiles>,
    pub load: LoadOptions,
    /// Seconds running streams get to finish after SIGINT/SIGTERM.
    pub shutdown_grace: u64,
    /// The request log's lines: text or JSON.
    pub log_format: access_log::LogFormat,
    /// `--reasoning-format`: `deepseek` splits `<think>` blocks into
    /// `reasoning_content`, `none` leaves them in `content`.
    pub split_reasoning: bool,
    /// Serves the chat page at `/` (`--no-webui` turns it off).
    pub webui: bool,
    /// `--spec-type` (with `--draft-max` and the rest): every generation
    /// model's slots decode speculatively.
    pub spec: Option<mllm_runtime::speculative::SpecSettings>,
    /// `--cache-ram`: MiB of prompt prefixes each generation model keeps
    /// after their slot moves on (0: none).
    pub cache_ram_mib: usize,
}

/// Loads every model, then serves until SIGINT/SIGTERM. `on_listen`
/// receives the URL served, `http://ADDR` or `https://ADDR` (port 0 picks
/// a free one).
pub fn run(cfg: ServerConfig, on_listen: impl FnOnce(&str)) -> Result<(), String> {
    if cfg.models.is_empty() {
        return Err("mllm serve needs at least one --model".into());
    }
    // The network flags are checked before minutes of model loading.
    let policies = security::Policies {
        hosts: security::HostPolicy::new(&cfg.host, &cfg.allowed_hosts)?,
        cors: security::CorsPolicy::new(&cfg.cors_origins, cfg.api_keys.required())?,
        tls: cfg.tls.is_some(),
    };
    let media = security::LocalMedia::new(&cfg.allowed_local_media)?;
    let tls_config = cfg.tls.as_ref().map(tls::server_config).transpose()?;
    let mut handles = Vec::new();
    let mut embedders = Vec::new();
    for spec in &cfg.models {
        if handles.iter().any(|h: &ModelHandle| h.name == spec.name)
            || embedders.iter().any(|h: &EmbedHandle| h.name == spec.name)
        {
            return Err(format!(
                "two models are named `{}`; name them apart with --model NAME=PATH",
                spec.name
            ));
        }
        let t0 = std::time::Instant::now();
        if spec.embedding || spec.rerank {
            if embedders.iter().any(|h: &EmbedHandle| h.name == spec.name) {
                return Err(format!(
                    "two models are named `{}`; name them apart with --model NAME=PATH",
                    spec.name
                ));
            }
            let what = if spec.rerank {
                "reranking"
            } else {
                "embeddings"
            };
            let h = EmbedHandle::spawn(
                spec.name.clone(),
                spec.path.clone(),
                cfg.script.clone(),
                spec.rerank,
            )
            .map_err(|e| format!("cannot serve {} for {what}: {e}", spec.path))?;
            eprintln!(
                "loaded `{}` from {} for {what} in {:.2}s ({} values, up to {} tokens an input, {} pooling)",
                h.name,
                spec.path,
                t0.elapsed().as_secs_f64(),
                h.info.dimension,
                h.info.max_tokens,
                h.info.pooling
            );
            embedders.push(h);
            continue;
        }
        let h = ModelHandle::spawn(
            spec.name.clone(),
            WorkerConfig {
                path: spec.path.clone(),
                mmproj: spec.mmproj.clone(),
                script: cfg.script.clone(),
                slots: cfg.parallel.max(1),
                ctx_size: cfg.ctx_size,
                queue: cfg.queue,
                load: cfg.load,
                spec: cfg.spec.clone(),
                cache_ram: cfg.cache_ram_mib.saturating_mul(1 << 20),
            },
        )
        .map_err(|e| format!("cannot serve {}: {e}", spec.path))?;
        let slots = h.metrics.slots;
        let kv = h.info.kv_bytes.map_or(String::new(), |b| {
            format!(
                ", KV cache up to {:.0} MiB",
                (b * slots) as f64 / (1u64 << 20) as f64
            )
        });
        eprintln!(
            "loaded `{}` from {} in {:.2}s ({slots} slot{} of {} tokens{kv}; -c and -np change them)",
            h.name,
            spec.path,
            t0.elapsed().as_secs_f64(),
            if slots == 1 { "" } else { "s" },
            h.info.context
        );
        if let Some(s) = &cfg.spec {
            eprintln!("`{}` decodes speculatively: {}", h.name, s.describe());
        }
        handles.push(h);
    }
    let state = Arc::new(api::AppState {
        models: handles,
        embedders,
        api_keys: cfg.api_keys.clone(),
        policies,
        media: Arc::new(media),
        http_requests: AtomicU64::new(0),
        log_format: cfg.log_format,
        split_reasoning: cfg.split_reasoning,
        webui: cfg.webui,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        let addr = format!("{}:{}", cfg.host, cfg.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        let app = api::router(state);
        let grace = Duration::from_secs(cfg.shutdown_grace);
        match tls_config {
            Some(tc) => {
                let listener = tls::TlsListener::spawn(listener, tc)
                    .map_err(|e| format!("cannot start TLS on {addr}: {e}"))?;
                on_listen(&format!("https://{local}"));
                serve(listener, app, grace).await
            }
            None => {
                on_listen(&format!("http://{local}"));
                serve(listener, app, grace).await
            }
        }
    })
}

/// Serves until a signal, then gives running answers `grace` to finish.
async fn serve<L>(listener: L, app: axum::Router, grace: Duration) -> Result<(), String>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        DRAINING.store(true, Ordering::SeqCst);
        let _ = stop_tx.send(true);
        eprintln!("stopping: finishing the answers in progress (new requests get 503)");
    });
    let deadline = async move {
        let mut rx = stop_rx;
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        r = serve => r.map_err(|e| format!("the server failed: {e}")),
        _ = deadline => {
            eprintln!("stopping: answers still running after {}s were cut off", grace.as_secs());
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
