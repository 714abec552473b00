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
