//! `mllm run [SCRIPT] --model PATH --prompt TEXT`: one answer, streamed,
//! then a one-line summary on stderr.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use mllm_runtime::generation::{
    clock_seed, ConstraintSpec, Generation, GenerationConfig, SamplerConfig, DEFAULT_MAX_TOKENS,
};
use mllm_runtime::tokenizer::Tokenizer;

use crate::engine::{generate_with, Engine, GenRequest};
use crate::model_files::{self, load_model};
use crate::prompt::{self, Message};
use crate::{CliError, CliResult};

/// Sampling and stopping flags shared by `run` and `chat` (names as llama.cpp's).
#[derive(Clone, Debug, clap::Args)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy (the same answer every time).
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.temperature)]
    pub temp: f32,
    /// Sample among the K most likely tokens only (0: all).
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.top_k)]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities add up to P.
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.top_p)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one.
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.min_p)]
    pub min_p: f32,
    /// Divides the logits of tokens among the last --repeat-last-n (1: off).
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.repeat_penalty)]
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.repeat_last_n)]
    pub repeat_last_n: usize,
    /// Subtracted from the logit of every token among the last
    /// `--repeat-last-n` (OpenAI's presence penalty).
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.presence_penalty)]
    pub presence_penalty: f32,
    /// Subtracted once per time a token appears among the last
    /// `--repeat-last-n` (OpenAI's frequency penalty).
    #[arg(long, default_value_t = SamplerConfig::DEFAULT.frequency_penalty)]
    pub frequency_penalty: f32,
    /// Random seed (default: from the clock); the same seed gives the same text.
    #[arg(long, short = 's')]
    pub seed: Option<u64>,
    /// Most tokens to generate per answer.
    #[arg(long, short = 'n', default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_new_tokens: usize,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Never end at the model's end-of-sequence token (it is masked, as
    /// llama.cpp's `--ignore-eos`): the answer runs to `-n` tokens or a
    /// stop string, as benchmarks of a fixed length need.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Qwen3-style thinking switch passed to the chat template.
    #[arg(long)]
    pub enable_thinking: Option<bool>,
    /// The answer follows this JSON Schema: a file, or the schema itself
    /// when it starts with `{`.
    #[arg(long, short = 'j', value_name = "FILE_OR_JSON")]
    pub json_schema: Option<String>,
    /// The answer follows this grammar: llama.cpp's GBNF (`root ::= ...`),
    /// or llguidance's Lark for a `.lark` file.
    #[arg(long, value_name = "FILE")]
    pub grammar_file: Option<String>,
    /// The answer is one JSON object (any keys).
    #[arg(long)]
    pub json: bool,
}

impl SamplingArgs {
    /// The answer's generation: sampler, limits and stops from the flags,
    /// constrained by `--json-schema`, `--grammar-file` or `--json`.
    pub fn generation<'t>(
        &self,
        files: &model_files::ModelFiles,
        tok: &'t Tokenizer,
        offset: u64,
    ) -> CliResult<Generation<'t>> {
        let mut gen = Generation::new(
            self.generation_config(files, offset),
            Box::new(tok.stream_decoder(true)),
        );
        if let Some(spec) = self.constraint_spec()? {
            let c = files
                .constraint(&spec)
                .map_err(|e| CliError::invalid(e.to_string()))?;
            gen.add_processor(Box::new(c));
        }
        Ok(gen)
    }

    /// What `--json-schema`, `--grammar-file` and `--json` ask (one at most).
    pub fn constraint_spec(&self) -> CliResult<Option<ConstraintSpec>> {
        let given = [
            self.json_schema.is_some(),
            self.grammar_file.is_some(),
            self.json,
        ];
        if given.iter().filter(|&&g| g).count() > 1 {
            return Err(CliError::invalid(
                "--json-schema, --grammar-file and --json each constrain the answer; give one",
            ));
        }
        if self.json {
            return Ok(Some(ConstraintSpec::JsonObject));
        }
        if let Some(arg) = &self.json_schema {
            let (text, origin) = if arg.trim_start().starts_with('{') {
                (arg.clone(), "the --json-schema text".to_string())
            } else {
                let text = std::fs::read_to_string(arg).map_err(|e| {
                    CliError::invalid(format!("cannot read the JSON schema file {arg}: {e} (give a file, or the schema itself starting with `{{`)"
                    ))
                })?;
                (text, arg.clone())
            };
            let schema = serde_json::from_str(&text)
                .map_err(|e| CliError::invalid(format!("{origin} is not valid JSON: {e}")))?;
            return Ok(Some(ConstraintSpec::JsonSchema(schema)));
        }
        if let Some(path) = &self.grammar_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::invalid(format!("cannot read the grammar file {path}: {e}"))
            })?;
            return Ok(Some(if path.ends_with(".lark") {
                ConstraintSpec::Lark(text)
            } else {
                ConstraintSpec::Gbnf(text)
            }));
        }
        Ok(None)
    }

    /// What an answer from `files`' model is asked, its seed `offset`
    /// past the given one (a chat's turns draw differently).
    pub fn generation_config(
        &self,
        files: &model_files::ModelFiles,
        offset: u64,
    ) -> GenerationConfig {
        let seed = self.seed.unwrap_or_else(clock_seed).wrapping_add(offset);
        let sampler = SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
        };
        let mut cfg = files.generation_config(sampler, self.max_new_tokens, self.stop.clone());
        cfg.ignore_eos = self.ignore_eos;
        cfg
    }
}

