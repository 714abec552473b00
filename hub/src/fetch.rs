//! From a reference to files in the cache: online (the Hub's revision
//! listing, then each missing file through hf-hub, checked against its
//! ETag) or offline (the cache's refs and snapshot alone).

use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError, ApiRepo};
use hf_hub::{Cache, Repo, RepoType};

use crate::select::{self, Plan, Target};
use crate::{HubError, HubRef, Settings};

/// A reference made into paths on disk.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The commit the files are from.
    pub commit: String,
    /// `$HF_HUB_CACHE/models--ORG--NAME/snapshots/COMMIT`.
    pub snapshot: PathBuf,
    /// What `--model` opens: the snapshot directory or one file in it.
    pub model: PathBuf,
    /// The vision tower GGUF beside a GGUF model, when the repository has one.
    pub mmproj: Option<PathBuf>,
    /// Every file of the plan (paths in the snapshot).
    pub files: Vec<PathBuf>,
    /// The files fetched now; the others were in the cache.
    pub downloaded: Vec<String>,
    /// Things the user should know (the type we chose, a cache fallback).
    pub notes: Vec<String>,
}

/// How many times a broken download resumes (from the bytes it has) before
/// giving up.
const RETRIES: usize = 3;

pub fn pull(r: &HubRef, s: &Settings) -> Result<Pulled, HubError> {
    if s.offline {
        return from_cache(r, s, None);
    }
    let api = ApiBuilder::from_cache(Cache::new(s.cache.clone()))
        .with_endpoint(s.endpoint.clone())
        .with_token(s.token.clone())
        .with_progress(s.progress)
        .with_retries(RETRIES)
        .with_user_agent("mllm", env!("CARGO_PKG_VERSION"))
        .build()
        .map_err(|e| HubError::Unreachable {
            repo: r.repo.clone(),
            endpoint: s.endpoint.clone(),
            detail: e.to_string(),
            cache: s.cache.clone(),
        })?;
    let api_repo = api.repo(Repo::with_revision(
        r.repo.clone(),
        RepoType::Model,
        r.revision.clone(),
    ));
    let info = match api_repo.info() {
        Ok(info) => info,
        Err(e) => {
            return match status(&e) {
                Some(401) => Err(HubError::RepoNotFound {
                    repo: r.repo.clone(),
                    endpoint: s.endpoint.clone(),
                    had_token: s.token.is_some(),
                }),
                Some(403) => Err(HubError::Gated {
                    repo: r.repo.clone(),
                    endpoint: s.endpoint.clone(),
                }),
                Some(404) => Err(HubError::RevisionNotFound {
                    repo: r.repo.clone(),
                    revision: r.revision.clone(),
                }),
                // No answer at all: what the cache has, as huggingface_hub
                // does when the network is down.
                _ => from_cache(r, s, Some(e.to_string())),
            };
        }
    };
    let listing: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let plan = select::plan(&r.repo, &listing, r.selector.as_deref())?;
    let snapshot = repo_dir(s, r).join("snapshots").join(&info.sha);
    let mut downloaded = vec![];
    for file in &plan.files {
        // Already there (fetched by us or by Python's huggingface_hub).
        if snapshot.join(file).is_file() {
            continue;
        }
        fetch_file(r, s, &api_repo, file, &snapshot)?;
        downloaded.push(file.clone());
    }
    let mut pulled = finish(r, &plan, info.sha, snapshot)?;
    pulled.downloaded = downloaded;
    Ok(pulled)
}

/// One file into the cache, checked: a blob whose ETag is its SHA-256 (LFS
/// files: the weights) or its git object id (small files) must hash to it.
fn fetch_file(
    r: &HubRef,
    s: &Settings,
    api: &ApiRepo,
    file: &str,
    snapshot: &Path,
) -> Result<(), HubError> {
    let got = api.download(file).map_err(|e| match status(&e) {
        // A gated repository lists its files to anyone; they need a token.
        Some(401) => HubError::RepoNotFound {
            repo: r.repo.clone(),
            endpoint: s.endpoint.clone(),
            had_token: s.token.is_some(),
        },
        Some(403) => HubError::Gated {
            repo: r.repo.clone(),
            endpoint: s.endpoint.clone(),
        },
        Some(code @ 404) => HubError::FileNotFound {
            repo: r.repo.clone(),
            file: file.to_string(),
            revision: r.revision.clone(),
            status: code,
        },
        _ => HubError::Download {
            repo: r.repo.clone(),
            file: file.to_string(),
            detail: format!("{e}; run again to resume it"),
        },
    })?;
    let damaged = |detail: String| HubError::Damaged {
        repo: r.repo.clone(),
        file: file.to_string(),
        detail,
    };
    let blob = std::fs::canonicalize(&got).map_err(|e| damaged(e.to_string()))?;
    if let Err(detail) = check_blob(&blob) {
        let _ = std::fs::remove_file(&blob);
        let _ = std::fs::remove_file(&got);
        return Err(damaged(detail));
    }
    if !snapshot.join(file).is_file() {
        // hf-hub filed it under the commit the Hub sent with the file.
        return Err(HubError::Download {
            repo: r.repo.clone(),
            file: file.to_string(),
            detail: format!(
                "the repository moved to another commit while downloading ({} is not under {}); run again",
                got.display(),
                snapshot.display()
            ),
        });
    }
    Ok(())
}

