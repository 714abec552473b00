//! `hf://ORG/NAME[@REVISION][:FILE_OR_QUANT]`: which repository, at which
//! revision, and which of its files (a path in the repository or a GGUF
//! quantization such as `Q4_K_M`).

use crate::HubError;

/// The prefix that marks a model argument as a Hub reference.
pub const SCHEME: &str = "hf://";

/// A parsed model reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRef {
    /// `ORG/NAME` (or a legacy single `NAME` such as `gpt2`).
    pub repo: String,
    /// A branch, tag or commit (`main` unless `@REVISION` is given).
    pub revision: String,
    /// What follows `:`: a file in the repository or a quantization tag.
    pub selector: Option<String>,
}

impl HubRef {
    /// Whether a `--model` value names a Hub repository rather than a path.
    pub fn is_hub(value: &str) -> bool {
        value.starts_with(SCHEME)
    }

    /// Parses `[hf://]REPO[@REVISION][:FILE_OR_QUANT]`.
    pub fn parse(value: &str) -> Result<HubRef, HubError> {
        let bad = |why: &str| HubError::BadReference {
            reference: value.to_string(),
            why: why.to_string(),
        };
        let rest = value.strip_prefix(SCHEME).unwrap_or(value);
        // Repository names and revisions cannot hold ':', so the first one
        // starts the selector (a file path may hold more).
        let (repo_rev, selector) = match rest.split_once(':') {
            Some((r, s)) => (r, Some(s)),
            None => (rest, None),
        };
        let (repo, revision) = match repo_rev.split_once('@') {
            Some((r, v)) => (r, Some(v)),
            None => (repo_rev, None),
        };
        if repo.is_empty() {
            return Err(bad("it names no repository"));
        }
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() > 2 {
            return Err(bad("a repository is ORG/NAME, with one '/'"));
        }
        for part in &parts {
            if part.is_empty() || part.len() > 96 {
                return Err(bad("the organisation and name must be 1 to 96 characters"));
            }
            if part.starts_with(['.', '-']) || part.contains("..") {
                return Err(bad("a name may not start with '.' or '-' or hold \"..\""));
            }
            if !part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(bad(
                    "repository names hold only letters, digits, '-', '_' and '.'",
                ));
            }
        }
        let revision = match revision {
            None => "main".to_string(),
            Some("") => return Err(bad("'@' is followed by no revision")),
            Some(r) if !safe_path(r) => {
                return Err(bad("a revision may not hold \"..\", spaces or '\\'"))
            }
            Some(r) => r.to_string(),
        };
        let selector = match selector {
            None => None,
            Some("") => return Err(bad("':' is followed by no file or quantization")),
            Some(s) if !safe_path(s) || s.starts_with('/') => {
                return Err(bad(
                    "a file is a relative path inside the repository, without \"..\"",
                ))
            }
            Some(s) => Some(s.to_string()),
        };
        Ok(HubRef {
            repo: repo.to_string(),
            revision,
            selector,
        })
    }
}

/// No parent steps, whitespace, backslashes or control characters: the
/// value becomes part of a cache path and a URL.
fn safe_path(s: &str) -> bool {
    !s.split('/').any(|seg| seg == ".." || seg == ".")
        && !s.contains("//")
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
}

impl std::fmt::Display for HubRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.repo)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        if let Some(s) = &self.selector {
            write!(f, ":{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> HubRef {
        HubRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn the_spellings_people_use() {
        let r = parse("hf://ggml-org/Qwen3-0.6B-GGUF:Q4_K_M");
        assert_eq!(r.repo, "ggml-org/Qwen3-0.6B-GGUF");
        assert_eq!(r.revision, "main");
        assert_eq!(r.selector.as_deref(), Some("Q4_K_M"));
        let r = parse("Qwen/Qwen3-0.6B");
        assert_eq!((r.repo.as_str(), r.selector), ("Qwen/Qwen3-0.6B", None));
        let r = parse("hf://org/name@v1.0:sub/dir/model-f16.gguf");
        assert_eq!(r.revision, "v1.0");
        assert_eq!(r.selector.as_deref(), Some("sub/dir/model-f16.gguf"));
        assert_eq!(parse("gpt2").repo, "gpt2");
        assert_eq!(
            parse("hf://org/name@refs/pr/1:Q8_0").to_string(),
            "hf://org/name@refs/pr/1:Q8_0"
        );
    }

    #[test]
    fn malformed_references_say_why() {
        for (bad, why) in [
            ("hf://", "no repository"),
            ("hf://a/b/c", "one '/'"),
            ("hf://org/", "1 to 96"),
            ("hf://org/..x", "may not start"),
            ("hf://org/na me", "only letters"),
            ("hf://org/name:", "no file"),
            ("hf://org/name:../../etc/passwd", "relative path"),
            ("hf://org/name:/etc/passwd", "relative path"),
            ("hf://org/name@", "no revision"),
            ("hf://org/name@../x", "revision"),
        ] {
            let e = HubRef::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    proptest! {
        /// Whatever parses prints back to itself, and never names a path
        /// that leaves the repository.
        #[test]
        fn parse_display_round_trip(s in "(hf://)?[a-zA-Z0-9._/@:-]{0,40}") {
            if let Ok(r) = HubRef::parse(&s) {
                prop_assert_eq!(HubRef::parse(&r.to_string()).unwrap(), r.clone());
                for part in [Some(r.repo.as_str()), Some(r.revision.as_str()), r.selector.as_deref()].into_iter().flatten() {
                    prop_assert!(!part.split('/').any(|seg| seg == ".."));
                }
            }
        }
    }
}
