//! `mllm chat`: a multi-turn terminal chat. The KV cache survives between
//! turns: each turn renders the whole conversation with the chat template,
//! and only the tokens after the longest prefix already in the cache are
//! computed. `/exit`, `/reset`, Ctrl-D end or restart; Ctrl-C stops an answer
//! mid-way, and at the prompt it exits.

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
    pub system: Option<String>,
    pub sampling: SamplingArgs,
    pub load: model_files::LoadOptions,
}

/// Set while an answer streams; Ctrl-C then stops the answer instead of the program.
static GENERATING: AtomicBool = AtomicBool::new(false);

pub fn run(a: ChatArgs) -> CliResult<()> {
    let files = model_files::open_with(&a.model, a.load)?;
    let tok = files.tokenizer()?;
    if files.chat_template.is_none() {
        return Err(CliError(format!(
            "error: {} has no chat template; use `mllm run --raw` for plain completion",
            files.path.display()
        )));
    }
    let model = load_model(&files, a.script.as_deref())?;
    let mut engine = Engine::new(model, files.max_context());
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
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(Message::new("user", line));
        let text = prompt::render(&files, &history, true, a.sampling.enable_thinking)?;
        let ids = tok.encode(&text, false)?;
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
                images: None,
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
        eprintln!("[{}]", stats.summary(None));
    }
}
