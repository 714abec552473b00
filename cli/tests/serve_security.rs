//! `mllm serve` as a stranger on the network meets it (issue #32; the
//! threat model is docs/security.md): local image paths, DNS rebinding,
//! cross-origin pages, bad flags, and TLS with API keys through the
//! official `openai` client (`tests/serve/tls_client.py` in the venv
//! `tests/fetch_assets.sh` installs). Every server here is the tiny
//! Qwen3-VL fixture, a vision model, so image paths really are read.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::http::{get, post, request, Resp, Server};
use common::{mllm, root, text};
use serde_json::json;

fn model() -> String {
    let p = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    p.to_str().expect("utf-8").to_string()
}

fn fixture_png() -> PathBuf {
    root().join("tests/fixtures/qwen3_vl/run_images/a_160x120.png")
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("mllm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ask_image(addr: &str, url: &str) -> Resp {
    let body = json!({ "max_tokens": 2, "temperature": 0, "messages": [
        { "role": "user", "content": [
            { "type": "image_url", "image_url": { "url": url } },
            { "type": "text", "text": "Describe this image." },
        ] },
    ] });
    post(addr, "/v1/chat/completions", &body.to_string())
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// Without `--allowed-local-media-path` no local file is read, and a
/// missing file and an existing one get the same answer; with it, only
/// regular files under the directory, after `..` and symlinks.
#[test]
fn local_image_paths_only_where_allowed() {
    let tmp = TempDir::new("media");
    let dir = tmp.0.join("allowed");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::copy(fixture_png(), dir.join("ok.png")).expect("copy");
    let secret = tmp.0.join("secret.png");
    std::fs::copy(fixture_png(), &secret).expect("copy");
    std::os::unix::fs::symlink(&secret, dir.join("link.png")).expect("symlink");
    let m = model();

    let closed = Server::start(&["--model", &m, "-t", "1"]);
    let a = closed.addr.as_str();
    let existing = ask_image(a, s(&secret));
    let missing = ask_image(a, s(&tmp.0.join("does_not_exist.png")));
    let as_url = ask_image(a, &format!("file://{}", s(&secret)));
    let system = ask_image(a, "/etc/shadow");
    for r in [&existing, &missing, &as_url, &system] {
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.body, existing.body, "the answer tells which files exist");
    }
    let msg = existing.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(msg.contains("--allowed-local-media-path"), "{msg}");
    assert!(!msg.contains("secret"), "{msg}");
    drop(closed);

    let open = Server::start(&[
        "--model",
        &m,
        "-t",
        "1",
        "--allowed-local-media-path",
        s(&dir),
    ]);
    let a = open.addr.as_str();
    let ok = ask_image(a, s(&dir.join("ok.png")));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok_url = ask_image(a, &format!("file://{}", s(&dir.join("ok.png"))));
    assert_eq!(ok_url.status, 200, "{}", ok_url.body);
    let refused = [
        ask_image(a, &format!("{}/../secret.png", s(&dir))),
        ask_image(a, s(&dir.join("link.png"))),
        ask_image(a, s(&dir.join("missing.png"))),
        ask_image(a, s(&secret)),
        ask_image(a, &format!("file://{}/%2e%2e/secret.png", s(&dir))),
        ask_image(a, s(&dir)),
    ];
    for r in &refused {
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.body, refused[0].body, "refusals differ");
    }
}

fn status_of(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let body = if method == "POST" {
        json!({ "content": "hello" }).to_string()
    } else {
        String::new()
    };
    request(addr, method, path, headers, &body)
}

