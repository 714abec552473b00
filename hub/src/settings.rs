//! Where the Hub is, where its cache is, and who we are: the environment
//! variables Python's `huggingface_hub` reads, with its precedence, so both
//! see the same cache and the same login.

use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct Settings {
    /// `HF_ENDPOINT`, default `https://huggingface.co` (no trailing '/').
    pub endpoint: String,
    /// The hub cache: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
    pub cache: PathBuf,
    /// `HF_TOKEN`, else the token file `huggingface-cli login` saved
    /// (`HF_TOKEN_PATH`, else `$HF_HOME/token`).
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE` set to 1/true/yes/on: only the cache is read.
    pub offline: bool,
    /// A progress bar on standard error (only when it is a terminal).
    pub progress: bool,
}

impl Settings {
    pub fn from_env() -> Settings {
        Self::from_vars(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
            .with_progress(std::io::stderr().is_terminal())
    }

    fn with_progress(mut self, progress: bool) -> Settings {
        self.progress = progress;
        self
    }

    /// The settings a set of variables gives (the environment, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Settings {
        let home = || var("HOME").map(PathBuf::from).unwrap_or_default();
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home().join(".cache"))
                .join("huggingface")
        });
        let cache = var("HF_HUB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token_file = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("token"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(token_file)
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            ["1", "on", "yes", "true"].contains(&v.trim().to_ascii_lowercase().as_str())
        });
        Settings {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .to_string(),
            cache,
            token,
            offline,
            progress: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Settings {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn huggingface_hub_precedence() {
        let s = settings(&[("HOME", "/h")]);
        assert_eq!(s.cache, PathBuf::from("/h/.cache/huggingface/hub"));
        assert_eq!(s.endpoint, "https://huggingface.co");
        assert!(!s.offline && s.token.is_none());
        let s = settings(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(s.cache, PathBuf::from("/x/huggingface/hub"));
        let s = settings(&[("HF_HOME", "/hf"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(s.cache, PathBuf::from("/hf/hub"));
        let s = settings(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")]);
        assert_eq!(s.cache, PathBuf::from("/c"));
        let s = settings(&[
            ("HF_ENDPOINT", "http://127.0.0.1:8080/"),
            ("HF_TOKEN", "hf_x"),
            ("HF_HUB_OFFLINE", "True"),
        ]);
        assert_eq!(s.endpoint, "http://127.0.0.1:8080");
        assert_eq!(s.token.as_deref(), Some("hf_x"));
        assert!(s.offline);
        assert!(!settings(&[("HF_HUB_OFFLINE", "0")]).offline);
    }

    #[test]
    fn the_saved_login_is_read_when_hf_token_is_unset() {
        let dir = std::env::temp_dir().join(format!("mllm-hub-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "hf_saved\n").unwrap();
        let home = dir.to_string_lossy().into_owned();
        assert_eq!(
            settings(&[("HF_HOME", &home)]).token.as_deref(),
            Some("hf_saved")
        );
        assert_eq!(
            settings(&[("HF_HOME", &home), ("HF_TOKEN", "hf_env")])
                .token
                .as_deref(),
            Some("hf_env")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
