//! Which files of a repository a reference needs: a whole Hugging Face
//! model directory (config, tokenizer, every safetensors shard), or one GGUF
//! file picked by name or quantization tag, with the `mmproj` vision tower
//! beside it. Pure: it reads a listing, so the online and offline paths
//! choose alike.

use crate::HubError;

/// What `--model` should open once the files are in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The snapshot directory (a Hugging Face model directory).
    Dir,
    /// One file in the snapshot.
    File(String),
}

/// The files to fetch and what they make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub files: Vec<String>,
    pub target: Target,
    /// The vision tower GGUF that goes with a GGUF model, if the repository
    /// has one.
    pub mmproj: Option<String>,
    /// Said to the user when the choice was ours (no tag given).
    pub note: Option<String>,
}

/// The GGUF type llama.cpp's `-hf` picks when none is named.
const DEFAULT_QUANT: &str = "Q4_K_M";

/// Extensions a model directory needs; everything else (other weight
/// formats, ONNX exports, images, READMEs) stays on the Hub.
const DIR_EXTENSIONS: &[&str] = &["json", "jinja", "txt", "model", "tiktoken", "safetensors"];

pub fn plan(repo: &str, files: &[String], selector: Option<&str>) -> Result<Plan, HubError> {
    let ggufs: Vec<&String> = files.iter().filter(|f| has_ext(f, "gguf")).collect();
    let (mmprojs, models): (Vec<&String>, Vec<&String>) = ggufs.iter().partition(|f| is_mmproj(f));
    match selector {
        Some(sel) if files.iter().any(|f| f == sel) => {
            let mmproj = if has_ext(sel, "gguf") && !is_mmproj(sel) {
                reject_split(repo, sel, files)?;
                pick_mmproj(sel, &mmprojs)
            } else {
                None
            };
            Ok(one_file(sel, mmproj, None))
        }
        Some(sel) => {
            let matches: Vec<&&String> = models.iter().filter(|f| tag_matches(f, sel)).collect();
            match matches.as_slice() {
                [] => Err(HubError::NoSuchFile {
                    repo: repo.to_string(),
                    selector: sel.to_string(),
                    tags: tags(&models),
                    files: files.to_vec(),
                }),
                [one] => {
                    reject_split(repo, one, files)?;
                    Ok(one_file(one, pick_mmproj(one, &mmprojs), None))
                }
                many => {
                    if let Some(first) = many.iter().find(|f| split_part(f).is_some()) {
                        reject_split(repo, first, files)?;
                    }
                    Err(HubError::Ambiguous {
                        repo: repo.to_string(),
                        selector: sel.to_string(),
                        candidates: many.iter().map(|f| f.to_string()).collect(),
                    })
                }
            }
        }
        None if is_model_dir(files) => Ok(dir_plan(files)),
        None if !models.is_empty() => {
            let mut sorted = models.clone();
            sorted.sort();
            let pick = sorted
                .iter()
                .find(|f| tag_matches(f, DEFAULT_QUANT))
                .or_else(|| sorted.iter().find(|f| split_part(f).is_none()))
                .unwrap_or(&sorted[0]);
            reject_split(repo, pick, files)?;
            let others: Vec<String> = tags(&models)
                .into_iter()
                .filter(|t| Some(t) != tag_of(pick).as_ref())
                .collect();
            let note = (models.len() > 1).then(|| {
                format!(
                    "hf://{repo}: no type named, so {pick} (llama.cpp's default {DEFAULT_QUANT} when the repository has it); the others: {} (pick one with hf://{repo}:TYPE)",
                    others.join(", ")
                )
            });
            Ok(one_file(pick, pick_mmproj(pick, &mmprojs), note))
        }
        None => {
            let mllm: Vec<&String> = files.iter().filter(|f| has_ext(f, "mllm")).collect();
            match mllm.as_slice() {
                [one] => Ok(one_file(one, None, None)),
                _ => Err(HubError::NothingToRun {
                    repo: repo.to_string(),
                    files: files.to_vec(),
                }),
            }
        }
    }
}