/// DNS rebinding (a foreign `Host`) gets 421 before anything runs; a page
/// of another origin gets 403 and no CORS headers unless `--cors-origin`
/// names it; the server's own origin and non-browser clients pass.
#[test]
fn foreign_hosts_and_origins_are_refused() {
    let m = model();
    let srv = Server::start(&[
        "--model",
        &m,
        "-t",
        "1",
        "--allowed-host",
        "mllm.lan",
        "--cors-origin",
        "http://app.example",
    ]);
    let a = srv.addr.as_str();
    let port = a.rsplit(':').next().expect("port");
    let evil = format!("evil.example:{port}");
    for path in ["/health", "/v1/models"] {
        let r = status_of(a, "GET", path, &[("Host", &evil)]);
        assert_eq!(r.status, 421, "{path}: {}", r.body);
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(msg.contains("--allowed-host"), "{msg}");
    }
    let r = status_of(a, "POST", "/v1/chat/completions", &[("Host", &evil)]);
    assert_eq!(r.status, 421, "{}", r.body);
    for host in [
        a.to_string(),
        format!("mllm.lan:{port}"),
        format!("localhost:{port}"),
    ] {
        let r = status_of(a, "GET", "/health", &[("Host", &host)]);
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }

    let preflight = |origin: &str| {
        status_of(
            a,
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type",
                ),
            ],
        )
    };
    let r = preflight("http://evil.example");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = preflight("http://app.example");
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap_or("")
        .contains("POST"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("authorization, content-type")
    );

    let r = status_of(a, "POST", "/tokenize", &[("Origin", "http://evil.example")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert!(r.body.contains("--cors-origin"), "{}", r.body);
    let r = status_of(a, "POST", "/tokenize", &[("Origin", "http://app.example")]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let own = format!("http://{a}");
    let r = status_of(a, "POST", "/tokenize", &[("Origin", &own)]);
    assert_eq!(r.status, 200, "same origin: {}", r.body);
    drop(srv);

    // No --cors-origin: even the origin allowed above is refused.
    let plain = Server::start(&["--model", &m, "-t", "1"]);
    let r = status_of(
        plain.addr.as_str(),
        "OPTIONS",
        "/v1/chat/completions",
        &[
            ("Origin", "http://app.example"),
            ("Access-Control-Request-Method", "POST"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = get(plain.addr.as_str(), "/health");
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Flags that would open the server too wide, or that cannot work, stop
/// it at start with a message, before the model loads.
#[test]
fn unsafe_or_broken_network_flags_fail_at_start() {
    let m = model();
    let cases: [(&[&str], &str); 5] = [
        (&["--cors-origin", "*"], "needs --api-key"),
        (&["--cors-origin", "app.example"], "is not an origin"),
        (&["--allowed-host", "http://x.lan"], "--allowed-host"),
        (&["--ssl-cert-file", "c.pem"], "needs --ssl-key-file"),
        (
            &["--allowed-local-media-path", "/no/such/dir"],
            "--allowed-local-media-path",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["serve", "--model", m.as_str(), "--port", "0"];
        args.extend_from_slice(flags);
        let out = mllm(&args);
        assert!(!out.status.success(), "{flags:?} started");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{flags:?}: {err}");
        assert!(
            !err.contains("loaded `"),
            "{flags:?} loaded the model first: {err}"
        );
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command (bash tests/fetch_assets.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        text(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=mllm test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1", "-keyout", "server.key"];
    csr.extend(ec);
    csr.extend(["-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("ext.cnf"),
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext.cnf");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
    );
}

/// HTTPS with keys from a file, through the official client: HTTP/1.1 and
/// HTTP/2, a wrong key, an untrusting client, plain HTTP to the TLS port.
/// A certificate that does not match its key stops the server at start.
#[test]
fn tls_with_the_official_client() {
    let python = root().join(".cache/serve-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` to install the openai client",
        python.display()
    );
    let tmp = TempDir::new("tls");
    certificates(&tmp.0);
    let key = "tls-key-7f3a";
    std::fs::write(tmp.0.join("keys"), format!("# keys\nother-key\n{key}\n")).expect("keys");
    let (cert, pkey, keys) = (
        tmp.0.join("server.pem"),
        tmp.0.join("server.key"),
        tmp.0.join("keys"),
    );

    let mismatched = mllm(&[
        "serve",
        "--model",
        &model(),
        "--port",
        "0",
        "--ssl-cert-file",
        s(&cert),
        "--ssl-key-file",
        s(&tmp.0.join("ca.key")),
    ]);
    assert!(!mismatched.status.success());
    let err = text(&mismatched.stderr);
    assert!(err.contains("do not make a usable pair"), "{err}");

    let srv = Server::start(&[
        "--model",
        &model(),
        "-t",
        "1",
        "--ssl-cert-file",
        s(&cert),
        "--ssl-key-file",
        s(&pkey),
        "--api-key-file",
        s(&keys),
    ]);
    assert!(srv.log.contains("listening on https://"), "{}", srv.log);
    assert!(
        !srv.log.contains(key),
        "the server logged a key:\n{}",
        srv.log
    );
    let base = format!("https://{}/v1", srv.addr);
    let out = Command::new(&python)
        .arg(root().join("tests/serve/tls_client.py"))
        .args([base.as_str(), s(&tmp.0.join("ca.pem")), key])
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}");
    assert!(
        out.status.success(),
        "tls_client.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server log\n{}",
        out.status,
        srv.log
    );
}

/// One log line per request, the key never in it: plain and streamed
/// answers with their token counts (JSON), and a refused request (text).
#[test]
fn each_request_is_logged() {
    let m = model();
    let srv = Server::start(&[
        "--model",
        &m,
        "-t",
        "1",
        "--log-format",
        "json",
        "--api-key",
        "k-9",
    ]);
    let a = srv.addr.as_str();
    let auth = [("Authorization", "Bearer k-9")];
    for stream in [false, true] {
        let body = json!({ "max_tokens": 3, "temperature": 0, "stream": stream,
            "messages": [{ "role": "user", "content": "Hello" }] });
        let r = request(a, "POST", "/v1/chat/completions", &auth, &body.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = request(
        a,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer nope")],
        "",
    );
    assert_eq!(r.status, 401);
    let log = srv.log_after("\"status\":401");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let chats: Vec<_> = lines
        .iter()
        .filter(|l| l["path"] == "/v1/chat/completions")
        .collect();
    assert_eq!(chats.len(), 2, "{log}");
    for l in chats {
        assert_eq!(
            (l["method"].as_str(), l["status"].as_u64()),
            (Some("POST"), Some(200)),
            "{l}"
        );
        assert_eq!(l["generated_tokens"], 3, "{l}");
        assert!(l["prompt_tokens"].as_u64().is_some_and(|p| p > 0), "{l}");
        assert!(l["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/metrics" && l["status"] == 401),
        "{log}"
    );
    assert!(
        !log.contains("k-9") && !log.contains("nope"),
        "a key was logged:\n{log}"
    );

    let text_srv = Server::start(&["--model", &m, "-t", "1"]);
    let r = get(text_srv.addr.as_str(), "/v2/nothing");
    assert_eq!(r.status, 404);
    let log = text_srv.log_after("/v2/nothing");
    assert!(
        log.lines().any(|l| l.starts_with("GET /v2/nothing 404 ")),
        "{log}"
    );
}
