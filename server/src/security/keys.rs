//! The API keys a request may carry: `--api-key KEY` and the lines of
//! `--api-key-file FILE`. Keys are never printed: `Debug` shows only how
//! many there are, and errors name the file, not its contents.

use std::fmt;
use std::path::Path;

#[derive(Clone, Default)]
pub struct ApiKeys {
    keys: Vec<String>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeys({} keys, redacted)", self.keys.len())
    }
}

impl ApiKeys {
    /// `key` from `--api-key`; `file` from `--api-key-file`: one key a
    /// line, blank lines and `#` comments skipped.
    pub fn new(key: Option<&str>, file: Option<&Path>) -> Result<ApiKeys, String> {
        let mut keys = vec![];
        if let Some(k) = key {
            let k = k.trim();
            if k.is_empty() {
                return Err("--api-key is empty: give the key clients must send".into());
            }
            keys.push(k.to_string());
        }
        if let Some(f) = file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read --api-key-file {}: {e}", f.display()))?;
            let before = keys.len();
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string),
            );
            if keys.len() == before {
                return Err(format!(
                    "--api-key-file {} holds no key: write one key a line",
                    f.display()
                ));
            }
        }
        Ok(ApiKeys { keys })
    }

    /// Whether requests need a key at all.
    pub fn required(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether `given` is one of the keys. Every key is compared in full,
    /// whatever matched, so the time taken does not tell which bytes or
    /// which key were right.
    pub fn accepts(&self, given: &str) -> bool {
        self.keys.iter().fold(false, |ok, k| {
            constant_time_eq(given.as_bytes(), k.as_bytes()) | ok
        })
    }
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_file_together() {
        let dir = std::env::temp_dir().join(format!("mllm-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let f = dir.join("keys");
        std::fs::write(&f, "# team keys\nalpha\n\n  beta  \n").expect("write");
        let k = ApiKeys::new(Some("gamma"), Some(&f)).expect("keys");
        assert!(k.required());
        for ok in ["alpha", "beta", "gamma"] {
            assert!(k.accepts(ok), "{ok}");
        }
        for bad in ["", "alph", "alpha ", "# team keys", "delta"] {
            assert!(!k.accepts(bad), "{bad}");
        }
        assert!(!format!("{k:?}").contains("alpha"));
        std::fs::write(&f, "# nothing\n\n").expect("write");
        let e = ApiKeys::new(None, Some(&f)).unwrap_err();
        assert!(e.contains("holds no key"), "{e}");
        let e = ApiKeys::new(None, Some(&dir.join("missing"))).unwrap_err();
        assert!(e.contains("cannot read --api-key-file"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn no_keys_means_open() {
        let k = ApiKeys::new(None, None).expect("none");
        assert!(!k.required());
        assert!(!k.accepts(""));
    }
}
