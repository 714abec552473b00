//! The `mllm` binary: argument parsing only; the work is in `mllm_cli`.

mod args;

use args::{Cli, Cmd};
use clap::Parser;
use mllm_cli::commands;

fn main() {
    let cli = Cli::parse_from(llama_spellings(std::env::args_os()));
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

/// llama.cpp's two-letter `-np` (llama-server's `--parallel`), which clap
/// cannot declare as a short flag, as its long spelling.
fn llama_spellings(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some("-np") => "--parallel".into(),
        Some(s) if s.starts_with("-np=") => format!("--parallel={}", &s[4..]).into(),
        _ => a,
    })
    .collect()
}

/// Every model argument given as `hf://REPO[:FILE_OR_QUANT]` becomes the
/// path of its files in the Hugging Face cache (downloaded if missing), and
/// a GGUF's mmproj fills an empty `--mmproj`, before the command runs: the
/// commands themselves only see paths. (`serve` resolves its list itself.)
fn resolve_hub_models(cmd: &mut Cmd) -> mllm_cli::CliResult<()> {
    use commands::pull::resolve_model_arg;
    match cmd {
        Cmd::Exec { model, mmproj, .. }
        | Cmd::Run { model, mmproj, .. }
        | Cmd::Chat { model, mmproj, .. }
        | Cmd::Bench { model, mmproj, .. } => resolve_model_arg(model, Some(&mut mmproj.mmproj)),
        Cmd::Convert { src, mmproj, .. } => resolve_model_arg(src, Some(mmproj)),
        Cmd::Inspect { file, .. } => resolve_model_arg(file, None),
        Cmd::Graph { model, .. }
        | Cmd::Export { model, .. }
        | Cmd::Embed { model, .. }
        | Cmd::Perplexity { model, .. }
        | Cmd::Tokenize { model, .. }
        | Cmd::Template { model, .. }
        | Cmd::VisionPreprocess { model, .. } => resolve_model_arg(model, None),
        _ => Ok(()),
    }
}

/// The prompt of `run`: `-p TEXT`, `-p -` or `-f -` (standard input), or
/// `-f FILE`.
fn read_prompt(prompt: Option<String>, file: Option<String>) -> Result<String, String> {
    use std::io::Read;
    let from_stdin = || {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("cannot read the prompt from standard input: {e}"))?;
        Ok(s)
    };
    match (prompt, file) {
        (Some(p), _) if p == "-" => from_stdin(),
        (Some(p), _) => Ok(p),
        (None, Some(f)) if f == "-" => from_stdin(),
        (None, Some(f)) => {
            std::fs::read_to_string(&f).map_err(|e| format!("cannot read the prompt file {f}: {e}"))
        }
        (None, None) => {
            Err("give the prompt with -p TEXT or -f FILE (- for standard input)".into())
        }
    }
}

