//! `mllm chat`: a multi-turn terminal chat. The KV cache survives between
//! turns: each turn renders the whole conversation with the chat template,
//! and only the tokens after the longest prefix already in the cache are
//! computed. `/exit`, `/reset`, Ctrl-D end or restart; Ctrl-C stops an answer
//! mid-way, and at the prompt it exits. Images and videos (`--image` /
//! `--video` for the first message, `/image PATH` / `/video PATH` for the
//! next one) go to vision-language models; a conversation with either is
//! recomputed whole each turn (the cache cannot tell them apart by their
//! placeholder tokens). When the conversation outgrows the context, the
//! oldest turns are dropped (the system message stays), as Ollama does,
//! rather than llama.cpp's context shift: a shift keeps half-turns and
//! positions the template never rendered, while a dropped turn leaves a
//! conversation the template renders as it would any other, so the answer
//! is what the model would give that shorter chat. The cache is reused up
//! to the system message.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::commands::run::SamplingArgs;
use crate::engine::{generate_with, Engine, GenRequest};
use crate::model_files::{self, load_model};
use crate::prompt::{self, Message};
use crate::{CliError, CliResult};
use mllm_runtime::generation::StopReason;

pub struct ChatArgs {
    pub script: Option<String>,
    /// `-c`: tokens the conversation may hold (the model's own at most).
    pub ctx_size: Option<usize>,
    pub model: String,
    /// The vision tower of a GGUF `model` (`--mmproj`): llama.cpp's mmproj file.
    pub mmproj: Option<String>,
    pub system: Option<String>,
    /// Images shown with the first message.
    pub images: Vec<String>,
    /// Videos shown with the first message, and their frame rate.
    pub videos: Vec<String>,
    pub video_fps: Option<f64>,
    pub sampling: SamplingArgs,
    pub spec: crate::SpecFlags,
    pub load: model_files::LoadOptions,
}

/// Set while an answer streams; Ctrl-C then stops the answer instead of the program.
static GENERATING: AtomicBool = AtomicBool::new(false);

