//! A tiny HTTP/1.1 client for the server tests (one request per
//! connection, chunked bodies decoded) and a guard that runs `mllm serve`
//! on an ephemeral loopback port and stops it when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream, in order.
    pub fn events(&self) -> Vec<String> {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

fn send(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    // A caller's own `Host` replaces the address (the rebinding tests).
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or(addr, |(_, v)| *v);
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
    {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send the request");
    s
}

pub fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let s = send(addr, method, path, headers, body);
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = vec![];
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut raw = vec![];
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).expect("chunk size");
            let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut buf = vec![0; n];
            r.read_exact(&mut buf).expect("chunk");
            raw.extend_from_slice(&buf);
            line.clear();
            r.read_line(&mut line).expect("chunk end");
        }
    } else {
        r.read_to_end(&mut raw).expect("body");
    }
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&raw).into_owned(),
    }
}

pub fn post(addr: &str, path: &str, body: &str) -> Resp {
    request(addr, "POST", path, &[], body)
}

pub fn get(addr: &str, path: &str) -> Resp {
    request(addr, "GET", path, &[], "")
}

/// Opens a streaming request and reads only its first bytes, then hangs
/// up: a client that leaves mid-answer.
pub fn post_and_leave(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) {
    let mut s = send(addr, "POST", path, headers, body);
    let mut buf = [0u8; 256];
    let _ = s.read(&mut buf);
    drop(s);
}

/// `mllm serve ARGS --port 0`, stopped (SIGKILL) when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// What the server printed on stderr before it listened.
    pub log: String,
    /// What it printed after (the request log), as it comes.
    later: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mllm"))
            .envs(env.iter().copied())
            .arg("serve")
            .args(args)
            .args(["--port", "0"])
            .current_dir(super::root())
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mllm serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut log = String::new();
        let addr = loop {
            let Some(Ok(l)) = lines.next() else {
                let _ = child.kill();
                panic!("mllm serve exited before listening:\n{log}");
            };
            log.push_str(&l);
            log.push('\n');
            let url = l.split("listening on http://").nth(1);
            if let Some(rest) = url.or_else(|| l.split("listening on https://").nth(1)) {
                break rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let later = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = later.clone();
        std::thread::spawn(move || {
            for l in lines.by_ref().map_while(Result::ok) {
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&l);
                    s.push('\n');
                }
            }
        });
        Server {
            child,
            addr,
            log,
            later,
        }
    }

    /// The lines printed since it listened, waiting up to 10 s for a line
    /// that contains `needle` (a log line is written as its answer ends).
    pub fn log_after(&self, needle: &str) -> String {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.later.lock().map(|s| s.clone()).unwrap_or_default();
            if s.contains(needle) || std::time::Instant::now() > until {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        self.child.wait().expect("wait for the server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
