//! Opens what `--model` names: a Hugging Face directory (config.json,
//! safetensors, tokenizer.json, tokenizer_config.json,
//! generation_config.json) or a GGUF file (config, weights, vocabulary and
//! chat template all inside), into one shape the commands use.

use std::path::{Path, PathBuf};

use mllm_backends::weights::WeightSource;
use mllm_converter::chat_template::ChatTemplate;
use mllm_converter::gguf::{GgufFile, GgufWeights, VisionLanguage};
use mllm_converter::tokenizer::{GgufVocab, Tokenizer};
use mllm_converter::{HfModelDir, SafetensorsDir};
use serde_json::Value as Json;

use crate::generation::{ConstraintError, Grammars};
use crate::weight_check::WeightCheck;
use crate::{Error as CliError, Result as CliResult};

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
    pub(crate) grammars: std::sync::OnceLock<Result<std::sync::Arc<Grammars>, ConstraintError>>,
}

fn cpu() -> mllm_backends::SharedBackend {
    std::sync::Arc::new(mllm_backends::CpuBackend)
}

fn ids_of(v: Option<&Json>) -> Vec<u32> {
    match v {
        Some(Json::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Json::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as u32)
            .collect(),
        _ => vec![],
    }
}

/// Adds the tokenizer's end-of-sequence ids to those the configs named.
fn add_tokenizer_eos(eos: &mut Vec<u32>, tokenizer: Option<&Tokenizer>) {
    for &e in tokenizer.map_or(&[][..], |t| t.eos_ids()) {
        if !eos.contains(&e) {
            eos.push(e);
        }
    }
}

fn read_json(path: &Path) -> CliResult<Option<Json>> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| CliError(format!("error: {}: not valid JSON: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError(format!("error: {}: {e}", path.display()))),
    }
}

/// The chat template of a Hugging Face directory: `tokenizer_config.json`'s
/// `chat_template` (with the special tokens that file names), else
/// `chat_template.jinja` (newer transformers) with the tokenizer's tokens.
fn hf_chat_template(
    dir: &Path,
    tok_config: Option<&Json>,
    tok: Option<&Tokenizer>,
) -> CliResult<Option<ChatTemplate>> {
    let Some((source, file)) = mllm_converter::chat_template::find_in_dir(dir, tok_config)? else {
        return Ok(None);
    };
    if file
        .file_name()
        .is_some_and(|n| n == "tokenizer_config.json")
    {
        // Also takes the special token strings the config names.
        return Ok(Some(ChatTemplate::from_tokenizer_config(&file)?));
    }
    let mut t = ChatTemplate::new(&source, &file.display().to_string())?;
    if let Some(tok) = tok {
        t = t.with_tokenizer(tok);
    }
    Ok(Some(t))
}

pub use mllm_backends::fallback::Fallback;

/// How weights are loaded and steps run.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Widen quantized weights to f32 on load (exact f32 numerics, slower).
    /// The default keeps GGUF/.mllm blocks and runs the quantized kernels
    /// (activations rounded to 8 bits per matmul, as llama.cpp does).
    pub dequantize: bool,
    /// Run steps as captured graphs (prefill chunks and 1-token decode),
    /// without the interpreter; the first step of each shape captures.
    pub compiled: bool,
    /// No captured graphs at all (run, chat and bench decode through a
    /// graph by default).
    pub eager: bool,
    /// The backend ops run on.
    pub backend: Backend,
    /// The backend's device (`mllm devices` numbers them; 0 is the first).
    pub device: usize,
    /// Where ops the backend has no kernel for run (`--fallback`): on the
    /// CPU after a warning per op kind (the default), or nowhere (an error).
    pub fallback: Fallback,
    /// What the KV cache stores.
    pub kv: KvType,
    /// Skip checking a `.mllm` file's tensor checksums on open (they are
    /// checked by default, before the first forward).
    pub no_verify: bool,
    /// Stop at the first NaN or infinity an op produces (every step then
    /// runs eagerly, so each op is seen with its script line).
    pub check_numerics: bool,
    /// Build no tokenizer (so no EOS ids from it, and a chat template
    /// without its tokens):
    /// for `bench`, which feeds synthetic ids as llama-bench does. The
    /// tokenizers crate's BPE tables keep ~16 MiB resident for SmolLM2's
    /// 49k-token vocabulary and ~50 MiB for Qwen3's 151k.
    pub skip_tokenizer: bool,
}

