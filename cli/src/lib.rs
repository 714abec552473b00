//! mllm-cli: the `mllm` command: argument parsing and printing. Each
//! subcommand lives in its own file under `commands/`; the engine (model
//! loading, scripts, steps, images, generation) is `mllm_runtime`.

pub mod commands;

// The runtime's modules under their old names, for the commands.
use mllm_runtime::{engine, images, model_files, prompt};

/// A failure already explained to the user; `main` prints it and exits 1.
pub use mllm_runtime::{color, Error as CliError, Result as CliResult};

/// The flags exec, run, chat and bench share: how weights load and steps run.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct LoadFlags {
    /// Widen quantized weights to f32 on load (exact f32 numerics, slower).
    #[arg(long)]
    pub dequantize: bool,
    /// Run steps as captured graphs (prefill chunks and 1-token decode),
    /// without the interpreter; the first step of each shape captures.
    #[arg(long, conflicts_with = "eager")]
    pub compiled: bool,
    /// Interpret the script at every step, decode too (run, chat and bench
    /// otherwise decode through a captured graph).
    #[arg(long)]
    pub eager: bool,
    /// The backend ops run on: cpu, or opencl (see `mllm devices`); qnn and
    /// ascend (builds with those features) run exported graphs with
    /// `run --model EXPORT_DIR` (docs/npu_runtime.md).
    #[arg(long, default_value = "cpu")]
    pub backend: mllm_runtime::model_files::Backend,
    /// The backend's device, numbered as `mllm devices` lists them.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Where ops the backend has no kernel for run: `cpu` (the default:
    /// one warning per op kind, and `bench` counts them per step) or
    /// `none` (an error naming the op).
    #[arg(long, default_value = "cpu")]
    pub fallback: mllm_runtime::model_files::Fallback,
    /// What the KV cache stores: f32, f16 (half the memory) or q8_0
    /// (34/128 of f32; heads must be multiples of 32 values).
    #[arg(long, default_value = "f32")]
    pub kv_type: mllm_runtime::model_files::KvType,
    /// Do not check a .mllm file's tensor checksums on load (a faster
    /// start; a damaged file then loads and may print garbage).
    #[arg(long)]
    pub no_verify: bool,
    /// Stop at the first NaN or infinity an op produces, with the op, the
    /// script line and the tensor's shape (every step runs eagerly).
    #[arg(long, conflicts_with = "compiled")]
    pub check_numerics: bool,
}

impl From<LoadFlags> for mllm_runtime::model_files::LoadOptions {
    fn from(f: LoadFlags) -> Self {
        mllm_runtime::model_files::LoadOptions {
            dequantize: f.dequantize,
            compiled: f.compiled,
            eager: f.eager,
            backend: f.backend,
            device: f.device,
            fallback: f.fallback,
            kv: f.kv_type,
            no_verify: f.no_verify,
            check_numerics: f.check_numerics,
            skip_tokenizer: false,
        }
    }
}

pub use mllm_runtime::set_threads;

/// Speculative decoding's flags (run, chat, bench), named as llama.cpp's.
#[derive(Clone, Debug, clap::Args)]
pub struct SpecFlags {
    /// Speculative decoding: `ngram` (guesses copied from the
    /// conversation so far: text that quotes its input), `draft` (a
    /// smaller model, --model-draft) or `mtp` (the model's own
    /// multi-token-prediction head: Qwen3.5 checkpoints with `mtp.*`).
    /// The answer is the same token for token; CPU backend.
    #[arg(long, value_name = "TYPE")]
    pub spec_type: Option<String>,
    /// Most tokens proposed per step (1-31).
    #[arg(long, value_name = "N", default_value_t = mllm_runtime::speculative::SpecConfig::DEFAULT.draft_max)]
    pub draft_max: usize,
    /// Fewer proposals than this are not verified (the step decodes one token).
    #[arg(long, value_name = "N", default_value_t = mllm_runtime::speculative::SpecConfig::DEFAULT.draft_min)]
    pub draft_min: usize,
    /// The draft model stops proposing at a token it gives less probability.
    #[arg(long, value_name = "P", default_value_t = mllm_runtime::speculative::SpecConfig::DEFAULT.draft_p_min)]
    pub draft_p_min: f32,
    /// The draft's last guess, the token it gives less than --draft-p-min,
    /// is still proposed when at least this likely (its probability is
    /// computed already: it costs a row of the verification step only).
    #[arg(long, value_name = "P", default_value_t = mllm_runtime::speculative::SpecConfig::DEFAULT.draft_p_last)]
    pub draft_p_last: f32,
    /// The draft model for `--spec-type draft` (implies it): any model with
    /// the same tokenizer, e.g. a smaller one of the family or a Q4_0 copy.
    #[arg(long, value_name = "PATH")]
    pub model_draft: Option<String>,
}

impl Default for SpecFlags {
    /// No speculation, the flags' defaults.
    fn default() -> Self {
        let d = mllm_runtime::speculative::SpecConfig::DEFAULT;
        SpecFlags {
            spec_type: None,
            draft_max: d.draft_max,
            draft_min: d.draft_min,
            draft_p_min: d.draft_p_min,
            draft_p_last: d.draft_p_last,
            model_draft: None,
        }
    }
}

impl SpecFlags {
    /// Whether speculation was asked for.
    pub fn requested(&self) -> bool {
        self.spec_type.is_some() || self.model_draft.is_some()
    }

    /// What these flags ask for, checked (None without `--spec-type` or
    /// `--model-draft`); models are not loaded yet.
    pub fn settings(
        &self,
        backend: &mllm_runtime::model_files::Backend,
    ) -> CliResult<Option<mllm_runtime::speculative::SpecSettings>> {
        let config = mllm_runtime::speculative::SpecConfig {
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            draft_p_min: self.draft_p_min,
            draft_p_last: self.draft_p_last,
        };
        mllm_runtime::speculative::SpecSettings::from_flags(
            self.spec_type.as_deref(),
            self.model_draft.as_deref(),
            config,
            backend,
        )
    }

    /// The speculator these flags ask for (None without `--spec-type` or
    /// `--model-draft`), its draft loaded beside `target` with `opts`;
    /// `mtp` takes `engine`'s model's head and has the engine keep its
    /// hidden states.
    pub fn speculator(
        &self,
        target: &mllm_runtime::model_files::ModelFiles,
        opts: mllm_runtime::model_files::LoadOptions,
        context: Option<usize>,
        engine: &mut mllm_runtime::engine::Engine,
    ) -> CliResult<Option<mllm_runtime::speculative::Speculator>> {
        use mllm_runtime::speculative::{self as spec, SpecType, Speculator};
        let Some(s) = self.settings(&opts.backend)? else {
            return Ok(None);
        };
        engine.keep_step_states();
        if s.kind == SpecType::Mtp {
            let ctx = context.unwrap_or(mllm_runtime::model_files::DEFAULT_CONTEXT);
            let head = spec::MtpHead::compiled(&engine.runner.model, ctx)?;
            engine.keep_hidden();
            return Ok(Some(Speculator::mtp(s.config, head)?));
        }
        let draft = match &s.draft {
            Some(path) => Some(spec::load_draft(path, target, opts, context)?),
            None => None,
        };
        Ok(Some(Speculator::new(s.kind, s.config, draft)?))
    }
}
