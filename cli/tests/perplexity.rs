//! `mllm perplexity` (issue #26 item 3) on the real SmolLM2-135M-Instruct
//! Q4_1 GGUF over a short public-domain text
//! (tests/fixtures/perplexity/gettysburg.txt): with exact f32 weights
//! against transformers on the dequantized GGUF, by the same method
//! (make_reference.py); with the quantized kernels beside
//! llama-perplexity's figure on the same file; then the KL divergence
//! between the two runs, and the errors.

mod common;

use common::{mllm, root, smollm2, text};
use serde_json::Value;

fn reference() -> Value {
    let p = root().join("tests/fixtures/perplexity/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn gettysburg() -> String {
    root()
        .join("tests/fixtures/perplexity/gettysburg.txt")
        .display()
        .to_string()
}

/// `mllm perplexity ... --json`'s answer.
fn ppl_json(extra: &[&str]) -> Value {
    let model = smollm2();
    let file = gettysburg();
    let mut args = vec!["perplexity", "-m", &model, "-c", "128", "-t", "2", "--json"];
    if !extra.contains(&"--kl-divergence") {
        args.extend(["-f", &file]);
    }
    args.extend(extra);
    let out = mllm(&args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_str(text(&out.stdout).trim()).unwrap()
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

#[test]
fn exact_weights_match_transformers() {
    let r = reference();
    let model = smollm2();
    let file = gettysburg();
    let out = mllm(&[
        "perplexity",
        "-m",
        &model,
        "-f",
        &file,
        "-c",
        "128",
        "-t",
        "2",
        "--dequantize",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    // The last line as llama-perplexity prints it: 4 and 5 decimals.
    let last = stdout.lines().last().unwrap_or("");
    let (x, y) = last
        .strip_prefix("Final estimate: PPL = ")
        .and_then(|rest| rest.split_once(" +/- "))
        .unwrap_or_else(|| panic!("last line: {last}"));
    assert_eq!(
        (
            x.split('.').nth(1).map(str::len),
            y.split('.').nth(1).map(str::len)
        ),
        (Some(4), Some(5)),
        "{last}"
    );
    let close = |got: &str, want: f64, tol: f64| {
        let g: f64 = got.parse().unwrap_or_else(|_| panic!("{got} in {last}"));
        assert!((g / want - 1.0).abs() < tol, "{g} vs {want} ({last})");
    };
    close(x, f(&r, "ppl"), 1e-4);
    close(y, f(&r, "ppl_stderr"), 1e-3);
    // Progress as llama-perplexity prints it, `[chunk]running PPL,`.
    let line = stderr.lines().rfind(|l| l.starts_with('[')).unwrap_or("");
    let progress: Vec<f64> = line
        .split(',')
        .filter_map(|p| p.trim().strip_prefix('[')?.split_once(']')?.1.parse().ok())
        .collect();
    let want: Vec<f64> = r["ppl_after_each_chunk"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(progress.len(), want.len(), "{stderr}");
    for (g, w) in progress.iter().zip(&want) {
        assert!((g / w - 1.0).abs() < 1e-4, "{g} vs {w}: {stderr}");
    }
    let v = ppl_json(&["--dequantize"]);
    assert!((f(&v, "ppl") / f(&r, "ppl") - 1.0).abs() < 1e-4, "{v}");
    assert!(
        (f(&v, "ppl_stderr") / f(&r, "ppl_stderr") - 1.0).abs() < 1e-3,
        "{v}"
    );
    assert_eq!(v["chunks"], r["chunks"]);
    assert_eq!(v["ctx"], 128);
}

/// The quantized kernels (8-bit activations, as llama.cpp's) against
/// llama-perplexity on the same file: measured 11.50 against 11.11 (the
/// exact weights give 11.24; each engine's rounding moves it a few
/// percent on 189 scored tokens), so the bound is 5%.
#[test]
fn quantized_kernels_are_near_llama_perplexity_and_kl_compares_runs() {
    let r = reference();
    let llama = r["llama_perplexity"]["ppl"].as_f64().unwrap();
    let base = std::env::temp_dir().join(format!("mllm-kl-base-{}", std::process::id()));
    let base = base.to_str().unwrap();
    // The exact run writes the base; the quantized run is compared with it.
    let exact = ppl_json(&["--dequantize", "--kl-divergence-base", base]);
    let q = ppl_json(&[]);
    let ratio = f(&q, "ppl") / llama;
    assert!(
        (ratio - 1.0).abs() < 0.05,
        "{} vs llama-perplexity {llama}",
        f(&q, "ppl")
    );
    let kl = ppl_json(&["--kl-divergence-base", base, "--kl-divergence"]);
    assert_eq!(f(&kl, "ppl"), f(&q, "ppl"), "the same rows are scored");
    let kld = f(&kl, "kld");
    assert!(kld > 1e-4 && kld < 0.1, "{kl}");
    assert!(f(&kl, "same_top") > 0.8, "{kl}");
    assert!(f(&kl, "rms_dp") > 0.0 && f(&kl, "rms_dp") < 0.1, "{kl}");
    // The base against itself: only its f16 storage differs.
    let same = ppl_json(&[
        "--dequantize",
        "--kl-divergence-base",
        base,
        "--kl-divergence",
    ]);
    assert_eq!(f(&same, "ppl"), f(&exact, "ppl"));
    assert!(f(&same, "kld") < 1e-4, "{same}");
    assert_eq!(f(&same, "same_top"), 1.0, "{same}");
    // A damaged base file is refused, saying what it is.
    let bytes = std::fs::read(base).unwrap();
    std::fs::write(base, &bytes[..bytes.len() - 7]).unwrap();
    let model = smollm2();
    let out = mllm(&[
        "perplexity",
        "-m",
        &model,
        "--kl-divergence-base",
        base,
        "--kl-divergence",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("header says"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_file(base);
}

#[test]
fn too_short_a_text_names_both_numbers() {
    let model = smollm2();
    let file = gettysburg();
    let out = mllm(&["perplexity", "-m", &model, "-f", &file, "-c", "512"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("389 tokens") && err.contains("1024"), "{err}");
}
