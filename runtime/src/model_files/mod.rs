//! Opens what `--model` names: a Hugging Face directory (config.json,
//! safetensors, tokenizer.json, tokenizer_config.json,
//! generation_config.json) or a GGUF file (config, weights, vocabulary and
//! chat template all inside), into one shape the commands use. `formats`
//! reads each kind of path; `options` holds the load flags.

use std::path::{Path, PathBuf};

use mllm_backends::weights::WeightSource;
use mllm_converter::chat_template::ChatTemplate;
use mllm_converter::tokenizer::Tokenizer;
use serde_json::Value as Json;

use crate::generation::{ConstraintError, Grammars};
use crate::weight_check::WeightCheck;
use crate::{Error, Result};

pub struct ModelFiles {
    pub path: PathBuf,
    pub config: Json,
    /// Where the config came from, for messages.
    pub config_origin: String,
    pub weights: Box<dyn WeightSource>,
    /// Shared so that a server's requests can stream-decode past a borrow.
    pub tokenizer: Option<std::sync::Arc<Tokenizer>>,
    pub chat_template: Option<ChatTemplate>,
    /// Token ids that end generation.
    pub eos: Vec<u32>,
    /// `preprocessor_config.json` of a vision model, when there is one.
    pub preprocessor_config: Option<Json>,
    /// `video_preprocessor_config.json` (Hugging Face directories only; a
    /// video falls back to `preprocessor_config`, as transformers does).
    pub video_preprocessor_config: Option<Json>,
    /// The backend the model's weights go to (`--backend`, `--device`).
    pub backend: mllm_backends::SharedBackend,
    /// A `.mllm` file's checksums, checked while the weights are prepared
    /// (`weights_verified`).
    pub check: WeightCheck,
    /// The vocabulary's trie for constrained decoding, built at the first
    /// constrained answer.
    pub(crate) grammars:
        std::sync::OnceLock<std::result::Result<std::sync::Arc<Grammars>, ConstraintError>>,
}

mod formats;
mod options;

pub use options::{backend_by_name, Backend, Fallback, KvType, LoadOptions, DEFAULT_CONTEXT};

use formats::{open_gguf, open_hf, open_mllm, open_tokenizer_dir};

pub fn open(path: &str) -> Result<ModelFiles> {
    open_with(path, LoadOptions::default())
}

/// `open` for commands that read only the tokenizer, template or config
/// (`tokenize`, `template`): a `.mllm` file's weights are not checksummed,
/// which would read the whole file.
pub fn open_without_weights(path: &str) -> Result<ModelFiles> {
    open_with(
        path,
        LoadOptions {
            no_verify: true,
            ..LoadOptions::default()
        },
    )
}

pub fn open_with(path: &str, opts: LoadOptions) -> Result<ModelFiles> {
    open_with_mmproj(path, None, opts)
}

/// `open_with` for a GGUF text model and, with `mmproj`, the vision tower
/// llama.cpp writes beside it (`--mmproj FILE`, llama.cpp's flag): the two
/// load as one vision-language model (`mllm_converter::gguf::VisionLanguage`).
pub fn open_with_mmproj(path: &str, mmproj: Option<&str>, opts: LoadOptions) -> Result<ModelFiles> {
    if opts.backend.npu().is_some() {
        // An NPU runs exported graphs (`crate::npu`), not a model's ops.
        return Err(Error::load(format!("--backend {} runs exported graphs, with `mllm run --model EXPORT_DIR` only (docs/npu_runtime.md)",
            opts.backend.name()
        )));
    }
    let mut files = open_files(path, mmproj, opts)?;
    if opts.backend != Backend::Cpu || opts.device != 0 {
        let backend = backend_by_name(opts.backend.name(), opts.device)?;
        files.backend = opts.fallback.apply(backend);
    }
    Ok(files)
}

