//! Images a request names by local path or `file://` URL. By default none
//! are read: a caller on the network must not make the server read (and a
//! vision model describe) any file the process can open, nor learn which
//! files exist. `--allowed-local-media-path DIR` (repeatable) allows the
//! regular files under DIR, after symlinks and `..` are resolved, so a
//! link inside DIR that points outside it is refused. Every refusal has
//! one message, whether the file is missing, outside, or not a file.
//! (A link swapped between the check and the read is not guarded against:
//! whoever can write inside DIR already chooses what is served from it.)

use std::path::{Path, PathBuf};

use crate::api::error::ApiError;

#[derive(Debug, Clone, Default)]
pub struct LocalMedia {
    /// Canonical directories.
    roots: Vec<PathBuf>,
}

impl LocalMedia {
    /// The `--allowed-local-media-path` values; each must be a directory.
    pub fn new(dirs: &[PathBuf]) -> Result<LocalMedia, String> {
        let mut roots = vec![];
        for d in dirs {
            let c = d
                .canonicalize()
                .map_err(|e| format!("--allowed-local-media-path {}: {e}", d.display()))?;
            if !c.is_dir() {
                return Err(format!(
                    "--allowed-local-media-path {}: not a directory; name the directory whose images requests may use",
                    d.display()
                ));
            }
            roots.push(c);
        }
        Ok(LocalMedia { roots })
    }

    /// The file a request's image URL (a path or `file://` URL) names, if
    /// it may be read.
    pub fn resolve(&self, url: &str) -> Result<PathBuf, ApiError> {
        let path = file_url_path(url).ok_or_else(|| self.refusal())?;
        let canonical = Path::new(&path)
            .canonicalize()
            .map_err(|_| self.refusal())?;
        let inside = self.roots.iter().any(|r| canonical.starts_with(r));
        // A FIFO or device under DIR is not an image and could block a
        // worker forever.
        if !inside || !canonical.is_file() {
            return Err(self.refusal());
        }
        Ok(canonical)
    }

    fn refusal(&self) -> ApiError {
        let how = if self.roots.is_empty() {
            "send the image as a data URI (data:image/png;base64,...), or start the server with --allowed-local-media-path DIR to allow files under DIR"
        } else {
            "only regular files under the server's --allowed-local-media-path directories may be used; send other images as data URIs (data:image/png;base64,...)"
        };
        ApiError::bad_request(format!("this local image path is not allowed: {how}"))
    }
}

/// The path of a `file://` URL (percent-decoded; host empty or
/// `localhost`), or a plain path as given. `None` for a URL of another
/// host or one that does not decode.
fn file_url_path(url: &str) -> Option<String> {
    let Some(rest) = url.strip_prefix("file://") else {
        return Some(url.to_string());
    };
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    percent_decode(rest)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    // A NUL cannot be in a path; refuse rather than let the OS truncate.
    (!text.contains('\0')).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls() {
        assert_eq!(
            file_url_path("file:///tmp/a%20b.png").as_deref(),
            Some("/tmp/a b.png")
        );
        assert_eq!(
            file_url_path("file://localhost/tmp/a.png").as_deref(),
            Some("/tmp/a.png")
        );
        assert_eq!(file_url_path("/tmp/a.png").as_deref(), Some("/tmp/a.png"));
        assert_eq!(file_url_path("file://server/share/a.png"), None);
        assert_eq!(file_url_path("file:///tmp/%zz"), None);
        assert_eq!(file_url_path("file:///tmp/a%00.png"), None);
    }

    #[cfg(unix)]
    #[test]
    fn only_files_under_the_roots() {
        let base = std::env::temp_dir().join(format!("mllm-media-{}", std::process::id()));
        let dir = base.join("allowed");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("ok.png"), b"x").expect("write");
        std::fs::write(base.join("secret.png"), b"x").expect("write");
        std::os::unix::fs::symlink(base.join("secret.png"), dir.join("link.png")).expect("link");
        let m = LocalMedia::new(std::slice::from_ref(&dir)).expect("policy");
        let ok = m
            .resolve(dir.join("ok.png").to_str().expect("utf-8"))
            .expect("allowed");
        assert!(ok.ends_with("allowed/ok.png"));
        let refused = |p: PathBuf| m.resolve(p.to_str().expect("utf-8")).unwrap_err().message;
        let msgs = [
            refused(dir.join("../secret.png")),
            refused(dir.join("link.png")),
            refused(dir.join("missing.png")),
            refused(base.join("secret.png")),
            refused(dir.clone()),
        ];
        assert!(msgs.iter().all(|m| m == &msgs[0]), "{msgs:?}");
        let none = LocalMedia::default();
        assert_eq!(
            none.resolve(dir.join("ok.png").to_str().expect("utf-8"))
                .unwrap_err()
                .message,
            none.resolve("/no/such/file.png").unwrap_err().message
        );
        assert!(LocalMedia::new(&[dir.join("ok.png")]).is_err());
        std::fs::remove_dir_all(&base).ok();
    }
}
