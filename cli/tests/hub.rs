//! Models by name: `mllm pull` and `--model hf://...` against a stand-in
//! Hub (tests/hub/stand_in_hub.py: the Hub's HTTP API as `huggingface_hub`
//! and `hf-hub` use it, with the CDN redirect, ETags, X-Repo-Commit and
//! Range), started by each test over repositories it builds from the
//! committed fixtures. Checked: a sharded safetensors repository and a GGUF
//! repository picked by type (with its mmproj) answer as the local files do;
//! the cache is huggingface_hub's (Python's downloads are used without
//! downloading again, and Python reads ours offline); a cut download resumes
//! from its bytes; HF_HUB_OFFLINE and an unreachable Hub use the cache;
//! HF_TOKEN opens a gated repository; every failure says what to do.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::{root, text};

const VL: &str = "tests/fixtures/qwen3_vl/p16_m2_tied_published";
const PAIRS: &str = "tests/fixtures/gguf/mmproj";
const DIR_REPO: &str = "test-org/Tiny-Qwen3-VL";
const GGUF_REPO: &str = "test-org/Tiny-Qwen3-VL-GGUF";
const GATED_REPO: &str = "test-org/Gated-Tiny";
const TOKEN: &str = "hf_stand_in_token";

/// The stand-in Hub over a fresh tree of repositories; killed when dropped.
struct Hub {
    child: Child,
    endpoint: String,
    log: PathBuf,
    /// Holds the repositories and, per test, the HF_HOME.
    dir: tempfile::TempDir,
}

