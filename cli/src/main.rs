//! The `mllm` binary: argument parsing only; the work is in `mllm_cli`.

use clap::{Parser, Subcommand};
use mllm_cli::commands;
use mllm_cli::commands::run::SamplingArgs;

#[derive(Parser)]
#[command(
    name = "mllm",
    version,
    about = "Run multimodal LLMs written as .mdl scripts"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse and check scripts; print every diagnostic.
    Check {
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Run a script on a Hugging Face checkpoint directory with given token ids.
    Exec {
        /// The model script (a path, or a built-in name such as `qwen3`).
        script: String,
        /// Model directory: config.json and *.safetensors.
        #[arg(long)]
        model: String,
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
        /// A GGUF file or a Hugging Face model directory.
        #[arg(long, short = 'm')]
        model: String,
        #[arg(long, short = 'p')]
        prompt: String,
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
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Multi-turn chat in the terminal.
    Chat {
        script: Option<String>,
        #[arg(long, short = 'm')]
        model: String,
        #[arg(long)]
        system: Option<String>,
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
        /// A script that overrides the one each model's architecture picks.
        #[arg(long)]
        script: Option<String>,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// 0 picks a free port (printed on stderr).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Slots per model: requests that run at once.
        #[arg(long, short = 'p', default_value_t = 4)]
        parallel: usize,
        /// Tokens per slot (default: the model's context, at most 4096).
        #[arg(long, short = 'c')]
        ctx_size: Option<usize>,
        /// Requests that may wait for a slot, per model; more get 503.
        #[arg(long, default_value_t = 64)]
        queue: usize,
        /// Require `Authorization: Bearer KEY` (all endpoints but /health).
        #[arg(long)]
        api_key: Option<String>,
        /// Seconds running answers get to finish after SIGINT/SIGTERM.
        #[arg(long, default_value_t = 30)]
        shutdown_grace: u64,
        #[arg(long, short = 't')]
        threads: Option<usize>,
        #[command(flatten)]
        load: mllm_cli::LoadFlags,
    },
    /// Convert a checkpoint (HF directory, PyTorch .bin/.pt, GGUF) to one self-contained .mllm file.
    Convert {
        /// HF dir (safetensors or pytorch_model.bin), a .safetensors/PyTorch file with config.json beside it, or a GGUF file.
        src: String,
        /// The .mllm to write (written as .OUT.tmp-PID beside it, renamed when complete).
        out: String,
        /// f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k
        #[arg(long = "type", short = 'q', default_value = "f16")]
        ty: String,
        /// Rules file: `PATTERN TYPE` per line, first match wins, placed before the type's defaults.
        #[arg(long)]
        recipe: Option<String>,
        /// Re-read the written file and check every tensor checksum.
        #[arg(long)]
        verify: bool,
        #[arg(long, short = 't')]
        threads: Option<usize>,
    },
    /// Show metadata and tensors of a .mllm, GGUF, safetensors (file or dir) or PyTorch checkpoint.
    Inspect {
        file: String,
        #[arg(long)]
        json: bool,
    },
    /// Measure prefill (pp) and decode (tg) throughput, like llama-bench.
    Bench {
        script: Option<String>,
        #[arg(long, short = 'm')]
        model: String,
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
    },
    /// Capture a script's forward as a static graph and print it as text.
    Graph {
        /// The model script (a path, or a built-in name such as `qwen3`).
        script: String,
        /// A Hugging Face directory, GGUF or .mllm file.
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
        /// A Hugging Face directory, GGUF or .mllm file.
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
        /// Who the graph is shaped for (`generic`: standard ONNX).
        #[arg(long, default_value = "generic")]
        target: String,
        /// The directory to write model.onnx, model.onnx.data and io.json into.
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Write a Hugging Face directory with random weights and a real architecture's sizes.
    RandomCheckpoint {
        /// qwen3-0.6b, qwen3-1.7b, smollm2-135m, llama-3.2-1b, qwen3-vl-2b,
        /// qwen3-30b-a3b, smollm3-3b, gemma3-1b, qwen3.5-0.8b,
        /// qwen3.5-35b-a3b, qwen3-vl-30b-a3b or deepseek-ocr2.
        #[arg(long)]
        preset: String,
        #[arg(long)]
        out: String,
        /// bf16, f16 or f32.
        #[arg(long, default_value = "bf16")]
        dtype: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Override the number of layers (small models with real widths).
        #[arg(long)]
        layers: Option<u64>,
    },
    /// Print the token ids of a text (no special tokens added), or decode ids.
    Tokenize {
        #[arg(long, short = 'm')]
        model: String,
        #[arg(long, required_unless_present = "decode")]
        text: Option<String>,
        /// Comma-separated ids to turn back into text.
        #[arg(long)]
        decode: Option<String>,
    },
    /// Print the prompt a conversation renders to with the model's chat template.
    Template {
        #[arg(long, short = 'm')]
        model: String,
        /// A JSON list of {"role", "content"} messages.
        #[arg(long)]
        messages: String,
        #[arg(long)]
        no_generation_prompt: bool,
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
        /// Model directory with preprocessor_config.json (or config.json's vision_config).
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

fn main() {
    let cli = Cli::parse();
    // The evaluator and checker recurse over script structure (bounded by
    // their depth limits); give them a roomy stack on every platform.
    let worker = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || run(cli));
    let code = match worker.map(|h| h.join()) {
        Ok(Ok(code)) => code,
        _ => 101,
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> i32 {
    if let Err(e) = mllm_backends::cpu::qlinear::Isa::forced() {
        eprintln!("error: {e}");
        return 1;
    }
    let result = match cli.cmd {
        Cmd::Check { files } => commands::check::run(&files),
        Cmd::Exec {
            script,
            model,
            input_ids,
            logits_out,
            max_new_tokens,
            stop_at_eos,
            pixel_values,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            match commands::exec::parse_ids(&input_ids) {
                Ok(ids) => commands::exec::run(commands::exec::ExecArgs {
                    script,
                    model,
                    input_ids: ids,
                    logits_out,
                    max_new_tokens,
                    stop_at_eos,
                    load: load.into(),
                    pixel_values,
                }),
                Err(e) => Err(mllm_cli::CliError(format!("error: {e}"))),
            }
        }
        Cmd::Run {
            script,
            model,
            prompt,
            system,
            raw,
            images,
            videos,
            video_fps,
            sampling,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            commands::run::run(commands::run::RunArgs {
                script,
                model,
                prompt,
                images,
                videos,
                video_fps,
                system,
                raw,
                sampling,
                load: load.into(),
            })
        }
        Cmd::Chat {
            script,
            model,
            system,
            images,
            videos,
            video_fps,
            sampling,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            commands::chat::run(commands::chat::ChatArgs {
                script,
                model,
                system,
                images,
                videos,
                video_fps,
                sampling,
                load: load.into(),
            })
        }
        Cmd::Serve {
            model,
            script,
            host,
            port,
            parallel,
            ctx_size,
            queue,
            api_key,
            shutdown_grace,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            commands::serve::run(mllm_server::ServerConfig {
                models: model
                    .iter()
                    .map(|m| mllm_server::ModelSpec::parse(m))
                    .collect(),
                script,
                host,
                port,
                parallel,
                ctx_size,
                queue,
                api_key,
                load: load.into(),
                shutdown_grace,
            })
        }
        Cmd::Convert {
            src,
            out,
            ty,
            recipe,
            verify,
            threads,
        } => {
            mllm_cli::set_threads(threads);
            commands::convert::run(&src, &out, &ty, recipe.as_deref(), verify)
        }
        Cmd::Inspect { file, json } => commands::inspect::run(&file, json),
        Cmd::Graph {
            script,
            model,
            seq,
            context,
            passes,
            out,
        } => commands::graph::run(commands::graph::GraphArgs {
            script,
            model,
            seq,
            context,
            passes,
            out,
        }),
        Cmd::Export {
            script,
            model,
            format,
            seq,
            context,
            no_cache,
            quant,
            target,
            out,
        } => commands::export::run(commands::export::ExportArgs {
            script,
            model,
            format,
            seq,
            context,
            no_cache,
            quant,
            target,
            out,
        })
        .map(|_| ()),
        Cmd::Bench {
            script,
            model,
            n_prompt,
            n_gen,
            depth,
            repetitions,
            threads,
            json,
            load,
            image_size,
            batch,
        } => {
            mllm_cli::set_threads(threads);
            let threads = threads.unwrap_or_else(rayon::current_num_threads);
            commands::bench::run(commands::bench::BenchArgs {
                script,
                model,
                prompt: n_prompt,
                gen: n_gen,
                depth,
                reps: repetitions,
                threads,
                json,
                load: load.into(),
                image_size,
                batch,
            })
        }
        Cmd::RandomCheckpoint {
            preset,
            out,
            dtype,
            seed,
            layers,
        } => commands::random_checkpoint::run(&preset, &out, &dtype, seed, layers),
        Cmd::Tokenize {
            model,
            text,
            decode,
        } => commands::tokenize::run(&model, text.as_deref(), decode.as_deref()),
        Cmd::Template {
            model,
            messages,
            no_generation_prompt,
            enable_thinking,
        } => commands::template::run(&model, &messages, !no_generation_prompt, enable_thinking),
        Cmd::Devices => commands::devices::run(),
        Cmd::TestBackend {
            backend,
            device,
            op,
            verbose,
        } => commands::test_backend::run(&backend, device, op.as_deref(), verbose),
        Cmd::VisionPreprocess { model, images, out } => {
            commands::vision_preprocess::run(&model, &images, &out)
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}", e.0);
            1
        }
    }
}
