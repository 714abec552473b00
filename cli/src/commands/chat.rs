//! `mllm chat`: a multi-turn terminal chat. The KV cache survives between
//! turns: each turn renders the whole conversation with the chat template,
//! and only the tokens after the longest prefix already in the cache are
//! computed. `/exit`, `/reset`, Ctrl-D end or restart; Ctrl-C stops an answer
//! mid-way, and at the prompt it exits. Images and videos (`--image` /
//! `--video` for the first message, `/image PATH` / `/video PATH` for the
//! next one) go to vision-language models; a conversation with either is
//! recomputed whole each turn (the cache cannot tell them apart by their
//! placeholder tokens).

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::commands::run::SamplingArgs;
use crate::engine::{generate, Engine, GenRequest, StopReason};
use crate::model_files::{self, load_model};
use crate::prompt::{self, Message};
use crate::{CliError, CliResult};

pub struct ChatArgs {
    pub script: Option<String>,
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
    pub load: model_files::LoadOptions,
}

/// Set while an answer streams; Ctrl-C then stops the answer instead of the program.
static GENERATING: AtomicBool = AtomicBool::new(false);

pub fn run(a: ChatArgs) -> CliResult<()> {
    let files = model_files::open_with_mmproj(&a.model, a.mmproj.as_deref(), a.load)?;
    let tok = files.tokenizer()?;
    if files.chat_template.is_none() {
        return Err(CliError(format!(
            "error: {} has no chat template; use `mllm run --raw` for plain completion",
            files.path.display()
        )));
    }
    let model = load_model(&files, a.script.as_deref())?;
    let mut engine = Engine::new(model, files.max_context());
    engine.configure(&a.load)?;
    let mut sampler = a.sampling.sampler();
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
        .map_err(|e| CliError(format!("error: cannot install the Ctrl-C handler: {e}")))?;
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
    eprintln!(
        "chatting with {} — /exit or Ctrl-D to quit, /reset to start over, Ctrl-C stops an answer",
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
                        e.0
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
        let batch = crate::images::concat(&pics)?;
        let ids = match (&batch, &spec) {
            (Some(imgs), Some(spec)) => {
                let turns: Vec<crate::images::Turn> = history
                    .iter()
                    .zip(shown.iter().zip(&shown_v))
                    .map(|(m, (&n, &v))| {
                        crate::images::Turn::new(&m.role, &m.content, n).with_videos(v)
                    })
                    .collect();
                let text = crate::images::conversation_text(
                    &files,
                    &turns,
                    imgs,
                    spec,
                    a.sampling.enable_thinking,
                )?;
                tok.encode(&text, false)?
            }
            _ => {
                let text = prompt::render(&files, &history, true, a.sampling.enable_thinking)?;
                tok.encode(&text, false)?
            }
        };
        let mut dec = tok.stream_decoder(true);
        GENERATING.store(true, Ordering::SeqCst);
        let result = generate(
            &mut engine,
            &mut sampler,
            GenRequest {
                prompt: &ids,
                max_new_tokens: a.sampling.max_new_tokens,
                eos: &files.eos,
                stops: a.sampling.stop.clone(),
                images: batch.as_ref().zip(spec.as_ref()),
            },
            &mut |t| Ok(dec.step(t)?),
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
                eprintln!("{}", e.0);
                continue;
            }
        };
        let tail = dec.flush();
        let _ = write!(stdout, "{tail}");
        println!();
        if stats.reason == StopReason::Interrupted {
            eprintln!("(stopped)");
        }
        history.push(Message::new("assistant", format!("{}{tail}", stats.text)));
        shown.push(0);
        shown_v.push(0);
        eprintln!("[{}]", stats.summary(None));
    }
}
