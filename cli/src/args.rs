//! The `mllm` command line as clap reads it: every subcommand and flag,
//! with the help text users see. main.rs dispatches them.

use clap::{Parser, Subcommand};
use mllm_cli::commands::run::SamplingArgs;

#[derive(Parser)]
#[command(
    name = "mllm",
    version,
    about = "Run multimodal LLMs written as .mdl scripts"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// `--mmproj FILE`, declared once for the commands that load one model
/// (exec, run, chat, bench); serve and convert word it for their own use.
#[derive(clap::Args)]
pub(crate) struct MmprojFlag {
    /// With a GGUF --model: its vision tower, the mmproj GGUF llama.cpp's
    /// converter writes beside it (`convert_hf_to_gguf.py --mmproj`).
    #[arg(long)]
    pub(crate) mmproj: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Download a model from the Hugging Face Hub into its cache (shared
    /// with Python's huggingface_hub; HF_ENDPOINT, HF_TOKEN, HF_HOME and
    /// HF_HUB_OFFLINE apply) and print its path (and its mmproj's). Every
    /// command's --model also takes `hf://REPO[:FILE_OR_QUANT]`.
    Pull {
        /// ORG/NAME[@REVISION][:FILE_OR_QUANT]: the whole model directory
        /// (config, tokenizer, safetensors shards), or of a GGUF repository
        /// the file of that type (`:Q4_K_M`, the default) or name, with the
        /// vision tower (mmproj) beside it.
        reference: String,
    },
    /// Parse and check scripts; print every diagnostic.
    Check {
        /// The .mdl scripts to check.
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Run a script on a checkpoint with given token ids (prefill logits,
    /// greedy ids).
    Exec {
        /// The model script: a path or a built-in name such as `qwen3`
        /// (default: the built-in script for the checkpoint's architecture).
        script: Option<String>,
        /// A Hugging Face directory, GGUF or .mllm file. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        #[command(flatten)]
        mmproj: MmprojFlag,
        /// Comma-separated prompt token ids.
        #[arg(long)]
        input_ids: String,
        /// Write prefill logits [seq_len, vocab] (f32) to this safetensors file.
        #[arg(long)]
        logits_out: Option<String>,
        /// Decode this many tokens greedily and print their ids.
        #[arg(long, default_value_t = 0)]
        max_new_tokens: usize,
        /// Stop decoding at the model's eos_token_id.
        #[arg(long)]
        stop_at_eos: bool,
        /// Images for a vision-language script: a safetensors file with
        /// `pixel_values` (f32 [patches, C*T*P*P]) and `image_grid_thw`
        /// ([images, 3]) as the Hugging Face processor outputs them; the
        /// ids must already hold each image's placeholder tokens.
        #[arg(long)]
        pixel_values: Option<String>,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Answer one prompt, streaming the text.
    Run {
        /// A model script (default: the built-in script for the checkpoint's architecture).
        script: Option<String>,
        /// A GGUF file, a .mllm file or a Hugging Face model directory. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        #[command(flatten)]
        mmproj: MmprojFlag,
        /// The prompt; `-` reads it from standard input.
        #[arg(
            long,
            short = 'p',
            required_unless_present = "file",
            conflicts_with = "file"
        )]
        prompt: Option<String>,
        /// Read the prompt from FILE (`-`: standard input).
        #[arg(long, short = 'f', value_name = "FILE")]
        file: Option<String>,
        /// Tokens the conversation may hold, prompt and answer (default and
        /// most: the model's own context); an answer that reaches it ends.
        #[arg(long, short = 'c', value_name = "N")]
        ctx_size: Option<usize>,
        /// A system message for the chat template.
        #[arg(long)]
        system: Option<String>,
        /// Send the prompt as plain text, without the chat template.
        #[arg(long)]
        raw: bool,
        /// An image shown with the prompt (PNG, JPEG, WebP; repeatable) for
        /// vision-language models such as Qwen3-VL.
        #[arg(long = "image")]
        images: Vec<String>,
        /// A video shown with the prompt, after the images (repeatable): a
        /// directory of frames (PNG/JPEG/WebP, in file-name order) or an
        /// animated PNG/WebP file (Qwen3-VL).
        #[arg(long = "video")]
        videos: Vec<String>,
        /// Frame rate of --video frames, for frame sampling and the
        /// timestamps in the prompt [default: an animation's own rate; 24
        /// for a frame directory, as transformers assumes for frames
        /// without metadata].
        #[arg(long)]
        video_fps: Option<f64>,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[command(flatten)]
        spec: mllm_cli::SpecFlags,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Multi-turn chat in the terminal (/help lists its commands).
    Chat {
        /// A model script (default: the built-in script for the checkpoint's architecture).
        script: Option<String>,
        /// A GGUF file, a .mllm file or a Hugging Face model directory. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        #[command(flatten)]
        mmproj: MmprojFlag,
        /// A system message, kept when old turns make way for new ones.
        #[arg(long)]
        system: Option<String>,
        /// Tokens the conversation may hold (default and most: the model's
        /// own context); past it the oldest turns are dropped.
        #[arg(long, short = 'c', value_name = "N")]
        ctx_size: Option<usize>,
        /// An image shown with the first message (repeatable); `/image PATH`
        /// in the chat attaches one to the next message.
        #[arg(long = "image")]
        images: Vec<String>,
        /// A video (frame directory or animated PNG/WebP) shown with the
        /// first message (repeatable); `/video PATH` attaches one to the next.
        #[arg(long = "video")]
        videos: Vec<String>,
        /// Frame rate of the videos' frames (as for `run --video-fps`).
        #[arg(long)]
        video_fps: Option<f64>,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[command(flatten)]
        spec: mllm_cli::SpecFlags,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Serve models over an OpenAI-compatible HTTP API (chat, completions,
    /// streaming, tokenize, metrics), several requests at once per model.
    Serve {
        /// A model to serve (repeatable): PATH (named after its file or
        /// directory) or NAME=PATH; requests pick one by `model`.
        #[arg(long, short = 'm', required = true)]
        model: Vec<String>,
        /// The vision tower of a GGUF model (repeatable): [NAME=]FILE, the
        /// mmproj GGUF llama.cpp's converter writes beside it; NAME picks
        /// the model (not needed when one model is served).
        #[arg(long)]
        mmproj: Vec<String>,
        /// Serve a model for POST /v1/embeddings instead of generation:
        /// `--embedding` every model, `--embedding NAME` one (repeatable).
        #[arg(long, alias = "embeddings", value_name = "NAME", num_args = 0..=1, default_missing_value = "*")]
        embedding: Vec<String>,
        /// Serve a cross-encoder for POST /v1/rerank instead of generation:
        /// `--rerank` every model, `--rerank NAME` one (repeatable).
        #[arg(long, alias = "reranking", value_name = "NAME", num_args = 0..=1, default_missing_value = "*")]
        rerank: Vec<String>,
        /// A script that overrides the one each model's architecture picks.
        #[arg(long)]
        script: Option<String>,
        /// The address to listen on: 127.0.0.1 serves this machine only,
        /// 0.0.0.0 every network (see docs/security.md first).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// 0 picks a free port (printed on stderr).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Slots per model: requests that run at once (`-np` as
        /// llama-server; `-p` is kept from before).
        #[arg(long, short_alias = 'p', default_value_t = 4)]
        parallel: usize,
        /// Tokens per slot (default: the model's context, at most 4096).
        #[arg(long, short = 'c', value_name = "N")]
        ctx_size: Option<usize>,
        /// Requests that may wait for a slot, per model; more get 503.
        #[arg(long, default_value_t = 64)]
        queue: usize,
        /// MiB of prompt prefixes each model keeps after their slot moves on
        /// (a shared system prompt, a conversation coming back), reused by
        /// any request that begins with one; 0 keeps none (default: a
        /// quarter of the memory available at start).
        #[arg(long, value_name = "MiB")]
        cache_ram: Option<usize>,
        /// Require `Authorization: Bearer KEY` (all endpoints but /health).
        #[arg(long)]
        api_key: Option<String>,
        /// Keys requests may carry, one a line (`#` comments and blank
        /// lines skipped); with --api-key, either is accepted.
        #[arg(long, value_name = "FILE")]
        api_key_file: Option<std::path::PathBuf>,
        /// Let requests name images by local path or file:// URL, for
        /// regular files under DIR only (symlinks and `..` resolved first;
        /// repeatable). Without it, local paths are refused.
        #[arg(long, value_name = "DIR")]
        allowed_local_media_path: Vec<std::path::PathBuf>,
        /// A host name clients reach the server by (repeatable), besides IP
        /// addresses, localhost and --host; other `Host` headers get 421
        /// (DNS rebinding). '*' turns the check off.
        #[arg(long, value_name = "NAME")]
        allowed_host: Vec<String>,
        /// A web origin (scheme://host[:port]) whose pages may call the
        /// server from a browser (repeatable); other origins get 403. '*'
        /// allows every origin and needs --api-key.
        #[arg(long, value_name = "ORIGIN")]
        cors_origin: Vec<String>,
        /// Serve HTTPS (HTTP/1.1 and HTTP/2) with this PEM certificate
        /// chain; needs --ssl-key-file.
        #[arg(long, value_name = "PEM")]
        ssl_cert_file: Option<std::path::PathBuf>,
        /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
        #[arg(long, value_name = "PEM")]
        ssl_key_file: Option<std::path::PathBuf>,
        /// Seconds running answers get to finish after SIGINT/SIGTERM.
        #[arg(long, default_value_t = 30)]
        shutdown_grace: u64,
        /// The request log on stderr, one line per request: `text` or
        /// `json` (method, path, status, milliseconds, prompt and
        /// generated tokens).
        #[arg(long, default_value = "text", value_name = "FORMAT")]
        log_format: mllm_server::access_log::LogFormat,
        /// Where a thinking model's `<think>` blocks go: `deepseek` puts
        /// them in `reasoning_content`, `none` leaves them in `content`
        /// (a request's `reasoning_format` overrides it).
        #[arg(long, default_value = "deepseek", value_name = "FORMAT", value_parser = ["deepseek", "none"])]
        reasoning_format: String,
        /// Do not serve the chat page at `/` (the API is unchanged).
        #[arg(long)]
        no_webui: bool,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
        #[command(flatten)]
        spec: mllm_cli::SpecFlags,
    },
    /// Convert a checkpoint (HF directory, PyTorch .bin/.pt, GGUF) to one self-contained .mllm file.
    Convert {
        /// HF dir (safetensors or pytorch_model.bin), a .safetensors/PyTorch file with config.json beside it, or a GGUF file. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        src: String,
        /// The .mllm to write (written as .OUT.tmp-PID beside it, renamed when complete).
        out: String,
        /// With a GGUF SRC: its vision tower, the mmproj GGUF llama.cpp's
        /// converter writes beside it; the .mllm holds both.
        #[arg(long)]
        mmproj: Option<String>,
        /// The weights' type: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k,
        /// q6_k, w4a16_g32/64/128, w8a8, or keep (every tensor in its source
        /// type: a GGUF's Q4_K_M mix, Q3_K or IQ4_XS blocks copied as they
        /// are). The default f16 keeps a float checkpoint's quality; a
        /// quantized GGUF becomes larger and slower with it, so give
        /// `-q keep` (or its own type, `-q q4_0`).
        #[arg(long = "type", short = 'q', default_value = "f16")]
        ty: String,
        /// Rules file: `PATTERN TYPE` per line, first match wins, placed before the type's defaults.
        #[arg(long)]
        recipe: Option<String>,
        /// Re-read the written file and check every tensor checksum.
        #[arg(long)]
        verify: bool,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
    },
    /// Show metadata and tensors of a .mllm, GGUF, safetensors (file or dir) or PyTorch checkpoint.
    Inspect {
        /// The file or directory to describe. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        file: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also load the model and count the ops of its decode step that
        /// this backend has no kernel for (`--fallback cpu` runs them on
        /// the host).
        #[arg(long)]
        backend: Option<String>,
        /// The backend's device, numbered as `mllm devices` lists them.
        #[arg(long, default_value_t = 0, requires = "backend")]
        device: usize,
    },
    /// Measure prefill (pp) and decode (tg) throughput, like llama-bench.
    Bench {
        /// A model script (default: the built-in script for the checkpoint's architecture).
        script: Option<String>,
        /// A GGUF file, a .mllm file or a Hugging Face model directory. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        #[command(flatten)]
        mmproj: MmprojFlag,
        /// Prompt lengths to time (comma-separated).
        #[arg(long, short = 'p', value_delimiter = ',', default_value = "512")]
        n_prompt: Vec<usize>,
        /// Numbers of generated tokens to time (comma-separated).
        #[arg(long, short = 'n', value_delimiter = ',', default_value = "128")]
        n_gen: Vec<usize>,
        /// Context tokens computed (untimed) before each test (comma-separated).
        #[arg(long, short = 'd', value_delimiter = ',', default_value = "0")]
        depth: Vec<usize>,
        /// Repetitions of each test.
        #[arg(long, short = 'r', default_value_t = 3)]
        repetitions: usize,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
        /// Also time prompts after a synthetic SIZE x SIZE image
        /// (vision-language models), beside text-only prompts of equal length.
        #[arg(long)]
        image_size: Option<usize>,
        /// Also time decode for B sequences at once (comma-separated B > 1):
        /// `tgN xB`, each step one batched forward as `mllm serve` runs its
        /// busy slots; tok/s counts all B streams.
        #[arg(long, short = 'b', value_delimiter = ',')]
        batch: Vec<usize>,
        #[command(flatten)]
        spec: mllm_cli::SpecFlags,
        /// With --spec-type: the prompt whose answer is timed (`tg` rows
        /// then decode its answer greedily, with and without speculation).
        #[arg(long, value_name = "FILE")]
        prompt_file: Option<String>,
    },
    /// Capture a script's forward as a static graph and print it as text.
    Graph {
        /// The model script (a path, or a built-in name such as `qwen3`).
        script: String,
        /// A Hugging Face directory, GGUF or .mllm file. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        /// Tokens per step the graph is captured for (1: decode).
        #[arg(long)]
        seq: usize,
        /// Rows of the past KV buffers (the context the graph serves).
        #[arg(long, default_value_t = 1024)]
        context: usize,
        /// `all` (fold, cse, dce) or `none` (the graph as captured).
        #[arg(long, default_value = "all")]
        passes: String,
        /// Write the text here instead of stdout.
        #[arg(long)]
        out: Option<String>,
    },
    /// Export a script's forward as a static ONNX model (weights as
    /// external data, io.json describing the inputs and outputs).
    Export {
        /// The model script (a path, or a built-in name such as `qwen3`).
        script: String,
        /// A Hugging Face directory, GGUF or .mllm file. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        /// The output format (`onnx`).
        #[arg(long, default_value = "onnx")]
        format: String,
        /// Tokens per step the graph takes (1: the decode graph).
        #[arg(long)]
        seq: usize,
        /// Rows of the past KV inputs (default 1024).
        #[arg(long)]
        context: Option<usize>,
        /// A first-chunk graph without KV I/O: input_ids -> logits,
        /// positions fixed to 0..N.
        #[arg(long)]
        no_cache: bool,
        /// `dequantize` (every weight f32, default domain only) or `keep`.
        #[arg(long, default_value = "dequantize")]
        quant: String,
        /// Who the graph is shaped for: `generic` (standard ONNX), `qnn`
        /// (Qualcomm HTP: rope tables as inputs, quantization overrides,
        /// converter commands in README.txt) or `ascend` (ATC command line).
        #[arg(long, default_value = "generic")]
        target: String,
        /// The directory to write model.onnx, model.onnx.data and io.json into.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Load the written graph in onnxruntime (python3's, or
        /// $MLLM_PYTHON's); fails when it cannot load it, or when
        /// onnxruntime is not installed. Without it nothing is checked.
        #[arg(long)]
        check: bool,
    },
    /// Write a Hugging Face directory with random weights and a real architecture's sizes.
    RandomCheckpoint {
        /// qwen3-0.6b, qwen3-1.7b, smollm2-135m, llama-3.2-1b, qwen3-vl-2b,
        /// qwen3-30b-a3b, smollm3-3b, gemma3-1b, qwen3.5-0.8b,
        /// qwen3.5-35b-a3b, qwen3-vl-30b-a3b or deepseek-ocr2.
        #[arg(long)]
        preset: String,
        /// The directory to write config.json and model.safetensors into.
        #[arg(long)]
        out: String,
        /// bf16, f16 or f32.
        #[arg(long, default_value = "bf16")]
        dtype: String,
        /// Seed of the random weights (the same seed, the same file).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Override the number of layers (small models with real widths).
        #[arg(long)]
        layers: Option<u64>,
        /// `script` (the tensor shapes the model's script declares) or
        /// `published` (the published checkpoint's, where they differ:
        /// qwen3-vl-30b-a3b's transposed expert stacks, as llama.cpp's
        /// converter expects them).
        #[arg(long, default_value = "script")]
        layout: String,
    },
    /// Embed texts with an embedding model (BERT-family encoders such as
    /// all-MiniLM-L6-v2): one line of numbers per input, or OpenAI's JSON.
    Embed {
        /// A model script (default: the built-in script for the checkpoint's architecture).
        #[arg(long)]
        script: Option<String>,
        /// A Hugging Face model directory (with its sentence-transformers
        /// files, which set pooling, normalisation and length), a GGUF or a
        /// .mllm file; `hf://ORG/NAME` fetches it from the Hugging Face Hub.
        #[arg(long, short = 'm')]
        model: String,
        /// A text to embed (repeatable; each is one input).
        #[arg(long = "text", required_unless_present = "file")]
        texts: Vec<String>,
        /// A file with one input per line (- for standard input), after
        /// the --text inputs.
        #[arg(long, short = 'f')]
        file: Option<String>,
        /// How token rows become one vector: mean, cls, last, or none (a
        /// row per token) [default: the model's 1_Pooling/config.json; mean
        /// for encoders, last for decoders].
        #[arg(long)]
        pooling: Option<mllm_runtime::embeddings::Pooling>,
        /// Scale each embedding to unit length [default: true when the
        /// model's modules.json has a Normalize module or it has none].
        #[arg(long, value_name = "true|false")]
        normalize: Option<bool>,
        /// Cut inputs longer than the model takes (its max_seq_length or
        /// max_position_embeddings) instead of refusing them.
        #[arg(long)]
        truncate: bool,
        /// A named prompt of the model (config_sentence_transformers.json's
        /// `prompts`, e.g. `query`), put before every input.
        #[arg(long)]
        prompt_name: Option<String>,
        /// Keep the first N values of each embedding (Matryoshka models).
        #[arg(long, value_name = "N")]
        dimensions: Option<usize>,
        /// Print OpenAI's embeddings response ({"data": [{"index", "embedding"}], ...}).
        #[arg(long)]
        json: bool,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
    },
    /// Perplexity of a model over a text, by llama-perplexity's method (the
    /// text tokenized once, cut into --ctx-size chunks, the second half of
    /// each scored), and the KL divergence from a base model's run.
    Perplexity {
        /// A model script (default: the built-in script for the checkpoint's architecture).
        #[arg(long)]
        script: Option<String>,
        /// A GGUF or .mllm file, or a Hugging Face model directory. `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        /// The text (UTF-8; - for standard input); not needed with
        /// --kl-divergence, whose base file holds the tokens.
        #[arg(long, short = 'f', required_unless_present = "kl_divergence")]
        file: Option<String>,
        /// Tokens per chunk.
        #[arg(long = "ctx-size", short = 'c', default_value_t = 512)]
        ctx_size: usize,
        /// Score at most N chunks (default: all the text holds).
        #[arg(long, value_name = "N")]
        chunks: Option<usize>,
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        /// Without --kl-divergence: write this model's log-probabilities
        /// of the scored tokens to FILE. With it: read FILE and compare.
        #[arg(long, value_name = "FILE")]
        kl_divergence_base: Option<String>,
        /// Compare this model with the base file: mean KLD, top-token
        /// agreement, RMS of the change in the next token's probability.
        #[arg(long, requires = "kl_divergence_base")]
        kl_divergence: bool,
        /// Print {"ppl", "ppl_stderr", "chunks", "ctx"} (and the KL
        /// figures) as JSON instead of the final estimate's line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Print the token ids of a text (no special tokens added), or decode ids.
    Tokenize {
        /// The model whose tokenizer to use (GGUF, .mllm or HF directory). `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        /// The text to tokenize.
        #[arg(long, required_unless_present = "decode")]
        text: Option<String>,
        /// Comma-separated ids to turn back into text.
        #[arg(long)]
        decode: Option<String>,
    },
    /// Print the prompt a conversation renders to with the model's chat template.
    Template {
        /// The model whose chat template to use (GGUF, .mllm or HF directory). `hf://ORG/NAME[:QUANT]` fetches it from the Hugging Face Hub (`mllm pull`).
        #[arg(long, short = 'm')]
        model: String,
        /// A JSON list of {"role", "content"} messages.
        #[arg(long)]
        messages: String,
        /// Leave out the assistant header a generation would start from.
        #[arg(long)]
        no_generation_prompt: bool,
        /// Qwen3-style thinking switch passed to the chat template.
        #[arg(long)]
        enable_thinking: Option<bool>,
    },
    /// List the backends of this build and their devices (`--device N`).
    Devices,
    /// Run the op conformance suite on a backend against the CPU (NMSE per case).
    TestBackend {
        /// The backend under test.
        #[arg(long, default_value = "opencl")]
        backend: String,
        /// Its device, numbered as `mllm devices` lists them.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Only the cases of this op (e.g. `linear`, `sdpa`).
        #[arg(long)]
        op: Option<String>,
        /// One line per case, passed ones too.
        #[arg(long, short = 'v')]
        verbose: bool,
    },
    /// Turn images into a vision encoder's pixel_values and image_grid_thw (Qwen-VL).
    VisionPreprocess {
        /// Model directory with preprocessor_config.json (or config.json's vision_config), or `hf://ORG/NAME`.
        #[arg(long, short = 'm')]
        model: String,
        /// A PNG, JPEG or WebP file; repeat for several images (concatenated in order).
        #[arg(long = "image", required = true)]
        images: Vec<String>,
        /// The safetensors file to write.
        #[arg(long)]
        out: String,
    },
}
