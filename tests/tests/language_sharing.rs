//! The language's code-sharing features at run time: a script written with
//! config extension, module aliases, module-level `let` and `+=` on lists
//! (tests/lang/qwen3_shared.mdl, which also calls a sibling module function) computes exactly what the shipped Qwen3
//! script computes on the Qwen3 fixtures, and a shared stdlib decoder
//! honours `rope_scaling` for every model built on it.

mod common;

use common::*;

#[test]
fn shared_script_equals_the_shipped_one() {
    let shared = root().join("tests/lang/qwen3_shared.mdl");
    let shared = shared.to_str().expect("utf-8");
    for case in QWEN3_CASES {
        let r = reference(case);
        let mut a = load_case(case);
        let mut b = load_with(shared, case);
        let la = data(
            &a.step(&new_cache(), &r.input_ids, 0, false)
                .expect("shipped"),
        );
        let lb = data(
            &b.step(&new_cache(), &r.input_ids, 0, false)
                .expect("shared"),
        );
        assert_eq!(la, lb, "{case}: the shared-feature script differs");
    }
}

/// Qwen3 ignored `rope_scaling` before the shared decoder. Now linear
/// scaling changes the logits at positions > 0 but not at position 0 (every
/// angle is 0 there), and a scaling the stdlib lacks (YaRN) is refused.
#[test]
fn qwen3_honours_rope_scaling() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = fixture("gqa_tied_f32");
    std::fs::copy(
        src.join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .expect("copy weights");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config"))
            .expect("json");
    let r = reference("gqa_tied_f32");
    let path = dir.path().to_str().expect("utf-8").to_string();
    let logits = |cfg: &serde_json::Value| {
        std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write");
        let mut m = match mllm_runtime::load(&qwen3_script(), &path) {
            Ok(m) => m,
            Err(e) => panic!("{}", e.render(false)),
        };
        data(
            &m.step(&new_cache(), &r.input_ids, 0, false)
                .expect("forward"),
        )
    };
    let plain = logits(&cfg);
    cfg["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 2.0});
    let scaled = logits(&cfg);
    assert!(
        max_abs(&plain, &scaled) > 1e-2,
        "rope_scaling changed nothing"
    );
    let vocab = r.vocab;
    assert!(max_abs(&plain[..vocab], &scaled[..vocab]) < 1e-6);
    cfg["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).expect("write");
    let mut m = mllm_runtime::load(&qwen3_script(), &path).expect("loads");
    let err = m
        .step(&new_cache(), &r.input_ids, 0, false)
        .expect_err("yarn is refused");
    let msg = format!("{err:?}");
    assert!(
        msg.contains("yarn") && msg.contains("not supported"),
        "{msg}"
    );
}

/// A script's mistakes with the new forms are load errors that point at
/// the script: an alias that builds something other than a module, and a
/// module built inside a `let` (which names no checkpoint path).
#[test]
fn misused_aliases_and_lets_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let fixture = fixture("gqa_tied_f32");
    let cases = [
        (
            "import nn\nconfig Qwen3 : nn.DecoderConfig {}\nmodule Qwen3ForCausalLM(c: Qwen3) = c.hidden_size\n",
            "is an alias, but its expression built a int",
        ),
        (
            "import nn\nconfig Qwen3 : nn.DecoderConfig {}\nmodule Qwen3ForCausalLM(c: Qwen3) {\n  let norm = nn.RMSNorm(c.hidden_size)\n  fn forward(x) { return x }\n}\n",
            "can only be created in a member declaration",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.mdl"));
        std::fs::write(&path, text).expect("write");
        let err = match mllm_runtime::load(
            path.to_str().expect("utf-8"),
            fixture.to_str().expect("utf-8"),
        ) {
            Ok(_) => panic!("case {i} should not load"),
            Err(e) => e.render(false),
        };
        assert!(err.contains(want), "case {i}: {err}");
        assert!(
            err.contains(&format!("bad{i}.mdl:")),
            "case {i} names the script line: {err}"
        );
    }
}
