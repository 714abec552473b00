//! `mllm embed --model PATH (--text T ... | --file F)`: one embedding per
//! input, printed as a line of numbers or, with `--json`, as OpenAI's
//! embeddings response.

use mllm_runtime::embeddings::{EmbedOptions, Embedder, Embeddings, Pooling};
use serde_json::json;

use crate::{CliError, CliResult};

pub struct EmbedArgs {
    pub model: String,
    pub script: Option<String>,
    pub texts: Vec<String>,
    pub file: Option<String>,
    pub pooling: Option<Pooling>,
    pub normalize: Option<bool>,
    pub truncate: bool,
    pub prompt_name: Option<String>,
    pub dimensions: Option<usize>,
    pub json: bool,
}

pub fn run(args: EmbedArgs) -> CliResult<()> {
    let mut texts = args.texts.clone();
    if let Some(f) = &args.file {
        texts.extend(read_lines(f)?);
    }
    if texts.is_empty() {
        return Err(CliError::invalid("nothing to embed: give --text TEXT (repeatable) or --file FILE (one input per line; - for standard input)"));
    }
    let mut embedder = Embedder::open(&args.model, args.script.as_deref())?;
    let opts = EmbedOptions {
        pooling: args.pooling,
        normalize: args.normalize,
        truncate: args.truncate,
        prompt_name: args.prompt_name.clone(),
        dimensions: args.dimensions,
    };
    let t0 = std::time::Instant::now();
    let out = embedder.embed(&texts, &opts)?;
    let secs = t0.elapsed().as_secs_f64();
    // What `mllm embed` is timed by (the model's load excluded), on stderr
    // as llama-embedding prints its timings.
    eprintln!(
        "embedded {} input{} ({} tokens) in {:.3} s: {:.1} inputs/s, {:.0} tokens/s",
        texts.len(),
        if texts.len() == 1 { "" } else { "s" },
        out.prompt_tokens,
        secs,
        texts.len() as f64 / secs.max(1e-9),
        out.prompt_tokens as f64 / secs.max(1e-9)
    );
    if args.json {
        println!("{}", openai_json(&out, &args.model));
    } else {
        for item in &out.items {
            for row in item {
                let line: Vec<String> = row.iter().map(|v| v.to_string()).collect();
                println!("{}", line.join(" "));
            }
        }
    }
    Ok(())
}

/// OpenAI's embeddings response (`--pooling none` gives each input a list
/// of token rows, as llama-server does).
pub fn openai_json(out: &Embeddings, model: &str) -> serde_json::Value {
    let data: Vec<serde_json::Value> = out
        .items
        .iter()
        .enumerate()
        .map(|(i, rows)| {
            let embedding = match rows.as_slice() {
                [one] if !out.per_token => json!(one),
                many => json!(many),
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens},
    })
}

/// The non-empty lines of `path` (`-`: standard input).
fn read_lines(path: &str) -> CliResult<Vec<String>> {
    use std::io::Read;
    let mut text = String::new();
    if path == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::invalid(format!("cannot read standard input: {e}")))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| CliError::invalid(format!("cannot read {path}: {e}")))?;
    }
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}