fn one_file(file: &str, mmproj: Option<String>, note: Option<String>) -> Plan {
    let mut files = vec![file.to_string()];
    files.extend(mmproj.clone());
    Plan {
        files,
        target: Target::File(file.to_string()),
        mmproj,
        note,
    }
}

/// config.json and weights mllm reads (safetensors, or PyTorch shards when
/// the repository has no safetensors).
fn is_model_dir(files: &[String]) -> bool {
    files.iter().any(|f| f == "config.json")
        && files
            .iter()
            .any(|f| top_level(f) && (has_ext(f, "safetensors") || is_pytorch_weights(f)))
}

fn dir_plan(files: &[String]) -> Plan {
    let top_safetensors: Vec<&String> = files
        .iter()
        .filter(|f| top_level(f) && has_ext(f, "safetensors"))
        .collect();
    // Which top-level safetensors are the model: the shards an index names
    // (`model-00001-of-00002.safetensors` for `model.safetensors.index.json`;
    // `finish` checks the index itself once it is here), else
    // `model.safetensors`, else all. Others beside them (Mistral's
    // `consolidated.safetensors`, adapters) stay on the Hub.
    let index_stems: Vec<&str> = files
        .iter()
        .filter(|f| top_level(f))
        .filter_map(|f| f.strip_suffix(".safetensors.index.json"))
        .collect();
    let model_weights = |f: &str| {
        if !index_stems.is_empty() {
            index_stems
                .iter()
                .any(|stem| f.strip_prefix(stem).is_some_and(|t| t.starts_with('-')))
        } else if top_safetensors.iter().any(|t| *t == "model.safetensors") {
            f == "model.safetensors"
        } else {
            true
        }
    };
    let wanted = |f: &&String| {
        if sentence_transformers_module(f) {
            return DIR_EXTENSIONS.iter().any(|e| has_ext(f, e));
        }
        if !top_level(f) {
            return false;
        }
        if has_ext(f, "safetensors") {
            return model_weights(f);
        }
        // PyTorch shards only when there are no safetensors; their index
        // (pytorch_model.bin.index.json) is a .json and comes either way.
        DIR_EXTENSIONS.iter().any(|e| has_ext(f, e))
            || (top_safetensors.is_empty() && is_pytorch_weights(f))
    };
    Plan {
        files: files.iter().filter(wanted).cloned().collect(),
        target: Target::Dir,
        mmproj: None,
        note: None,
    }
}

fn top_level(f: &str) -> bool {
    !f.contains('/')
}

/// sentence-transformers keeps pooling and dense layers in `1_Pooling/`,
/// `2_Dense/`, ...
fn sentence_transformers_module(f: &str) -> bool {
    let mut parts = f.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(dir), Some(_), None) => dir
            .split_once('_')
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())),
        _ => false,
    }
}

fn is_pytorch_weights(f: &str) -> bool {
    top_level(f) && f.starts_with("pytorch_model") && has_ext(f, "bin")
}

fn has_ext(f: &str, ext: &str) -> bool {
    f.rsplit_once('.')
        .is_some_and(|(_, e)| e.eq_ignore_ascii_case(ext))
}

fn basename(f: &str) -> &str {
    f.rsplit('/').next().unwrap_or(f)
}

fn is_mmproj(f: &str) -> bool {
    basename(f).to_ascii_lowercase().contains("mmproj")
}

/// `TAG` occurs in the path as a whole token: the characters around it are
/// not letters, digits or '_' (so `Q4_K` does not match `Q4_K_M`, nor `F16`
/// match `BF16`). Case does not matter.
pub fn tag_matches(file: &str, tag: &str) -> bool {
    let hay = file.to_ascii_uppercase();
    let tag = tag.to_ascii_uppercase();
    if tag.is_empty() {
        return false;
    }
    let token = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    hay.match_indices(&tag).any(|(at, _)| {
        !token(hay[..at].chars().next_back()) && !token(hay[at + tag.len()..].chars().next())
    })
}