/// The blob's name is its ETag: 64 hex digits are the SHA-256 of the
/// content, 40 the git blob id (SHA-1 of `blob LEN\0` + content).
fn check_blob(blob: &Path) -> Result<(), String> {
    use ring::digest;
    let etag = blob
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let hex = |n: usize| etag.len() == n && etag.chars().all(|c| c.is_ascii_hexdigit());
    let (mut ctx, git) = if hex(64) {
        (digest::Context::new(&digest::SHA256), false)
    } else if hex(40) {
        (
            digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY),
            true,
        )
    } else {
        return Ok(());
    };
    let mut f = std::fs::File::open(blob).map_err(|e| e.to_string())?;
    if git {
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        ctx.update(format!("blob {len}\0").as_bytes());
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    let got: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got == etag {
        Ok(())
    } else {
        Err(format!(
            "its content hashes to {got}, the Hub's ETag is {etag}"
        ))
    }
}

/// The snapshot a revision points to in the cache, as huggingface_hub's
/// `local_files_only` reads it. `unreachable` says why the Hub was not asked
/// (None: HF_HUB_OFFLINE).
fn from_cache(r: &HubRef, s: &Settings, unreachable: Option<String>) -> Result<Pulled, HubError> {
    let dir = repo_dir(s, r);
    let missing = || match &unreachable {
        Some(detail) => HubError::Unreachable {
            repo: r.repo.clone(),
            endpoint: s.endpoint.clone(),
            detail: detail.clone(),
            cache: s.cache.clone(),
        },
        None => HubError::NotCached {
            repo: r.repo.clone(),
            revision: r.revision.clone(),
            cache: s.cache.clone(),
        },
    };
    let is_commit = r.revision.len() == 40 && r.revision.chars().all(|c| c.is_ascii_hexdigit());
    let commit = if is_commit {
        r.revision.clone()
    } else {
        match std::fs::read_to_string(dir.join("refs").join(&r.revision)) {
            Ok(c) => c.trim().to_string(),
            Err(_) => return Err(missing()),
        }
    };
    let snapshot = dir.join("snapshots").join(&commit);
    if !snapshot.is_dir() {
        return Err(missing());
    }
    let mut listing = vec![];
    list_files(&snapshot, "", &mut listing);
    listing.sort();
    let plan = select::plan(&r.repo, &listing, r.selector.as_deref())?;
    if let Some(file) = plan.files.iter().find(|f| !snapshot.join(f).is_file()) {
        return Err(match unreachable {
            Some(_) => missing(),
            None => HubError::FileNotCached {
                repo: r.repo.clone(),
                file: file.clone(),
                snapshot,
            },
        });
    }
    let mut pulled = finish(r, &plan, commit, snapshot)?;
    if let Some(detail) = unreachable {
        pulled.notes.push(format!(
            "cannot reach {} ({detail}); using the cached snapshot {}",
            s.endpoint, pulled.commit
        ));
    }
    Ok(pulled)
}

/// Files under `dir` (following the snapshot's links to blobs), as
/// repository paths.
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{prefix}{name}");
        let path = entry.path();
        if path.is_dir() {
            list_files(&path, &format!("{rel}/"), out);
        } else if path.is_file() {
            out.push(rel);
        }
    }
}

/// Paths for the plan, once every shard an index names is among its files.
fn finish(r: &HubRef, plan: &Plan, commit: String, snapshot: PathBuf) -> Result<Pulled, HubError> {
    for index in plan
        .files
        .iter()
        .filter(|f| f.ends_with(".safetensors.index.json"))
    {
        let text = std::fs::read_to_string(snapshot.join(index)).map_err(|e| HubError::Cache {
            path: snapshot.join(index),
            source: e,
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let folder = index.rsplit_once('/').map(|(d, _)| format!("{d}/"));
        let shards = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|v| v.as_str());
        for shard in shards {
            let path = format!("{}{shard}", folder.as_deref().unwrap_or(""));
            if !plan.files.contains(&path) {
                return Err(HubError::MissingShard {
                    repo: r.repo.clone(),
                    index: index.clone(),
                    shard: path,
                });
            }
        }
    }
    let model = match &plan.target {
        Target::Dir => snapshot.clone(),
        Target::File(f) => snapshot.join(f),
    };
    Ok(Pulled {
        commit,
        model,
        mmproj: plan.mmproj.as_ref().map(|m| snapshot.join(m)),
        files: plan.files.iter().map(|f| snapshot.join(f)).collect(),
        snapshot,
        downloaded: vec![],
        notes: plan.note.iter().cloned().collect(),
    })
}

/// `$cache/models--ORG--NAME`, huggingface_hub's folder for a model repo.
fn repo_dir(s: &Settings, r: &HubRef) -> PathBuf {
    s.cache
        .join(format!("models--{}", r.repo.replace('/', "--")))
}

/// The HTTP status of a failed request; None when no answer came.
fn status(e: &ApiError) -> Option<u16> {
    match e {
        ApiError::RequestError(inner) => match inner.as_ref() {
            ureq::Error::StatusCode(code) => Some(*code),
            _ => None,
        },
        ApiError::TooManyRetries(inner) => status(inner),
        _ => None,
    }
}
