//! The `mllm` binary: argument parsing only; the work is in `mllm_cli`.

use clap::{Parser, Subcommand};
use mllm_cli::commands;

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
        /// Worker threads (default: all cores).
        #[arg(long, short = 't')]
        threads: Option<usize>,
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
    let result = match cli.cmd {
        Cmd::Check { files } => commands::check::run(&files),
        Cmd::Exec {
            script,
            model,
            input_ids,
            logits_out,
            max_new_tokens,
            stop_at_eos,
            threads,
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
                }),
                Err(e) => Err(mllm_cli::CliError(format!("error: {e}"))),
            }
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