/// The KV cache's dtype (`--kv-type f32|f16|q8_0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvType(pub mllm_backends::DType);

impl Default for KvType {
    fn default() -> KvType {
        KvType(mllm_backends::DType::F32)
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<KvType, String> {
        let names = mllm_backends::kv::KV_DTYPES;
        match mllm_backends::DType::parse(s) {
            Some(d) if names.contains(&d.name()) => Ok(KvType(d)),
            _ => Err(format!(
                "the KV cache stores {}, not `{s}`",
                names.join(", ")
            )),
        }
    }
}

/// A backend name `--backend` accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Cpu,
    OpenCl,
    /// Qualcomm's QNN runtime (the `qnn` feature): exported graphs, not ops.
    Qnn,
    /// Huawei's AscendCL (the `ascend` feature): exported graphs, not ops.
    Ascend,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::OpenCl => "opencl",
            Backend::Qnn => "qnn",
            Backend::Ascend => "ascend",
        }
    }

    /// The NPU runtime that runs exported graphs (`crate::npu`), for the
    /// backends that are one.
    pub fn npu(self) -> Option<crate::npu::Vendor> {
        match self {
            Backend::Qnn => Some(crate::npu::Vendor::Qnn),
            Backend::Ascend => Some(crate::npu::Vendor::Ascend),
            _ => None,
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        // check_name knows which names exist and which are not built.
        mllm_backends::backend::check_name(s)?;
        Ok(match s {
            "opencl" => Backend::OpenCl,
            "qnn" => Backend::Qnn,
            "ascend" => Backend::Ascend,
            _ => Backend::Cpu,
        })
    }
}

/// Rows the KV inputs of compiled graphs declare when the config gives no
/// context length.
pub const DEFAULT_CONTEXT: usize = 32768;

/// The backend `--backend NAME --device N` names, with the policy-free
/// kernels it has (`supports`): for tools that ask what it can run.
pub fn backend_by_name(name: &str, device: usize) -> CliResult<mllm_backends::SharedBackend> {
    mllm_backends::backend::by_name(name, device)
        .map_err(|e| CliError(format!("error: --backend {name}: {e}")))
}

pub fn open(path: &str) -> CliResult<ModelFiles> {
    open_with(path, LoadOptions::default())
}

/// `open` for commands that read only the tokenizer, template or config
/// (`tokenize`, `template`): a `.mllm` file's weights are not checksummed,
/// which would read the whole file.
pub fn open_without_weights(path: &str) -> CliResult<ModelFiles> {
    open_with(
        path,
        LoadOptions {
            no_verify: true,
            ..LoadOptions::default()
        },
    )
}

pub fn open_with(path: &str, opts: LoadOptions) -> CliResult<ModelFiles> {
    open_with_mmproj(path, None, opts)
}

