//! `mllm serve` on the real SmolLM2 GGUF, driven by the official `openai`
//! Python client (a pinned PyPI release in `.cache/serve-venv`, installed
//! by `tests/fetch_assets.sh`) through `tests/serve/openai_client.py`:
//! models, chat (plain, streamed, logprobs), completions (plain, streamed,
//! logprobs), concurrent requests and the errors the client raises.
//! A missing venv fails the test; `MLLM_SKIP_OPENAI=1` skips it knowingly
//! (and says so); nothing else does.

mod common;

use std::process::Command;

use common::http::Server;
use common::{root, smollm2, text};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";
const KEY: &str = "test-key";

#[test]
fn official_openai_client_talks_to_the_server() {
    if std::env::var_os("MLLM_SKIP_OPENAI").is_some() {
        eprintln!("MLLM_SKIP_OPENAI is set: the server was NOT checked with the openai client");
        return;
    }
    let python = root().join(".cache/serve-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` to install the openai client \
         (or set MLLM_SKIP_OPENAI=1 to skip this test knowingly)",
        python.display()
    );
    let model = smollm2();
    let server = Server::start(&[
        "--model",
        &model,
        "--parallel",
        "2",
        "--api-key",
        KEY,
        "-t",
        "2",
    ]);
    let base = format!("http://{}/v1", server.addr);
    let out = Command::new(&python)
        .arg(root().join("tests/serve/openai_client.py"))
        .args([&base, MODEL, KEY])
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "openai_client.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server log\n{}",
        out.status,
        server.log
    );
}