fn run(mut cli: Cli) -> i32 {
    if let Err(e) = mllm_runtime::devices::check_forced_isa() {
        eprintln!("{}", e.render(mllm_cli::color()));
        return 1;
    }
    if let Err(e) = resolve_hub_models(&mut cli.cmd) {
        eprintln!("{}", e.render(mllm_cli::color()));
        return 1;
    }
    let result = match cli.cmd {
        Cmd::Check { files } => commands::check::run(&files),
        Cmd::Pull { reference } => commands::pull::run(&reference),
        Cmd::Exec {
            script,
            model,
            mmproj,
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
                    mmproj: mmproj.mmproj,
                    input_ids: ids,
                    logits_out,
                    max_new_tokens,
                    stop_at_eos,
                    load: load.into(),
                    pixel_values,
                }),
                Err(e) => Err(mllm_cli::CliError::invalid(e.to_string())),
            }
        }
        Cmd::Run {
            script,
            model,
            mmproj,
            prompt,
            file,
            ctx_size,
            system,
            raw,
            images,
            videos,
            video_fps,
            sampling,
            spec,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            let prompt = match read_prompt(prompt, file) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return 2;
                }
            };
            commands::run::run(commands::run::RunArgs {
                script,
                ctx_size,
                model,
                mmproj: mmproj.mmproj,
                prompt,
                images,
                videos,
                video_fps,
                system,
                raw,
                sampling,
                spec,
                load: load.into(),
            })
        }
        Cmd::Chat {
            script,
            model,
            mmproj,
            system,
            ctx_size,
            images,
            videos,
            video_fps,
            sampling,
            spec,
            threads,
            load,
        } => {
            mllm_cli::set_threads(threads);
            commands::chat::run(commands::chat::ChatArgs {
                script,
                ctx_size,
                model,
                mmproj: mmproj.mmproj,
                system,
                images,
                videos,
                video_fps,
                sampling,
                spec,
                load: load.into(),
            })
        }
        Cmd::Serve {
            model,
            mmproj,
            embedding,
            rerank,
            script,
            host,
            port,
            parallel,
            ctx_size,
            queue,
            cache_ram,
            api_key,
            api_key_file,
            allowed_local_media_path,
            allowed_host,
            cors_origin,
            ssl_cert_file,
            ssl_key_file,
            shutdown_grace,
            log_format,
            reasoning_format,
            no_webui,
            threads,
            load,
            spec,
        } => {
            mllm_cli::set_threads(threads);
            let load: mllm_runtime::model_files::LoadOptions = load.into();
            let spec = match spec.settings(&load.backend) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{}", e.render(mllm_cli::color()));
                    return 2;
                }
            };
            let mut models: Vec<_> = model
                .iter()
                .map(|m| mllm_server::ModelSpec::parse(m))
                .collect();
            if let Err(e) = mllm_server::ModelSpec::attach_mmproj(&mut models, &mmproj)
                .and_then(|_| mllm_server::ModelSpec::attach_role(&mut models, &embedding, false))
                .and_then(|_| mllm_server::ModelSpec::attach_role(&mut models, &rerank, true))
            {
                eprintln!("error: {e}");
                return 2;
            }
            // `hf://ORG/NAME:TYPE` is served as `NAME:TYPE` (or NAME=hf://...).
            for spec in &mut models {
                let mmproj = spec.mmproj.is_none().then_some(&mut spec.mmproj);
                if let Err(e) = commands::pull::resolve_model_arg(&mut spec.path, mmproj) {
                    eprintln!("{}", e.render(mllm_cli::color()));
                    return 1;
                }
            }
            let keys =
                mllm_server::security::ApiKeys::new(api_key.as_deref(), api_key_file.as_deref());
            let tls = mllm_server::tls::TlsFiles::from_flags(ssl_cert_file, ssl_key_file);
            let (api_keys, tls) = match (keys, tls) {
                (Ok(k), Ok(t)) => (k, t),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("error: {e}");
                    return 2;
                }
            };
            commands::serve::run(mllm_server::ServerConfig {
                models,
                script,
                host,
                port,
                parallel,
                ctx_size,
                queue,
                cache_ram_mib: cache_ram.unwrap_or_else(mllm_server::worker::default_budget_mib),
                api_keys,
                allowed_local_media: allowed_local_media_path,
                allowed_hosts: allowed_host,
                cors_origins: cors_origin,
                tls,
                load,
                shutdown_grace,
                log_format,
                split_reasoning: reasoning_format == "deepseek",
                webui: !no_webui,
                spec,
            })
        }
        Cmd::Convert {
            src,
            out,
            mmproj,
            ty,
            recipe,
            verify,
            threads,
        } => {
            mllm_cli::set_threads(threads);
            commands::convert::run(
                &src,
                mmproj.as_deref(),
                &out,
                &ty,
                recipe.as_deref(),
                verify,
            )
        }
        Cmd::Inspect {
            file,
            json,
            backend,
            device,
        } => commands::inspect::run(&file, json, backend.as_deref().map(|b| (b, device))),
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
            check,
        } => commands::export::run(commands::export::ExportArgs {
            script,
            model,
            format,
            seq,
            context,
            no_cache,
            quant,
            target,
            out: out.clone(),
        })
        .and_then(|_| {
            if check {
                eprintln!("{}", commands::export::check(&out)?);
            } else {
                eprintln!("not checked: --check loads the graph in onnxruntime");
            }
            Ok(())
        }),
        Cmd::Bench {
            script,
            model,
            mmproj,
            n_prompt,
            n_gen,
            depth,
            repetitions,
            threads,
            json,
            load,
            image_size,
            batch,
            spec,
            prompt_file,
        } => {
            mllm_cli::set_threads(threads);
            let threads = threads.unwrap_or_else(rayon::current_num_threads);
            commands::bench::run(commands::bench::BenchArgs {
                script,
                model,
                mmproj: mmproj.mmproj,
                prompt: n_prompt,
                gen: n_gen,
                depth,
                reps: repetitions,
                threads,
                json,
                load: load.into(),
                image_size,
                batch,
                spec,
                prompt_file,
            })
        }
        Cmd::RandomCheckpoint {
            preset,
            out,
            dtype,
            seed,
            layers,
            layout,
        } => commands::random_checkpoint::run(&preset, &out, &dtype, seed, layers, &layout),
        Cmd::Embed {
            script,
            model,
            texts,
            file,
            pooling,
            normalize,
            truncate,
            prompt_name,
            dimensions,
            json,
            threads,
        } => {
            mllm_cli::set_threads(threads);
            commands::embed::run(commands::embed::EmbedArgs {
                model,
                script,
                texts,
                file,
                pooling,
                normalize,
                truncate,
                prompt_name,
                dimensions,
                json,
            })
        }
        Cmd::Perplexity {
            script,
            model,
            file,
            ctx_size,
            chunks,
            threads,
            kl_divergence_base,
            kl_divergence,
            json,
            load,
        } => {
            mllm_cli::set_threads(threads);
            commands::perplexity::run(commands::perplexity::PplArgs {
                load: load.into(),
                model,
                script,
                file,
                ctx: ctx_size,
                chunks,
                kl_base: kl_divergence_base,
                kl: kl_divergence,
                json,
            })
        }
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
            eprintln!("{}", e.render(mllm_cli::color()));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand, flag and argument says what it is for in `--help`.
    #[test]
    fn every_flag_and_argument_has_help() {
        let cli = super::Cli::command();
        let mut missing = vec![];
        for sub in cli.get_subcommands() {
            if sub.get_about().is_none() {
                missing.push(format!("mllm {}", sub.get_name()));
            }
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("mllm {} {id}", sub.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    /// `-np N` is `--parallel N`; nothing else is rewritten.
    #[test]
    fn np_is_parallel() {
        let args = ["mllm", "serve", "-np", "2", "-np=3", "-n", "-p"].map(std::ffi::OsString::from);
        let out = super::llama_spellings(args.into_iter());
        assert_eq!(
            out,
            [
                "mllm",
                "serve",
                "--parallel",
                "2",
                "--parallel=3",
                "-n",
                "-p"
            ]
        );
    }
}