/// `open_with` for a GGUF text model and, with `mmproj`, the vision tower
/// llama.cpp writes beside it (`--mmproj FILE`, llama.cpp's flag): the two
/// load as one vision-language model (`mllm_converter::gguf::VisionLanguage`).
pub fn open_with_mmproj(
    path: &str,
    mmproj: Option<&str>,
    opts: LoadOptions,
) -> CliResult<ModelFiles> {
    if opts.backend.npu().is_some() {
        // An NPU runs exported graphs (`crate::npu`), not a model's ops.
        return Err(CliError(format!(
            "error: --backend {} runs exported graphs, with `mllm run --model EXPORT_DIR` only (docs/npu_runtime.md)",
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

fn open_files(path: &str, mmproj: Option<&str>, opts: LoadOptions) -> CliResult<ModelFiles> {
    let p = Path::new(path);
    let mllm = p.is_file() && mllm_converter::mllm_format::is_mllm_file(p);
    let gguf = !mllm
        && p.is_file()
        && p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if mmproj.is_some() && !gguf {
        return Err(CliError(format!(
            "error: --mmproj goes with a GGUF text model (--model TEXT.gguf); {path} is not one (a Hugging Face directory or .mllm file holds its vision tower itself)"
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
        return Err(CliError(format!(
            "error: {path} is neither a .mllm or .gguf file nor a model directory; --model takes a .mllm file, a GGUF file or a Hugging Face directory (config.json + *.safetensors)"
        )));
    }
    Err(CliError(format!(
        "error: {path} does not exist{}",
        hub_hint(path)
    )))
}

/// A directory without config.json or weights: name everything missing at
/// once, rather than the first file a reader fails on.
fn check_model_dir(dir: &Path) -> CliResult<()> {
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
    Err(CliError(format!(
        "error: {} is not a complete model directory: it has no {}. A Hugging Face model directory holds config.json, the weights and tokenizer.json (e.g. `huggingface-cli download ORG/NAME --local-dir DIR`); --model also takes a GGUF or .mllm file",
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
    let dir = path.rsplit('/').next().unwrap_or(path);
    format!(
        ". If it is a Hugging Face model name: mllm reads files on disk; download them first, e.g. `huggingface-cli download {repo} --local-dir {dir}` (a GGUF repository: add the file's name), then pass --model {dir}"
    )
}

/// A tokenizer package: `tokenizer.json` (and `tokenizer_config.json` with
/// the chat template) without a config or weights. `tokenize` and
/// `template` work with it; loading a model says what is missing.
fn open_tokenizer_dir(dir: &Path) -> CliResult<ModelFiles> {
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
    let chat_template = hf_chat_template(dir, tok_config.as_ref(), Some(&tokenizer))?;
    let gen = read_json(&dir.join("generation_config.json"))?;
    let mut eos = ids_of(gen.as_ref().and_then(|g| g.get("eos_token_id")));
    add_tokenizer_eos(&mut eos, Some(&tokenizer));
    Ok(ModelFiles {
        path: dir.to_path_buf(),
        config: Json::Object(Default::default()),
        config_origin: format!(
            "{} (a tokenizer-only directory: no config.json)",
            dir.display()
        ),
        weights: Box::new(NoWeights(dir.to_path_buf())),
        tokenizer: Some(std::sync::Arc::new(tokenizer)),
        chat_template,
        eos,
        preprocessor_config: None,
        video_preprocessor_config: None,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

/// The weights of a tokenizer-only directory: none.
struct NoWeights(PathBuf);

impl WeightSource for NoWeights {
    fn describe(&self) -> String {
        format!("{} (tokenizer files only, no weights)", self.0.display())
    }
    fn names(&self) -> Vec<String> {
        vec![]
    }
    fn info(&self, _name: &str) -> Option<mllm_backends::weights::TensorInfo> {
        None
    }
    fn load(&self, name: &str) -> Result<mllm_backends::Tensor, String> {
        Err(format!(
            "{} holds only a tokenizer, not `{name}`: a model needs config.json and *.safetensors (or a GGUF/.mllm file)",
            self.0.display()
        ))
    }
}

fn open_hf(dir: &Path, skip_tokenizer: bool) -> CliResult<ModelFiles> {
    let hf = HfModelDir::open(dir)?;
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = if tok_path.is_file() && !skip_tokenizer {
        Some(Tokenizer::from_file(&tok_path)?)
    } else {
        None
    };
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?;
    let chat_template = hf_chat_template(dir, tok_config.as_ref(), tokenizer.as_ref())?;
    let gen = read_json(&dir.join("generation_config.json"))?;
    let mut eos = ids_of(gen.as_ref().and_then(|g| g.get("eos_token_id")));
    if eos.is_empty() {
        eos = ids_of(hf.config.get("eos_token_id"));
    }
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    let HfModelDir {
        config,
        config_path,
        weights,
        ..
    } = hf;
    let weights: Box<SafetensorsDir> = Box::new(weights);
    Ok(ModelFiles {
        path: dir.to_path_buf(),
        config,
        config_origin: config_path.display().to_string(),
        weights,
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config: mllm_converter::image_preprocess::image_processor_settings(dir)?,
        video_preprocessor_config: read_json(&dir.join("video_preprocessor_config.json"))?,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

fn open_gguf(path: &Path, mmproj: Option<&str>, opts: LoadOptions) -> CliResult<ModelFiles> {
    let g = GgufFile::open(path)?;
    if g.architecture() == Some("clip") {
        return Err(CliError(format!(
            "error: {} is an mmproj file (a vision tower, `clip`): pass it with --mmproj, and the text model's GGUF with --model",
            path.display()
        )));
    }
    let config = mllm_converter::gguf::hf_config(&g)?;
    let tokenizer = if opts.skip_tokenizer {
        None
    } else {
        match GgufVocab::from_gguf(&g) {
            Ok(v) => Some(Tokenizer::from_gguf_vocab(&v)?),
            Err(_) if g.meta("tokenizer.ggml.tokens").is_none() => None,
            Err(e) => return Err(e.into()),
        }
    };
    crate::memory::return_freed_heap();
    let chat_template = match (
        g.meta("tokenizer.chat_template").and_then(|v| v.as_str()),
        &tokenizer,
    ) {
        (Some(source), Some(tok)) => Some(
            ChatTemplate::new(source, &format!("the chat template in {}", path.display()))?
                .with_tokenizer(tok),
        ),
        (Some(source), None) => Some(ChatTemplate::new(
            source,
            &format!("the chat template in {}", path.display()),
        )?),
        (None, _) => None,
    };
    let mut eos = ids_of(config.get("eos_token_id"));
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    let mut text = GgufWeights::new(g)?;
    text.set_dequantize(opts.dequantize);
    let origin = format!("the metadata of {}", path.display());
    let (config, config_origin, weights, preprocessor_config): (_, _, Box<dyn WeightSource>, _) =
        match mmproj {
            None => (config, origin, Box::new(text), None),
            Some(mm) => {
                let mut vl = VisionLanguage::pair(text, config, GgufFile::open(Path::new(mm))?)?;
                vl.weights.set_dequantize(opts.dequantize);
                let origin = format!("{origin} and its mmproj {mm}");
                (
                    vl.config,
                    origin,
                    Box::new(vl.weights),
                    Some(vl.preprocessor_config),
                )
            }
        };
    Ok(ModelFiles {
        path: path.to_path_buf(),
        config,
        config_origin,
        weights,
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config,
        video_preprocessor_config: None,
        backend: cpu(),
        check: WeightCheck::none(),
        grammars: Default::default(),
    })
}

/// A self-contained .mllm file: config, tokenizer, template and EOS ids
/// come from its metadata; its tensor checksums are checked on a thread of
/// their own unless `no_verify` (`ModelFiles::weights_verified` waits).
fn open_mllm(path: &Path, opts: LoadOptions) -> CliResult<ModelFiles> {
    let mut f = mllm_converter::mllm_format::MllmFile::open(path)?;
    let check = if opts.no_verify {
        WeightCheck::none()
    } else {
        WeightCheck::start(f.checksums())
    };
    f.set_dequantize(opts.dequantize);
    let origin = format!("the metadata of {}", path.display());
    let tokenizer = match f.tokenizer_json().filter(|_| !opts.skip_tokenizer) {
        Some(json) => Some(Tokenizer::from_json_str(json, &origin)?),
        None => None,
    };
    let chat_template = match f.chat_template() {
        Some(source) => {
            let mut t =
                ChatTemplate::new(source, &format!("the chat template in {}", path.display()))?;
            if let Some(tok) = &tokenizer {
                t = t.with_tokenizer(tok);
            }
            Some(t)
        }
        None => None,
    };
    let config = f.config().clone();
    let preprocessor_config = f.preprocessor_config().cloned();
    let mut eos = ids_of(f.generation_config().and_then(|g| g.get("eos_token_id")));
    if eos.is_empty() {
        eos = ids_of(config.get("eos_token_id"));
    }
    add_tokenizer_eos(&mut eos, tokenizer.as_ref());
    Ok(ModelFiles {
        path: path.to_path_buf(),
        config,
        config_origin: origin,
        weights: Box::new(f),
        tokenizer: tokenizer.map(std::sync::Arc::new),
        chat_template,
        eos,
        preprocessor_config,
        video_preprocessor_config: None,
        backend: cpu(),
        check,
        grammars: Default::default(),
    })
}

impl ModelFiles {
    /// Waits for the checksum check of a `.mllm` file (started when it was
    /// opened): an error names the damaged tensors and what to do.
    pub fn weights_verified(&self) -> CliResult<()> {
        self.check.wait_for(&self.path)
    }

    pub fn tokenizer(&self) -> CliResult<&Tokenizer> {
        self.tokenizer.as_deref().ok_or_else(|| {
            CliError(format!("error: {} has no tokenizer (tokenizer.json, or a vocabulary in the GGUF); pass token ids to `mllm exec` instead", self.path.display()))
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
pub fn parameter_table(config: &serde_json::Value) -> CliResult<Vec<(String, Vec<usize>)>> {
    let script =
        crate::assets::script_for_config(config).map_err(|e| CliError(format!("error: {e}")))?;
    let prog = std::rc::Rc::new(crate::assets::check_script(script)?);
    let mut exec = mllm_interpreter::Eager::new(std::sync::Arc::new(mllm_backends::CpuBackend));
    let model = mllm_interpreter::Model::load(prog.clone(), config, "config.json", None, &mut exec)
        .map_err(|errs| {
            let out: Vec<String> = errs
                .iter()
                .take(8)
                .map(|e| e.render(&prog.sources, crate::color()))
                .collect();
            CliError(out.join("\n"))
        })?;
    Ok(model
        .params
        .iter()
        .map(|p| (p.path.clone(), p.shape.clone()))
        .collect())
}

/// Loads the model a script describes with these files: the script given,
/// else the built-in one for the checkpoint's architecture.
pub fn load_model(files: &ModelFiles, script: Option<&str>) -> CliResult<mllm_interpreter::Model> {
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
) -> CliResult<mllm_interpreter::Model> {
    if files.config.as_object().is_some_and(|c| c.is_empty()) {
        return Err(CliError(format!(
            "error: {} holds only a tokenizer (no config.json, no weights): `tokenize` and `template` work with it; to run a model pass a directory with config.json and *.safetensors, or a GGUF/.mllm file",
            files.path.display()
        )));
    }
    let script = match script {
        Some(s) => s.to_string(),
        None => crate::assets::script_for_config(&files.config)
            .map_err(|e| CliError(format!("error: {e}")))?
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
        let mut out: Vec<String> = errs
            .iter()
            .take(20)
            .map(|e| e.render(&prog.sources, crate::color()))
            .collect();
        if n > 20 {
            out.push(format!("... and {} more", n - 20));
        }
        out.push(format!(
            "error: cannot load {} with {script} ({n} problem{})",
            files.path.display(),
            if n == 1 { "" } else { "s" }
        ));
        CliError(out.join("\n"))
    });
    // Before the first forward; a damaged file also explains a failed load.
    files.weights_verified()?;
    loaded
}
