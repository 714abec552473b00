//! The chat page of `mllm serve`: served at `/` with its files and a
//! Content-Security-Policy, open without an API key while the API wants
//! one, off with `--no-webui`; and driven in a real browser (Debian's
//! headless chromium through Selenium, `tests/serve/webui_browser.py`) on
//! the real SmolLM2 and the tiny Qwen3-VL fixture: streamed answers equal
//! `mllm run --temp 0`'s, Stop, conversations kept across reloads, an
//! image, folded reasoning, safe Markdown. A missing browser fails the
//! test; `MLLM_SKIP_BROWSER=1` skips it knowingly (and says so).
//! `MLLM_WEBUI_SCREENSHOT=docs/webui.png` renews the README's screenshot.

mod common;

use std::process::Command;

use common::http::{get, request, Server};
use common::{mllm, root, smollm2, text};

fn vl_fixture() -> String {
    let p = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    p.to_str().expect("utf-8").to_string()
}

#[test]
fn the_page_is_served_open_and_can_be_turned_off() {
    let model = vl_fixture();
    let srv = Server::start(&["--model", &model, "-t", "1", "--api-key", "k"]);
    let r = get(&srv.addr, "/");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.body.contains("<title>mllm chat</title>"), "{}", r.body);
    let csp = r.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let index = r.body;
    for (path, kind) in [
        ("/webui/app.js", "text/javascript"),
        ("/webui/markdown.js", "text/javascript"),
        ("/webui/app.css", "text/css"),
    ] {
        let r = get(&srv.addr, path);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap_or("").starts_with(kind),
            "{path}"
        );
        assert!(!r.body.is_empty(), "{path}");
        assert!(index.contains(path), "the page loads {path}");
    }
    // The page is open; the API it calls wants the key.
    let chat = request(
        &srv.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}"#,
    );
    assert_eq!(chat.status, 401, "{}", chat.body);
    drop(srv);

    let srv = Server::start(&["--model", &model, "-t", "1", "--no-webui"]);
    let r = get(&srv.addr, "/");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("--no-webui"), "{}", r.body);
    assert_eq!(get(&srv.addr, "/webui/app.js").status, 404);
    assert_eq!(get(&srv.addr, "/v1/models").status, 200);
}

/// `mllm run --temp 0`'s answer, without the closing newline.
fn run_answer(args: &[&str]) -> String {
    let out = mllm(&[&["run", "--temp", "0"], args].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

#[test]
fn the_page_works_in_a_real_browser() {
    if std::env::var_os("MLLM_SKIP_BROWSER").is_some() {
        eprintln!("MLLM_SKIP_BROWSER is set: the chat page was NOT checked in a browser");
        return;
    }
    let python = root().join(".cache/browser-venv/bin/python");
    for need in [
        python.as_path(),
        std::path::Path::new("/usr/bin/chromium"),
        std::path::Path::new("/usr/bin/chromedriver"),
    ] {
        assert!(
            need.is_file(),
            "{} is missing: run `bash tests/fetch_assets.sh` to install chromium, chromedriver \
             and Selenium (or set MLLM_SKIP_BROWSER=1 to skip this test knowingly)",
            need.display()
        );
    }
    let chat = smollm2();
    let vl = vl_fixture();
    // chromedriver takes only canonical paths for a file input.
    let image =
        std::fs::canonicalize(root().join("tests/fixtures/qwen3_vl/run_images/a_160x120.png"))
            .expect("the fixture image");
    let image = image.to_str().expect("utf-8");
    let prompt = "List three fruits.";
    let expect = run_answer(&["--model", &chat, "--prompt", prompt, "-n", "40"]);
    let vision_prompt = "Describe this image.";
    let vision_expect = run_answer(&[
        "--model",
        &vl,
        "--image",
        image,
        "--prompt",
        vision_prompt,
        "-n",
        "6",
    ]);

    let srv = Server::start(&[
        "--model",
        &format!("smollm2={chat}"),
        "--model",
        &format!("tiny-vl={vl}"),
        "--parallel",
        "1",
        "-t",
        "2",
    ]);
    let screenshot = std::env::var("MLLM_WEBUI_SCREENSHOT")
        .map(|p| root().join(p))
        .unwrap_or_else(|_| std::env::temp_dir().join("mllm-webui-test.png"));
    let spec = serde_json::json!({
        "url": format!("http://{}", srv.addr),
        "chat_model": "smollm2",
        "prompt": prompt,
        "max_tokens": 40,
        "expect": expect,
        "vision_model": "tiny-vl",
        "image": image,
        "vision_prompt": vision_prompt,
        "vision_max_tokens": 6,
        "vision_expect": vision_expect,
        "screenshot": screenshot,
    });
    let spec_path = std::env::temp_dir().join(format!("mllm-webui-{}.json", std::process::id()));
    std::fs::write(&spec_path, spec.to_string()).expect("write the spec");
    let out = Command::new(&python)
        .arg(root().join("tests/serve/webui_browser.py"))
        .arg(&spec_path)
        .current_dir(root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Selenium must not look for drivers on the network.
        .env("SE_OFFLINE", "true")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let _ = std::fs::remove_file(&spec_path);
    let stdout = text(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "webui_browser.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}\n--- server log\n{}",
        out.status,
        text(&out.stderr),
        srv.log
    );
}