fn open_files(path: &str, mmproj: Option<&str>, opts: LoadOptions) -> Result<ModelFiles> {
    let p = Path::new(path);
    let mllm = p.is_file() && mllm_converter::mllm_format::is_mllm_file(p);
    let gguf = !mllm
        && p.is_file()
        && p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if mmproj.is_some() && !gguf {
        return Err(Error::load(format!("--mmproj goes with a GGUF text model (--model TEXT.gguf); {path} is not one (a Hugging Face directory or .mllm file holds its vision tower itself)"
        )));
    }
    if mllm {
        return open_mllm(p, opts);
    }
    if gguf {
        return open_gguf(p, mmproj, opts);
    }
    if p.is_dir() && !p.join("config.json").is_file() && p.join("tokenizer.json").is_file() {
        return open_tokenizer_dir(p);
    }
    if p.is_dir() {
        check_model_dir(p)?;
        return open_hf(p, opts.skip_tokenizer);
    }
    if p.is_file() {
        return Err(Error::load(format!("{path} is neither a .mllm or .gguf file nor a model directory; --model takes a .mllm file, a GGUF file or a Hugging Face directory (config.json + *.safetensors)"
        )));
    }
    Err(Error::not_found(format!(
        "{path} does not exist{}",
        hub_hint(path)
    )))
}

/// A directory without config.json or weights: name everything missing at
/// once, rather than the first file a reader fails on.
fn check_model_dir(dir: &Path) -> Result<()> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let has = |f: &dyn Fn(&str) -> bool| names.iter().any(|n| f(n));
    let mut missing = vec![];
    if !has(&|n| n == "config.json") {
        missing.push("config.json");
    }
    if !has(&|n| {
        n.ends_with(".safetensors")
            || n.ends_with(".safetensors.index.json")
            || (n.starts_with("pytorch_model") && n.ends_with(".bin"))
    }) {
        missing.push("weights (*.safetensors or pytorch_model*.bin)");
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !has(&|n| n == "tokenizer.json") {
        missing.push("tokenizer.json");
    }
    Err(Error::tokenizer(format!("{} is not a complete model directory: it has no {}. A Hugging Face model directory holds config.json, the weights and tokenizer.json (`--model hf://ORG/NAME` downloads one from the Hub); --model also takes a GGUF or .mllm file",
        dir.display(),
        missing.join(", no ")
    )))
}

/// For a path that does not exist but reads like a Hugging Face model name
/// (`Qwen/Qwen3-0.6B`, `Qwen3-VL-2B-Instruct`): how to get it.
fn hub_hint(path: &str) -> String {
    let name_like = !path.starts_with(['.', '/', '~'])
        && path.matches('/').count() <= 1
        && !path.ends_with('/')
        && Path::new(path).extension().is_none_or(|e| {
            // `Qwen3-0.6B` has an "extension" `6B`; real files have known ones.
            !["gguf", "mllm", "safetensors", "bin", "pt", "json"]
                .contains(&e.to_string_lossy().to_ascii_lowercase().as_str())
        })
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if !name_like {
        return String::new();
    }
    let repo = if path.contains('/') {
        path.to_string()
    } else {
        format!("ORG/{path}")
    };
    format!(
        ". If it is a Hugging Face model name, `--model hf://{repo}` downloads it into the Hugging Face cache (a GGUF repository: `hf://{repo}:Q4_K_M` picks that type), as `mllm pull {repo}` does"
    )
}

impl ModelFiles {
    /// Waits for the checksum check of a `.mllm` file (started when it was
    /// opened): an error names the damaged tensors and what to do.
    pub fn weights_verified(&self) -> Result<()> {
        self.check.wait_for(&self.path)
    }

    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_deref().ok_or_else(|| {
            Error::tokenizer(format!("{} has no tokenizer (tokenizer.json, or a vocabulary in the GGUF); pass token ids to `mllm exec` instead", self.path.display()))
        })
    }

    /// The model's context length, from its config (a vision-language
    /// model's is its `text_config`'s).
    pub fn max_context(&self) -> Option<usize> {
        self.text_key("max_position_embeddings")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
    }

    /// A key of the language model's config: top level, else `text_config`.
    fn text_key(&self, key: &str) -> Option<&serde_json::Value> {
        self.config
            .get(key)
            .or_else(|| self.config.get("text_config").and_then(|t| t.get(key)))
    }

    /// The bytes one sequence's KV cache takes at `context` tokens when its
    /// elements take `elem_bytes` bytes (every layer counted as attention,
    /// so a bound for hybrid models); `None` when the config does not say.
    pub fn kv_bytes_at(&self, context: usize, elem_bytes: f64) -> Option<usize> {
        let n = |k: &str| {
            self.text_key(k)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
        };
        let layers = n("num_hidden_layers")?;
        let heads = n("num_attention_heads")?;
        let kv_heads = n("num_key_value_heads").unwrap_or(heads);
        let head_dim = n("head_dim").or_else(|| Some(n("hidden_size")? / heads.max(1)))?;
        let elems = 2 * layers * kv_heads * head_dim * context;
        Some((elems as f64 * elem_bytes) as usize)
    }
}

