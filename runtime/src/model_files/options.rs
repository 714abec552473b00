//! How a model is loaded and run: `LoadOptions` (the load flags of every
//! command), the KV cache's dtype, the backend names `--backend` takes.

pub use mllm_backends::fallback::Fallback;

use crate::{Error, Result};

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
    fn from_str(s: &str) -> std::result::Result<KvType, String> {
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
    fn from_str(s: &str) -> std::result::Result<Backend, String> {
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
pub fn backend_by_name(name: &str, device: usize) -> Result<mllm_backends::SharedBackend> {
    mllm_backends::backend::by_name(name, device)
        .map_err(|e| Error::load(format!("--backend {name}: {e}")))
}