impl Hub {
    fn start(extra: &[&str]) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let repos = dir.path().join("repos");
        make_repos(&repos);
        let log = dir.path().join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(root().join("tests/hub/stand_in_hub.py"))
            .arg("--root")
            .arg(&repos)
            .arg("--log")
            .arg(&log)
            .args(["--gated", GATED_REPO, "--token", TOKEN])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs tests/hub/stand_in_hub.py (the stand-in Hub)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the stand-in Hub's first line");
        let endpoint = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the stand-in Hub did not start: {line:?}"))
            .to_string();
        Hub {
            child,
            endpoint,
            log,
            dir,
        }
    }

    fn hf_home(&self) -> PathBuf {
        self.dir.path().join("hf-home")
    }

    /// `mllm ARGS` with HF_ENDPOINT at the stand-in and HF_HOME in the
    /// test's folder (no token unless `env` gives one).
    fn mllm(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_mllm"))
            .args(args)
            .current_dir(root())
            .env("NO_COLOR", "1")
            .env("HF_ENDPOINT", &self.endpoint)
            .env("HF_HOME", self.hf_home())
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .envs(env.iter().copied())
            .output()
            .expect("run mllm")
    }

    /// Every request so far, as the stand-in logged it.
    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON log line"))
            .collect()
    }

    /// Requests that carried file bytes (not the 1-byte metadata probes).
    fn downloads_since(&self, mark: usize) -> Vec<String> {
        self.requests()[mark..]
            .iter()
            .filter(|r| r["bytes"].as_u64().unwrap_or(0) > 1 && !is_api(r))
            .map(|r| r["path"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

fn is_api(r: &serde_json::Value) -> bool {
    r["path"].as_str().unwrap_or_default().starts_with("/api/")
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three repositories from the committed fixtures:
/// - DIR_REPO: the tiny Qwen3-VL directory with its weights split into two
///   shards and an index, beside files that must stay on the Hub (another
///   format's weights, an ONNX export, a README);
/// - GGUF_REPO: the same model's GGUF pair under llama.cpp's names, with a
///   second type and a second mmproj, so a pick can go wrong;
/// - GATED_REPO: a GGUF that needs HF_TOKEN.
fn make_repos(repos: &Path) {
    let dir = repos.join(DIR_REPO);
    std::fs::create_dir_all(dir.join("onnx")).unwrap();
    for f in [
        "config.json",
        "generation_config.json",
        "chat_template.jinja",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(root().join(VL).join(f), dir.join(f)).unwrap();
    }
    shard(&root().join(VL).join("model.safetensors"), &dir);
    std::fs::write(dir.join("README.md"), "# Tiny Qwen3-VL\n").unwrap();
    std::fs::write(dir.join("pytorch_model.bin"), b"not wanted").unwrap();
    std::fs::write(dir.join("onnx/model.onnx"), b"not wanted").unwrap();

    let gguf = repos.join(GGUF_REPO);
    std::fs::create_dir_all(&gguf).unwrap();
    let pairs = root().join(PAIRS);
    for (from, to) in [
        (
            "qwen3_vl_p16_m2_tied_published.gguf",
            "Tiny-Qwen3-VL-Q4_K_M.gguf",
        ),
        (
            "qwen3_vl_p8_m3_untied_ropeparams.gguf",
            "Tiny-Qwen3-VL-Q8_0.gguf",
        ),
        (
            "qwen3_vl_p16_m2_tied_published.f16.mmproj.gguf",
            "mmproj-Tiny-Qwen3-VL-F16.gguf",
        ),
        (
            "qwen3_vl_p16_m2_tied_published.mmproj.gguf",
            "mmproj-Tiny-Qwen3-VL-F32.gguf",
        ),
    ] {
        std::fs::copy(pairs.join(from), gguf.join(to)).unwrap();
    }
    std::fs::write(gguf.join("README.md"), "# GGUF\n").unwrap();

    let gated = repos.join(GATED_REPO);
    std::fs::create_dir_all(&gated).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/gguf/tiny_llama.gguf"),
        gated.join("Gated-Tiny-F32.gguf"),
    )
    .unwrap();
}

/// `model.safetensors` as two shards and `model.safetensors.index.json`, as
/// transformers' `save_pretrained(max_shard_size=...)` writes them.
fn shard(src: &Path, out: &Path) {
    let bytes = std::fs::read(src).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let half = names.len() / 2;
    let mut weight_map = serde_json::Map::new();
    for (i, part) in [&names[..half], &names[half..]].into_iter().enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", i + 1);
        let tensors: Vec<(String, safetensors::tensor::TensorView)> = part
            .iter()
            .map(|n| (n.clone(), st.tensor(n).unwrap()))
            .collect();
        let data = safetensors::serialize(tensors, None).unwrap();
        std::fs::write(out.join(&file), data).unwrap();
        for n in part {
            weight_map.insert(n.clone(), file.clone().into());
        }
    }
    let index =
        serde_json::json!({"metadata": {"total_size": bytes.len()}, "weight_map": weight_map});
    std::fs::write(
        out.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).unwrap(),
    )
    .unwrap();
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "mllm failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "mllm should have failed:\n{}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

/// A greedy text answer (6 tokens).
fn run_args(model: &str) -> Vec<String> {
    [
        "run",
        "--model",
        model,
        "--prompt",
        "Hello there",
        "--temp",
        "0",
        "-n",
        "6",
    ]
    .map(String::from)
    .to_vec()
}

fn image() -> String {
    root()
        .join("tests/fixtures/qwen3_vl/run_images/resized/a_160x120_128x96.png")
        .display()
        .to_string()
}

fn local_run(args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&common::mllm(&args))
}

/// The Python of tests/fetch_assets.sh's hub venv (huggingface_hub).
fn hub_python() -> PathBuf {
    let python = root().join(".cache/hub-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run `bash tests/fetch_assets.sh` to install huggingface_hub",
        python.display()
    );
    python
}

fn python(hub: &Hub, code: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(hub_python())
        .args(["-c", code])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HOME", hub.hf_home())
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .envs(env.iter().copied())
        .output()
        .expect("run the hub venv's python");
    assert!(
        out.status.success(),
        "huggingface_hub failed:\n{}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_string()
}

#[test]
fn a_sharded_repository_runs_as_its_local_directory() {
    let hub = Hub::start(&[]);
    let pulled = hub.mllm(&["pull", DIR_REPO], &[]);
    let stdout = ok(&pulled);
    let snapshot = PathBuf::from(stdout.trim());
    // huggingface_hub's layout: refs/main names the snapshot; its files link
    // into blobs/.
    let repo_dir = hub.hf_home().join("hub/models--test-org--Tiny-Qwen3-VL");
    let commit = std::fs::read_to_string(repo_dir.join("refs/main")).unwrap();
    assert_eq!(snapshot, repo_dir.join("snapshots").join(commit.trim()));
    let shard = snapshot.join("model-00001-of-00002.safetensors");
    assert!(std::fs::symlink_metadata(&shard)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::canonicalize(&shard)
        .unwrap()
        .starts_with(repo_dir.join("blobs")));
    // Only what the model needs came down.
    let mut got: Vec<String> = std::fs::read_dir(&snapshot)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "chat_template.jinja",
            "config.json",
            "generation_config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "preprocessor_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "video_preprocessor_config.json",
        ]
    );
    // Piped standard error: no progress bar.
    let err = text(&pulled.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains("downloaded 10 files"), "{err}");

    // The same answer as the directory on disk, without downloading again.
    let mark = hub.requests().len();
    let answer = ok(&hub.mllm(
        &run_args(&format!("hf://{DIR_REPO}"))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    ));
    assert_eq!(answer, local_run(&run_args(VL)));
    assert_eq!(hub.downloads_since(mark), Vec::<String>::new());
    eprintln!("hf://{DIR_REPO} answered {answer:?} as {VL}");
}