/// The tensors (checkpoint name, shape) the built-in script for `config`
/// declares, in declaration order: a checkpoint with these loads. What
/// `mllm random-checkpoint` writes, so its presets need no tensor lists.
pub fn parameter_table(config: &serde_json::Value) -> Result<Vec<(String, Vec<usize>)>> {
    let script =
        crate::assets::script_for_config(config).map_err(|e| Error::load(e.to_string()))?;
    let prog = std::rc::Rc::new(crate::assets::check_script(script)?);
    let mut exec = mllm_interpreter::Eager::new(std::sync::Arc::new(mllm_backends::CpuBackend));
    let model = mllm_interpreter::Model::load(prog.clone(), config, "config.json", None, &mut exec)
        .map_err(|errs| {
            Error::diagnostics(crate::ErrorKind::Load, |c| {
                let out: Vec<String> = errs
                    .iter()
                    .take(8)
                    .map(|e| e.render(&prog.sources, c))
                    .collect();
                out.join("\n")
            })
        })?;
    Ok(model
        .params
        .iter()
        .map(|p| (p.path.clone(), p.shape.clone()))
        .collect())
}

/// Loads the model a script describes with these files: the script given,
/// else the built-in one for the checkpoint's architecture.
pub fn load_model(files: &ModelFiles, script: Option<&str>) -> Result<mllm_interpreter::Model> {
    let mut exec = mllm_interpreter::Eager::new(files.backend.clone());
    let mut model = load_model_with(files, script, &mut exec)?;
    model.backend = files.backend.clone();
    Ok(model)
}

/// `load_model` with the executor that takes each weight (`prepare_weight`).
pub fn load_model_with(
    files: &ModelFiles,
    script: Option<&str>,
    exec: &mut dyn mllm_interpreter::Executor,
) -> Result<mllm_interpreter::Model> {
    if files.config.as_object().is_some_and(|c| c.is_empty()) {
        return Err(Error::tokenizer(format!("{} holds only a tokenizer (no config.json, no weights): `tokenize` and `template` work with it; to run a model pass a directory with config.json and *.safetensors, or a GGUF/.mllm file",
            files.path.display()
        )));
    }
    let script = match script {
        Some(s) => s.to_string(),
        None => crate::assets::script_for_config(&files.config)
            .map_err(|e| Error::load(e.to_string()))?
            .to_string(),
    };
    let prog = std::rc::Rc::new(crate::assets::check_script(&script)?);
    let loaded = mllm_interpreter::Model::load(
        prog.clone(),
        &files.config,
        &files.config_origin,
        Some(files.weights.as_ref()),
        exec,
    )
    .map_err(|errs| {
        let n = errs.len();
        Error::diagnostics(crate::ErrorKind::Load, |c| {
            let mut out: Vec<String> = errs
                .iter()
                .take(20)
                .map(|e| e.render(&prog.sources, c))
                .collect();
            if n > 20 {
                out.push(format!("... and {} more", n - 20));
            }
            out.push(format!(
                "error: cannot load {} with {script} ({n} problem{})",
                files.path.display(),
                if n == 1 { "" } else { "s" }
            ));
            out.join("\n")
        })
    });
    // Before the first forward; a damaged file also explains a failed load.
    files.weights_verified()?;
    loaded
}