pub struct RunArgs {
    pub script: Option<String>,
    /// `-c`: tokens the conversation may hold (the model's own at most).
    pub ctx_size: Option<usize>,
    pub model: String,
    /// The vision tower of a GGUF `model` (`--mmproj`): llama.cpp's mmproj file.
    pub mmproj: Option<String>,
    pub prompt: String,
    /// Image files shown with the prompt, in order (vision-language models).
    pub images: Vec<String>,
    /// Videos (frame directories or animated PNG/WebP files), after the images.
    pub videos: Vec<String>,
    /// The videos' frame rate (default: an animation's own, else 24).
    pub video_fps: Option<f64>,
    pub system: Option<String>,
    pub raw: bool,
    pub sampling: SamplingArgs,
    pub spec: crate::SpecFlags,
    pub load: model_files::LoadOptions,
}

pub fn run(a: RunArgs) -> CliResult<()> {
    if a.spec.requested() {
        mllm_runtime::speculative::check_backend(&a.load.backend)?;
    }
    if let Some(vendor) = a.load.backend.npu() {
        return super::run_npu::run(&a, vendor);
    }
    let t0 = Instant::now();
    let files = model_files::open_with_mmproj(&a.model, a.mmproj.as_deref(), a.load)?;
    let tok = files.tokenizer()?;
    let model = load_model(&files, a.script.as_deref())?;
    let load_secs = t0.elapsed().as_secs_f64();
    let images = if a.images.is_empty() {
        None
    } else {
        Some(crate::images::from_files(&files, &a.images)?)
    };
    let images = mllm_runtime::videos::with_videos(&files, images, &a.videos, a.video_fps)?;
    let ids = if let Some((imgs, spec)) = &images {
        let text = crate::images::prompt_text(
            &files,
            a.system.as_deref(),
            &a.prompt,
            imgs,
            spec,
            a.raw,
            a.sampling.enable_thinking,
        )?;
        tok.encode(&text, false)?
    } else {
        text_prompt_ids(&files, tok, &a)?
    };
    let context = context_size(a.ctx_size, files.max_context());
    if let Some(c) = context {
        if ids.len() >= c {
            return Err(CliError::invalid(format!("the prompt has {} tokens but the context is {c} tokens (and at least one must be left to answer); shorten the prompt{}",
                ids.len(),
                if a.ctx_size.is_some() { " or raise -c" } else { "" }
            )));
        }
    }
    let mut engine = Engine::new(model, context);
    engine.configure(&a.load)?;
    let mut spec = a.spec.speculator(&files, a.load, context, &mut engine)?;
    let mut gen = a.sampling.generation(&files, tok, 0)?;
    let stdout = std::io::stdout();
    let interrupt = Arc::new(AtomicBool::new(false));
    let stats = generate_with(
        &mut engine,
        &mut gen,
        GenRequest {
            prompt: &ids,
            images: images.as_ref().map(|(i, s)| (i, s)),
        },
        spec.as_mut().map(|s| s.speculation()),
        &mut |s| {
            let mut lock = stdout.lock();
            let _ = lock.write_all(s.as_bytes());
            let _ = lock.flush();
        },
        &interrupt,
    )?;
    println!();
    eprintln!("{}", stats.summary(Some(load_secs)));
    if let Some(s) = &spec {
        eprintln!("{}", s.stats.summary());
    }
    Ok(())
}

/// The context a run or chat works in: `-c` within the model's own (said
/// on stderr when `-c` asks for more), else the model's.
pub fn context_size(asked: Option<usize>, model: Option<usize>) -> Option<usize> {
    match (asked, model) {
        (Some(c), Some(m)) if c > m => {
            eprintln!("note: -c {c} is more than the model's context ({m} tokens); using {m}");
            Some(m)
        }
        (Some(c), _) => Some(c),
        (None, m) => m,
    }
}

/// A text-only prompt's ids: through the chat template (with `--system`),
/// or as plain text with `--raw` or when the model has no template (said
/// once on stderr). `run_npu` shares it.
pub(crate) fn text_prompt_ids(
    files: &model_files::ModelFiles,
    tok: &Tokenizer,
    a: &RunArgs,
) -> CliResult<Vec<u32>> {
    if a.raw || files.chat_template.is_none() {
        if !a.raw {
            eprintln!(
                "note: {} has no chat template; sending the prompt as plain text",
                files.path.display()
            );
        }
        return Ok(tok.encode(&a.prompt, true)?);
    }
    let mut msgs = vec![];
    if let Some(s) = &a.system {
        msgs.push(Message::new("system", s));
    }
    msgs.push(Message::new("user", &a.prompt));
    let text = prompt::render(files, &msgs, true, a.sampling.enable_thinking)?;
    Ok(tok.encode(&text, false)?)
}