pub fn run(a: ChatArgs) -> CliResult<()> {
    let files = model_files::open_with_mmproj(&a.model, a.mmproj.as_deref(), a.load)?;
    let tok = files.tokenizer()?;
    if files.chat_template.is_none() {
        return Err(CliError::invalid(format!(
            "{} has no chat template; use `mllm run --raw` for plain completion",
            files.path.display()
        )));
    }
    let model = load_model(&files, a.script.as_deref())?;
    let context = super::run::context_size(a.ctx_size, files.max_context());
    let mut engine = Engine::new(model, context);
    engine.configure(&a.load)?;
    let mut speculator = a.spec.speculator(&files, a.load, context, &mut engine)?;
    // Each turn draws with its own seed (the given one plus the turn).
    let mut turn: u64 = 0;
    let interrupt = Arc::new(AtomicBool::new(false));
    {
        let interrupt = interrupt.clone();
        ctrlc::set_handler(move || {
            if GENERATING.load(Ordering::SeqCst) {
                interrupt.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .map_err(|e| CliError::invalid(format!("cannot install the Ctrl-C handler: {e}")))?;
    }
    let mut history: Vec<Message> = a.system.iter().map(|s| Message::new("system", s)).collect();
    // Images shown in each message of `history`, and the preprocessed images
    // of the messages that have some, in order.
    let mut shown: Vec<usize> = vec![0; history.len()];
    let mut shown_v: Vec<usize> = vec![0; history.len()];
    let mut pics: Vec<crate::images::Images> = vec![];
    let mut pending: Vec<String> = a.images.clone();
    let mut pending_v: Vec<String> = a.videos.clone();
    let mut spec: Option<crate::images::ImageTokens> = None;
    let vision = files.config.get("vision_config").is_some();
    let mut said_dropping = false;
    eprintln!(
        "chatting with {} — /help lists the commands, /exit or Ctrl-D quits, Ctrl-C stops an answer",
        files.path.display()
    );
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/help" | "/?" => {
                eprintln!("{}", help(vision));
                continue;
            }
            "/reset" => {
                history.retain(|m| m.role == "system");
                shown = vec![0; history.len()];
                shown_v = vec![0; history.len()];
                pics.clear();
                pending.clear();
                pending_v.clear();
                eprintln!("(conversation cleared)");
                continue;
            }
            l if (l.starts_with("/image ") || l.starts_with("/video ")) && !vision => {
                eprintln!(
                    "{} takes no images or videos (no vision tower){}",
                    files.path.display(),
                    if files.path.extension().is_some_and(|e| e == "gguf") {
                        "; a GGUF's vision tower is its mmproj file: start with --mmproj FILE"
                    } else {
                        ""
                    }
                );
                continue;
            }
            l if l.starts_with("/image ") => {
                pending.push(l["/image ".len()..].trim().to_string());
                eprintln!("(image attached to your next message)");
                continue;
            }
            l if l.starts_with("/video ") => {
                pending_v.push(l["/video ".len()..].trim().to_string());
                eprintln!("(video attached to your next message)");
                continue;
            }
            l if l.starts_with('/') && !l.contains(' ') => {
                eprintln!("unknown command {l}; /help lists them (a message that starts with / needs a space in it)");
                continue;
            }
            _ => {}
        }
        let mut added_pics = false;
        if !pending.is_empty() || !pending_v.is_empty() {
            let media = match pending.is_empty() {
                true => Ok(None),
                false => crate::images::from_files(&files, &pending).map(Some),
            }
            .and_then(|imgs| {
                mllm_runtime::videos::with_videos(&files, imgs, &pending_v, a.video_fps)
            });
            match media {
                Ok(Some((imgs, s))) => {
                    pics.push(imgs);
                    spec = Some(s);
                    added_pics = true;
                }
                Ok(None) => {}
                Err(e) => {
                    // A bad image or video loses nothing: the message is not sent.
                    eprintln!(
                        "{}\n(message not sent; attach them again with /image PATH or /video PATH)",
                        e.render(crate::color())
                    );
                    pending.clear();
                    pending_v.clear();
                    continue;
                }
            }
        }
        history.push(Message::new("user", line));
        shown.push(std::mem::take(&mut pending).len());
        shown_v.push(std::mem::take(&mut pending_v).len());
        let mut ids = render(&files, &history, &shown, &shown_v, &pics, &spec, &a)?;
        // Room for an answer: past it, the oldest turns make way.
        if let Some(ctx) = context {
            let room = a.sampling.max_new_tokens.min(ctx / 4).max(1);
            while ids.len() + room > ctx {
                let Some(first) = history.iter().position(|m| m.role != "system") else {
                    break;
                };
                // The turn being asked stays, whatever its length.
                if first + 1 >= history.len() {
                    break;
                }
                let mut n = 1;
                if history
                    .get(first + 1)
                    .is_some_and(|m| m.role == "assistant")
                {
                    n = 2;
                }
                for i in first..first + n {
                    if shown[i] > 0 || shown_v[i] > 0 {
                        let k = (0..i).filter(|&j| shown[j] > 0 || shown_v[j] > 0).count();
                        pics.remove(k);
                    }
                }
                history.drain(first..first + n);
                shown.drain(first..first + n);
                shown_v.drain(first..first + n);
                if !said_dropping {
                    eprintln!(
                        "(the conversation outgrew the context of {ctx} tokens: dropping its oldest turns, keeping the system message)"
                    );
                    said_dropping = true;
                }
                ids = render(&files, &history, &shown, &shown_v, &pics, &spec, &a)?;
            }
        }
        let batch = crate::images::concat(&pics)?;
        let mut gen = a.sampling.generation(&files, tok, turn)?;
        turn += 1;
        GENERATING.store(true, Ordering::SeqCst);
        let result = generate_with(
            &mut engine,
            &mut gen,
            GenRequest {
                prompt: &ids,
                images: batch.as_ref().zip(spec.as_ref()),
            },
            speculator.as_mut().map(|s| s.speculation()),
            &mut |s| {
                let _ = stdout.write_all(s.as_bytes());
                let _ = stdout.flush();
            },
            &interrupt,
        );
        GENERATING.store(false, Ordering::SeqCst);
        let stats = match result {
            Ok(s) => s,
            Err(e) => {
                // A turn that fails (e.g. the context is full) leaves the chat usable.
                history.pop();
                shown.pop();
                shown_v.pop();
                if added_pics {
                    pics.pop();
                }
                eprintln!("{}", e.render(crate::color()));
                continue;
            }
        };
        println!();
        if stats.reason == StopReason::Interrupted {
            eprintln!("(stopped)");
        }
        history.push(Message::new("assistant", &stats.text));
        shown.push(0);
        shown_v.push(0);
        eprintln!("[{}]", stats.summary(None));
        if let Some(s) = &speculator {
            eprintln!("[{} so far]", s.stats.summary());
        }
    }
}

/// The conversation's prompt ids, through the chat template (with its
/// images' placeholder tokens when it has images).
#[allow(clippy::too_many_arguments)]
fn render(
    files: &model_files::ModelFiles,
    history: &[Message],
    shown: &[usize],
    shown_v: &[usize],
    pics: &[crate::images::Images],
    spec: &Option<crate::images::ImageTokens>,
    a: &ChatArgs,
) -> CliResult<Vec<u32>> {
    let tok = files.tokenizer()?;
    let batch = crate::images::concat(pics)?;
    let text = match (&batch, spec) {
        (Some(imgs), Some(spec)) => {
            let turns: Vec<crate::images::Turn> = history
                .iter()
                .zip(shown.iter().zip(shown_v))
                .map(|(m, (&n, &v))| {
                    crate::images::Turn::new(&m.role, &m.content, n).with_videos(v)
                })
                .collect();
            crate::images::conversation_text(files, &turns, imgs, spec, a.sampling.enable_thinking)?
        }
        _ => prompt::render(files, history, true, a.sampling.enable_thinking)?,
    };
    Ok(tok.encode(&text, false)?)
}

/// What `/help` prints.
fn help(vision: bool) -> String {
    let mut h = String::from(
        "commands:\n  /help          this list\n  /reset         start over (the system message stays)\n  /exit, /quit   leave (Ctrl-D too)\n",
    );
    if vision {
        h.push_str("  /image PATH    attach an image to your next message\n  /video PATH    attach a video (frame directory or animated PNG/WebP)\n");
    }
    h.push_str("Ctrl-C stops an answer; at the prompt it leaves.");
    h
}