#[test]
fn a_gguf_type_picks_its_file_and_mmproj_and_answers_as_the_local_pair() {
    let hub = Hub::start(&[]);
    let reference = format!("hf://{GGUF_REPO}:q4_k_m");
    let stdout = ok(&hub.mllm(&["pull", &reference], &[]));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].ends_with("/Tiny-Qwen3-VL-Q4_K_M.gguf"), "{stdout}");
    assert!(
        lines[1].ends_with("/mmproj-Tiny-Qwen3-VL-F16.gguf"),
        "{stdout}"
    );

    // run with an image: the mmproj came with the name.
    let img = image();
    let vl_args = |model: &[&str]| -> Vec<String> {
        let mut a = vec!["run"];
        a.extend_from_slice(model);
        a.extend([
            "--image",
            &img,
            "--prompt",
            "Describe this image.",
            "--temp",
            "0",
            "-n",
            "6",
        ]);
        a.into_iter().map(String::from).collect()
    };
    let hub_answer = ok(&hub.mllm(
        &vl_args(&["--model", &reference])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    ));
    let pairs = root().join(PAIRS);
    let local = local_run(&vl_args(&[
        "--model",
        &pairs
            .join("qwen3_vl_p16_m2_tied_published.gguf")
            .display()
            .to_string(),
        "--mmproj",
        &pairs
            .join("qwen3_vl_p16_m2_tied_published.f16.mmproj.gguf")
            .display()
            .to_string(),
    ]));
    assert_eq!(hub_answer, local);

    // No type: llama.cpp's default Q4_K_M, and the others named.
    let out = hub.mllm(&["pull", GGUF_REPO], &[]);
    assert!(ok(&out).lines().next().unwrap().ends_with("Q4_K_M.gguf"));
    assert!(
        text(&out.stderr).contains("the others: Q8_0"),
        "{}",
        text(&out.stderr)
    );

    // Other commands take the name too: convert (with the mmproj the name
    // brought), inspect, tokenize, serve.
    let out = hub.dir.path().join("tiny.mllm");
    let out = out.to_str().unwrap();
    ok(&hub.mllm(&["convert", &reference, out], &[]));
    let converted = ok(&common::mllm(&[
        "run",
        "--model",
        out,
        "--image",
        &img,
        "--prompt",
        "Describe this image.",
        "--temp",
        "0",
        "-n",
        "6",
    ]));
    assert_eq!(
        converted, local,
        "the .mllm converted from the name answers differently"
    );
    let inspect = ok(&hub.mllm(&["inspect", &reference, "--json"], &[]));
    assert!(inspect.contains("qwen3vl"), "{inspect}");
    let ids = ok(&hub.mllm(&["tokenize", "--model", &reference, "--text", "Hello"], &[]));
    assert_eq!(
        ids,
        ok(&common::mllm(&[
            "tokenize", "--model", VL, "--text", "Hello"
        ]))
    );
    let server = common::http::Server::start_with_env(
        &["--model", &reference],
        &[
            ("HF_ENDPOINT", hub.endpoint.as_str()),
            ("HF_HOME", hub.hf_home().to_str().unwrap()),
        ],
    );
    let models = common::http::get(&server.addr, "/v1/models").json();
    assert_eq!(
        models["data"][0]["id"], "Tiny-Qwen3-VL-GGUF:q4_k_m",
        "{models}"
    );
}

