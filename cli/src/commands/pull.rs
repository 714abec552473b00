//! `mllm pull REPO[:FILE_OR_QUANT]` and every `--model hf://...`: the files
//! a Hub reference needs, fetched into the Hugging Face cache (or found
//! there), as paths. The work is `mllm_hub`'s; this file says what happened.

use super::convert::human_bytes;
use crate::{CliError, CliResult};
use mllm_hub::{HubError, HubRef, Pulled, Settings};

/// Resolves a reference (with or without `hf://`), saying on standard error
/// what was downloaded and anything the user should know.
pub fn resolve(value: &str) -> CliResult<Pulled> {
    let reference = HubRef::parse(value).map_err(hub_error)?;
    let settings = Settings::from_env();
    let pulled = mllm_hub::pull(&reference, &settings).map_err(hub_error)?;
    for note in &pulled.notes {
        eprintln!("note: {note}");
    }
    if !pulled.downloaded.is_empty() {
        if settings.progress {
            // The last progress bar ends without a newline.
            eprintln!();
        }
        let bytes: u64 = pulled
            .downloaded
            .iter()
            .filter_map(|f| std::fs::metadata(pulled.snapshot.join(f)).ok())
            .map(|m| m.len())
            .sum();
        eprintln!(
            "{reference}: downloaded {} file{} ({}) into {}",
            pulled.downloaded.len(),
            if pulled.downloaded.len() == 1 {
                ""
            } else {
                "s"
            },
            human_bytes(bytes),
            pulled.snapshot.display()
        );
    }
    Ok(pulled)
}

/// A Hub failure under the runtime's kinds (what a script or exit code
/// can tell apart).
fn hub_error(e: HubError) -> CliError {
    use mllm_runtime::ErrorKind as K;
    let kind = match &e {
        HubError::BadReference { .. } | HubError::Ambiguous { .. } | HubError::Gated { .. } => {
            K::InvalidArgument
        }
        HubError::RepoNotFound { .. }
        | HubError::RevisionNotFound { .. }
        | HubError::FileNotFound { .. }
        | HubError::NoSuchFile { .. }
        | HubError::NotCached { .. }
        | HubError::FileNotCached { .. } => K::NotFound,
        HubError::SplitGguf { .. } | HubError::NothingToRun { .. } => K::Unsupported,
        HubError::MissingShard { .. } => K::Load,
        HubError::Unreachable { .. }
        | HubError::Damaged { .. }
        | HubError::Download { .. }
        | HubError::Cache { .. } => K::Io,
    };
    CliError::new(kind, e.to_string())
}

/// `mllm pull`: the model's path on the first line of standard output, its
/// mmproj's (if any) on the second, for scripts.
pub fn run(value: &str) -> CliResult<()> {
    let pulled = resolve(value)?;
    println!("{}", pulled.model.display());
    if let Some(m) = &pulled.mmproj {
        println!("{}", m.display());
    }
    if pulled.downloaded.is_empty() {
        eprintln!(
            "{}: all {} file{} already in the cache",
            HubRef::parse(value)
                .map(|r| r.to_string())
                .unwrap_or_default(),
            pulled.files.len(),
            if pulled.files.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// A model argument: a `hf://` reference becomes the cached path, and the
/// GGUF's mmproj fills `mmproj` when the command takes one and none was
/// given. Anything else is left as it is.
pub fn resolve_model_arg(model: &mut String, mmproj: Option<&mut Option<String>>) -> CliResult<()> {
    if !HubRef::is_hub(model) {
        return Ok(());
    }
    let pulled = resolve(model)?;
    *model = pulled.model.to_string_lossy().into_owned();
    if let (Some(slot @ None), Some(found)) = (mmproj, pulled.mmproj) {
        *slot = Some(found.to_string_lossy().into_owned());
    }
    Ok(())
}