/// The quantization tag in a GGUF file's name: the last `-`/`.`-separated
/// token that reads like one (`Q4_K_M`, `IQ4_XS`, `F16`, `BF16`, `Q8_0`).
pub fn tag_of(file: &str) -> Option<String> {
    let stem = basename(file);
    let stem = stem.strip_suffix(".gguf").unwrap_or(stem);
    let stem = match split_part(stem) {
        Some((prefix, _, _)) => prefix,
        None => stem,
    };
    stem.split(['-', '.'])
        .rev()
        .find(|t| {
            let u = t.to_ascii_uppercase();
            let body = u
                .strip_prefix("IQ")
                .or_else(|| u.strip_prefix("BF"))
                .or_else(|| u.strip_prefix('Q'))
                .or_else(|| u.strip_prefix('F'))
                .or_else(|| u.strip_prefix("TQ"));
            body.is_some_and(|b| b.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(|t| t.to_ascii_uppercase())
}

/// The distinct tags among the model files, sorted.
fn tags(models: &[&String]) -> Vec<String> {
    let mut t: Vec<String> = models.iter().filter_map(|f| tag_of(f)).collect();
    t.sort();
    t.dedup();
    t
}

/// `NAME-00001-of-00003.gguf` (llama.cpp's gguf-split): (`NAME`, part, of).
fn split_part(file: &str) -> Option<(&str, u32, u32)> {
    let stem = file.strip_suffix(".gguf").unwrap_or(file);
    let (rest, of) = stem.rsplit_once("-of-")?;
    let (prefix, part) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.chars().all(|c| c.is_ascii_digit());
    if !(digits(part) && digits(of)) {
        return None;
    }
    Some((prefix, part.parse().ok()?, of.parse().ok()?))
}

/// mllm reads a GGUF as one file; a split one must be merged first.
fn reject_split(repo: &str, file: &str, files: &[String]) -> Result<(), HubError> {
    let Some((prefix, _, of)) = split_part(file) else {
        return Ok(());
    };
    let parts = files
        .iter()
        .filter(|f| split_part(f).is_some_and(|(p, _, _)| p == prefix))
        .count();
    Err(HubError::SplitGguf {
        repo: repo.to_string(),
        file: file.to_string(),
        parts: parts.max(of as usize),
    })
}

/// The mmproj beside the model (same folder first), preferring the model's
/// own tag, then f16, bf16, f32 and q8_0: the precisions vision towers are
/// published in.
fn pick_mmproj(model: &str, mmprojs: &[&String]) -> Option<String> {
    let folder = |f: &str| f.rsplit_once('/').map(|(d, _)| d.to_string());
    let near: Vec<&String> = mmprojs
        .iter()
        .filter(|m| folder(m) == folder(model))
        .copied()
        .collect();
    let pool = if near.is_empty() {
        mmprojs.to_vec()
    } else {
        near
    };
    let mut pool = pool;
    pool.sort();
    let mut prefs: Vec<String> = tag_of(model).into_iter().collect();
    prefs.extend(["F16", "BF16", "F32", "Q8_0"].map(String::from));
    prefs
        .iter()
        .find_map(|t| pool.iter().find(|m| tag_matches(m, t)))
        .or(pool.first())
        .map(|m| m.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(files: &[&str]) -> Vec<String> {
        files.iter().map(|s| s.to_string()).collect()
    }

    const GGUF_REPO: &[&str] = &[
        ".gitattributes",
        "README.md",
        "Qwen3-VL-2B-Instruct-Q4_K_M.gguf",
        "Qwen3-VL-2B-Instruct-Q8_0.gguf",
        "Qwen3-VL-2B-Instruct-F16.gguf",
        "mmproj-Qwen3-VL-2B-Instruct-F16.gguf",
        "mmproj-Qwen3-VL-2B-Instruct-Q8_0.gguf",
    ];

    #[test]
    fn a_quant_tag_picks_its_file_and_the_mmproj_beside_it() {
        let p = plan("o/r", &list(GGUF_REPO), Some("q8_0")).unwrap();
        assert_eq!(
            p.target,
            Target::File("Qwen3-VL-2B-Instruct-Q8_0.gguf".into())
        );
        assert_eq!(
            p.mmproj.as_deref(),
            Some("mmproj-Qwen3-VL-2B-Instruct-Q8_0.gguf")
        );
        let p = plan("o/r", &list(GGUF_REPO), Some("Q4_K_M")).unwrap();
        assert_eq!(
            p.mmproj.as_deref(),
            Some("mmproj-Qwen3-VL-2B-Instruct-F16.gguf")
        );
        assert_eq!(p.files.len(), 2);
        // No tag: Q4_K_M, said so.
        let p = plan("o/r", &list(GGUF_REPO), None).unwrap();
        assert_eq!(
            p.target,
            Target::File("Qwen3-VL-2B-Instruct-Q4_K_M.gguf".into())
        );
        assert!(p.note.unwrap().contains("F16, Q8_0"));
        // An exact file name.
        let p = plan(
            "o/r",
            &list(GGUF_REPO),
            Some("Qwen3-VL-2B-Instruct-F16.gguf"),
        )
        .unwrap();
        assert_eq!(
            p.target,
            Target::File("Qwen3-VL-2B-Instruct-F16.gguf".into())
        );
    }

    #[test]
    fn tags_match_whole_tokens_only() {
        assert!(tag_matches("m-Q4_K_M.gguf", "q4_k_m"));
        assert!(!tag_matches("m-Q4_K_M.gguf", "Q4_K"));
        assert!(!tag_matches("m-BF16.gguf", "F16"));
        assert!(tag_matches("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"));
        assert!(tag_matches("m-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"));
        assert_eq!(
            tag_of("SmolLM2-135M-Instruct.Q4_1.gguf").as_deref(),
            Some("Q4_1")
        );
        assert_eq!(tag_of("Qwen3-0.6B-f16.gguf").as_deref(), Some("F16"));
        assert_eq!(
            tag_of("x-IQ4_XS-00001-of-00002.gguf").as_deref(),
            Some("IQ4_XS")
        );
        assert_eq!(tag_of("Qwen3.gguf"), None);
    }

    #[test]
    fn a_missing_tag_lists_what_there_is() {
        let e = plan("o/r", &list(GGUF_REPO), Some("IQ4_XS"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("IQ4_XS") && e.contains("F16, Q4_K_M, Q8_0"),
            "{e}"
        );
    }

    #[test]
    fn split_ggufs_and_ambiguity_are_errors_that_say_what_to_do() {
        let files = list(&[
            "m-Q8_0-00001-of-00002.gguf",
            "m-Q8_0-00002-of-00002.gguf",
            "m-Q4_0.gguf",
            "m-imat-Q4_0.gguf",
        ]);
        let e = plan("o/r", &files, Some("Q8_0")).unwrap_err().to_string();
        assert!(
            e.contains("2 parts") && e.contains("llama-gguf-split --merge"),
            "{e}"
        );
        let e = plan("o/r", &files, Some("Q4_0")).unwrap_err().to_string();
        assert!(
            e.contains("m-imat-Q4_0.gguf") && e.contains("hf://o/r:FILE"),
            "{e}"
        );
    }

    #[test]
    fn a_model_directory_takes_config_tokenizer_and_every_shard_only() {
        let files = list(&[
            ".gitattributes",
            "README.md",
            "config.json",
            "generation_config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
            "onnx/model.onnx",
            "original/consolidated.safetensors",
            "consolidated.safetensors",
            "adapter_model.safetensors",
            "1_Pooling/config.json",
            "assets/logo.png",
        ]);
        let p = plan("o/r", &files, None).unwrap();
        assert_eq!(p.target, Target::Dir);
        assert_eq!(
            p.files,
            list(&[
                "config.json",
                "generation_config.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "chat_template.jinja",
                "1_Pooling/config.json",
            ])
        );
        // One unsharded file among others.
        let p = plan(
            "o/r",
            &list(&[
                "config.json",
                "model.safetensors",
                "adapter_model.safetensors",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(p.files, list(&["config.json", "model.safetensors"]));
        // PyTorch weights when there are no safetensors.
        let p = plan(
            "o/r",
            &list(&["config.json", "pytorch_model.bin", "vocab.txt"]),
            None,
        )
        .unwrap();
        assert_eq!(
            p.files,
            list(&["config.json", "pytorch_model.bin", "vocab.txt"])
        );
    }

    #[test]
    fn a_repository_without_models_says_so() {
        let e = plan("o/r", &list(&["README.md", "data.csv"]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("README.md, data.csv"), "{e}");
    }
}