#[test]
fn python_and_mllm_share_one_cache() {
    let hub = Hub::start(&[]);
    // Python downloads the directory repository; mllm uses it as it is.
    let snapshot = python(
        &hub,
        &format!(
            "from huggingface_hub import snapshot_download; print(snapshot_download('{DIR_REPO}'))"
        ),
        &[],
    );
    let mark = hub.requests().len();
    let out = hub.mllm(&["pull", DIR_REPO], &[]);
    assert_eq!(ok(&out).trim(), snapshot);
    assert!(
        text(&out.stderr).contains("already in the cache"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(hub.downloads_since(mark), Vec::<String>::new());
    let requests = hub.requests();
    assert!(
        requests[mark..].iter().all(is_api),
        "{:?}",
        &requests[mark..]
    );

    // mllm downloads the GGUF; Python finds it offline, at the same path.
    let ours = ok(&hub.mllm(&["pull", &format!("{GGUF_REPO}:Q8_0")], &[]));
    let theirs = python(
        &hub,
        &format!("from huggingface_hub import hf_hub_download; print(hf_hub_download('{GGUF_REPO}', 'Tiny-Qwen3-VL-Q8_0.gguf'))"),
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(ours.lines().next().unwrap(), theirs);
    // And online, Python checks the ETag and downloads nothing.
    let mark = hub.requests().len();
    python(
        &hub,
        &format!("from huggingface_hub import hf_hub_download; print(hf_hub_download('{GGUF_REPO}', 'Tiny-Qwen3-VL-Q8_0.gguf'))"),
        &[],
    );
    assert_eq!(hub.downloads_since(mark), Vec::<String>::new());
}

#[test]
fn a_cut_download_resumes_from_its_bytes() {
    // The first body of each blob stops after 4096 bytes.
    let hub = Hub::start(&["--drop-after", "4096"]);
    let stdout = ok(&hub.mllm(&["pull", &format!("{GGUF_REPO}:Q8_0")], &[]));
    let file = PathBuf::from(stdout.lines().next().unwrap());
    let want = std::fs::read(
        root()
            .join(PAIRS)
            .join("qwen3_vl_p8_m3_untied_ropeparams.gguf"),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&file).unwrap(),
        want,
        "the resumed file differs"
    );
    let requests = hub.requests();
    let cut = requests
        .iter()
        .find(|r| r["path"].as_str().unwrap().starts_with("/cdn/") && r["bytes"] == 4096)
        .expect("a cut download");
    let resumed = requests
        .iter()
        .any(|r| r["path"] == cut["path"] && r["range"] == "bytes=4096-");
    assert!(resumed, "no request resumed at byte 4096: {requests:?}");

    // A run killed mid-download leaves blobs/ETAG.part; the next resumes it.
    let want = std::fs::read(
        root()
            .join(PAIRS)
            .join("qwen3_vl_p16_m2_tied_published.gguf"),
    )
    .unwrap();
    let etag = sha256_hex(&want);
    let blobs = hub
        .hf_home()
        .join("hub/models--test-org--Tiny-Qwen3-VL-GGUF/blobs");
    std::fs::write(blobs.join(format!("{etag}.part")), &want[..1000]).unwrap();
    let mark = hub.requests().len();
    let stdout = ok(&hub.mllm(&["pull", &format!("{GGUF_REPO}:Q4_K_M")], &[]));
    let file = PathBuf::from(stdout.lines().next().unwrap());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        want,
        "the resumed file differs"
    );
    let from_part = hub.requests()[mark..]
        .iter()
        .any(|r| r["path"] == format!("/cdn/{etag}") && r["range"] == "bytes=1000-");
    assert!(
        from_part,
        "the .part was not resumed: {:?}",
        &hub.requests()[mark..]
    );
}

fn sha256_hex(data: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_damaged_download_is_removed_and_said() {
    let hub = Hub::start(&["--corrupt"]);
    let err = failed(&hub.mllm(&["pull", &format!("{GGUF_REPO}:Q8_0")], &[]));
    assert!(
        err.contains("arrived damaged") && err.contains("hashes to"),
        "{err}"
    );
    let blobs = hub
        .hf_home()
        .join("hub/models--test-org--Tiny-Qwen3-VL-GGUF/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| n.to_string_lossy().ends_with(".lock")),
        "damaged blobs were kept: {left:?}"
    );
}

#[test]
fn offline_and_unreachable_hubs_use_the_cache() {
    let hub = Hub::start(&[]);
    let reference = format!("hf://{GGUF_REPO}:Q4_K_M");
    // Nothing cached, offline: say so.
    let err = failed(&hub.mllm(&["pull", &reference], &[("HF_HUB_OFFLINE", "1")]));
    assert!(
        err.contains("HF_HUB_OFFLINE is set") && err.contains("not in the cache"),
        "{err}"
    );
    let online = ok(&hub.mllm(&["pull", &reference], &[]));

    let mark = hub.requests().len();
    let offline = ok(&hub.mllm(&["pull", &reference], &[("HF_HUB_OFFLINE", "1")]));
    assert_eq!(offline, online);
    assert_eq!(hub.requests().len(), mark, "HF_HUB_OFFLINE made requests");
    // A type that was never downloaded is not in the cached snapshot.
    let err = failed(&hub.mllm(
        &["pull", &format!("{GGUF_REPO}:Q8_0")],
        &[("HF_HUB_OFFLINE", "1")],
    ));
    assert!(err.contains("Q8_0"), "{err}");

    // A Hub that does not answer: the cache, with a note.
    let dead = hub.mllm(
        &["pull", &reference],
        &[("HF_ENDPOINT", "http://127.0.0.1:9")],
    );
    assert_eq!(ok(&dead), online);
    assert!(
        text(&dead.stderr).contains("cannot reach http://127.0.0.1:9"),
        "{}",
        text(&dead.stderr)
    );
    let err = failed(&hub.mllm(
        &["pull", DIR_REPO],
        &[("HF_ENDPOINT", "http://127.0.0.1:9")],
    ));
    assert!(
        err.contains("cannot reach the Hub at http://127.0.0.1:9") && err.contains("HF_ENDPOINT"),
        "{err}"
    );
}

#[test]
fn failures_say_what_to_do() {
    let hub = Hub::start(&[]);
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: &[Case] = &[
        (
            &["pull", "test-org/No-Such-Model"],
            &[],
            &["test-org/No-Such-Model was not found", "set HF_TOKEN"],
        ),
        (
            &["pull", "test-org/Tiny-Qwen3-VL-GGUF:IQ4_XS"],
            &[],
            &["no file or quantization `IQ4_XS`", "Q4_K_M, Q8_0"],
        ),
        (
            &["pull", "test-org/Tiny-Qwen3-VL@v9"],
            &[],
            &["no revision `v9`"],
        ),
        (
            &["pull", "hf://test-org/a/b"],
            &[],
            &["not a Hugging Face model reference"],
        ),
        (&["pull", GATED_REPO], &[], &["needs a token", "HF_TOKEN"]),
        (
            &["pull", GATED_REPO],
            &[("HF_TOKEN", "hf_wrong")],
            &["is gated", "accept its conditions"],
        ),
        (
            &[
                "run",
                "--model",
                "hf://test-org/No-Such-Model",
                "--prompt",
                "x",
            ],
            &[],
            &["was not found"],
        ),
    ];
    for (args, env, needles) in cases {
        let err = failed(&hub.mllm(args, env));
        for n in *needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in:\n{err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    // The login huggingface-cli saves opens it...
    let token_file = hub.hf_home().join("token");
    std::fs::create_dir_all(hub.hf_home()).unwrap();
    std::fs::write(&token_file, TOKEN).unwrap();
    let out = ok(&hub.mllm(&["pull", GATED_REPO], &[]));
    assert!(out.trim().ends_with("Gated-Tiny-F32.gguf"), "{out}");
    // ... and so does HF_TOKEN, into an empty cache.
    std::fs::remove_file(&token_file).unwrap();
    std::fs::remove_dir_all(hub.hf_home().join("hub")).unwrap();
    assert_eq!(
        ok(&hub.mllm(&["pull", GATED_REPO], &[("HF_TOKEN", TOKEN)])),
        out
    );
    let sent = hub
        .requests()
        .iter()
        .filter(|r| r["path"].as_str().unwrap().contains("/resolve/") && r["status"] == 302)
        .all(|r| r["auth"] == true);
    assert!(sent, "a file request went without the token");
}
