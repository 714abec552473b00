//! Compiled execution equals eager execution: every golden text model's
//! forward is captured into graphs (prefill chunks and 1-token decode),
//! passed through the graph passes and replayed without the interpreter;
//! logits agree within 1e-5 and greedy ids are identical (and equal
//! transformers' where a reference exists). Qwen3-VL: images are prefilled
//! eagerly (their placement reads data), the text decoder after them runs
//! compiled.

mod common;

use common::*;
use mllm_backends::CpuBackend;
use mllm_interpreter::CompiledModel;
use mllm_runtime::Loaded;

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as i32
}

/// Greedy decoding with every step compiled; prefill in chunks of `chunk`.
fn compiled_greedy(
    model: &mllm_interpreter::Model,
    prompt: &[i32],
    n: usize,
    chunk: usize,
) -> Vec<i32> {
    let mut c = CompiledModel::new(CpuBackend, 256, chunk);
    let cache = new_cache();
    let mut logits = c
        .forward(model, prompt, 0, &mut cache.borrow_mut(), true)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![];
    while got.len() < n {
        let next = argmax(&data(&logits));
        got.push(next);
        let pos = prompt.len() + got.len() - 1;
        logits = c
            .forward(model, &[next], pos, &mut cache.borrow_mut(), true)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(c.graph_count() >= 2, "prefill and decode graphs");
    got
}

/// Compiled prefill logits and compiled greedy ids against eager ones;
/// returns the ids.
fn compiled_matches_eager(m: &mut Loaded, ids: &[i32], n: usize, case: &str) -> Vec<i32> {
    // All rows of the prompt at once, compiled vs eager.
    let eager = data(&full_logits(&m.runner.model, ids));
    let mut c = CompiledModel::new(CpuBackend, 256, 64);
    let compiled = c
        .forward(
            &m.runner.model,
            ids,
            0,
            &mut new_cache().borrow_mut(),
            false,
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let err = max_abs(&data(&compiled), &eager);
    eprintln!("{case}: compiled prefill vs eager max-abs = {err:.3e}");
    assert!(err <= 1e-5, "{case}: compiled prefill differs by {err}");
    // Greedy: chunked compiled prefill (chunk 3: full chunks and a
    // remainder) and compiled decode give the eager ids.
    let want = greedy(m, ids, n);
    let got = compiled_greedy(&m.runner.model, ids, n, 3);
    assert_eq!(got, want, "{case}: compiled greedy ids differ from eager");
    got
}

fn check_text_model(script_name: &str, case: &str, with_reference: bool) {
    let mut m = load_with(&script(script_name), case);
    let r = reference(case);
    let got = compiled_matches_eager(&mut m, &r.input_ids, r.greedy.len(), case);
    if with_reference {
        assert_eq!(
            got, r.greedy,
            "{case}: compiled greedy ids differ from transformers"
        );
    }
}

/// Quantized weights go through other kernels (and, compiled, through
/// merged q/k/v and gate/up linears with the norm folded in): compiled
/// still equals eager on converted files of several types.
#[test]
fn quantized_models_compiled_equal_eager() {
    let case = "quant_scaled_f32";
    let r = reference(case);
    let dir = tempfile::tempdir().expect("tmp");
    for ty in ["q4_0", "q8_0", "q4_k", "w8a8", "w4a16_g32", "f16"] {
        let out = dir.path().join(format!("{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let mut m = match mllm_runtime::load(&qwen3_script(), out.to_str().expect("utf-8")) {
            Ok(m) => m,
            Err(e) => panic!("loading {ty} failed:\n{}", e.render(false)),
        };
        compiled_matches_eager(&mut m, &r.input_ids, 6, &format!("{case} as {ty}"));
    }
}

#[test]
fn qwen3_compiled_equals_eager() {
    for case in QWEN3_CASES {
        check_text_model("qwen3", case, true);
    }
}

#[test]
fn llama_and_qwen2_compiled_equal_eager() {
    for case in LLAMA_CASES {
        check_text_model("llama", &format!("llama/{case}"), true);
    }
    for case in ["gqa_tied_f32", "untied_bf16"] {
        check_text_model("qwen2", &format!("qwen2/{case}"), true);
    }
}

/// Decode steps after an image prompt: eager and compiled give the same
/// logits and the same greedy ids.
#[test]
fn qwen3_vl_text_decoder_compiled_after_images() {
    use mllm_runtime::images::read_images;
    for config in ["p16_m2_tied_published", "p8_m3_untied_ropeparams"] {
        let dir = fixture(&format!("qwen3_vl/{config}"));
        let path = dir.join("reference_one_image.safetensors");
        let ids = ref_i32s(&path, "input_ids");
        let images = read_images(path.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut m = load_with(&script("qwen3_vl"), &format!("qwen3_vl/{config}"));
        let eager_cache = new_cache();
        let compiled_cache = new_cache();
        let (l0, delta) = m
            .prefill_images(&eager_cache, &ids, &images, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        m.prefill_images(&compiled_cache, &ids, &images, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut c = CompiledModel::new(CpuBackend, 512, 32);
        let (mut next_e, mut next_c) = (argmax(&data(&l0)), argmax(&data(&l0)));
        let mut worst = 0f32;
        for j in 0..6 {
            assert_eq!(next_e, next_c, "{config}: step {j} greedy ids differ");
            let pos = ((ids.len() + j) as i64 + delta) as usize;
            let e = data(
                &m.step(&eager_cache, &[next_e], pos, true)
                    .expect("eager step"),
            );
            let k = data(
                &c.forward(
                    &m.runner.model,
                    &[next_c],
                    pos,
                    &mut compiled_cache.borrow_mut(),
                    true,
                )
                .unwrap_or_else(|e| panic!("{config}: {e}")),
            );
            worst = worst.max(max_abs(&e, &k));
            next_e = argmax(&e);
            next_c = argmax(&k);
        }
        eprintln!("{config}: compiled decode after images vs eager max-abs = {worst:.3e}");
        assert!(
            worst <= 1e-5,
            "{config}: compiled decode differs by {worst}"
        );
    }
}

/// A forward whose control flow reads tensor data cannot be captured, and
/// says why.
#[test]
fn data_dependent_forwards_are_refused() {
    let m = load_with(&script("qwen3_vl"), "qwen3_vl/p16_m2_tied_published");
    // Capturing the plain text forward works ...
    mllm_interpreter::compile::capture(&m.runner.model, &CpuBackend, 2, 16, true)
        .expect("text forward captures");
    // ... but `to_list` over a tensor is refused.
    let text = "module M(c: C) {\n  fn forward(input_ids, positions, cache, last_only: bool = false) {\n    let n = len(to_list(input_ids))\n    return input_ids.float().unsqueeze(1) * float(n)\n  }\n}\nconfig C { x: int = 1 }\n";
    let (prog, diags) = mllm_dsl::check("m.mdl", text, &mllm_dsl::NoImports);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    let mut exec = mllm_interpreter::Eager::new(CpuBackend);
    let model = mllm_interpreter::Model::load(
        std::rc::Rc::new(prog),
        &serde_json::json!({}),
        "config.json",
        None,
        &mut exec,
    )
    .unwrap_or_else(|_| panic!("load"));
    let err =
        mllm_interpreter::compile::capture(&model, &CpuBackend, 2, 16, true).expect_err("refused");
    assert!(err.contains("reads the data"), "{err}");
}

/// A capture keeps only the graph, so its recording run leaves the
/// linears' products out (zeros in their place: capturing a shape then
/// costs a fraction of a step): the graph is the one a recording that
/// computes every op gives, op for op, for one and several rows, a
/// prompt's last row and every row's logits, on f32 and bf16 weights,
/// with experts routed by a linear's product and with recurrent layers.
#[test]
fn captures_without_the_linears_products_record_the_same_graph() {
    let cases = [
        ("qwen3", "gqa_tied_f32"),
        ("qwen3", "untied_bf16_ropeparams"),
        ("gemma3", "gemma3/gemma3_bf16"),
        ("qwen3_moe", "qwen3_moe/moe_f32"),
        ("qwen3_5", "qwen3_5/qwen3_5_f32"),
    ];
    for (name, case) in cases {
        let m = match name {
            "qwen3" => load_case(case),
            _ => load_with(&script(name), case),
        };
        let model = &m.runner.model;
        for (seq, last_only) in [(1, true), (3, false), (5, true)] {
            let fast = mllm_interpreter::compile::capture(model, &CpuBackend, seq, 32, last_only)
                .unwrap_or_else(|e| panic!("{e}"));
            let full = mllm_interpreter::compile::capture_computing_all(
                model,
                &CpuBackend,
                seq,
                32,
                last_only,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let (a, b) = (
                mllm_graph::text::to_text(&fast),
                mllm_graph::text::to_text(&full),
            );
            assert_eq!(a, b, "{case}, {seq} rows");
            assert!(a.contains("= linear("), "{case}: no linear in\n{a}");
        }
    }
}

/// The compiled graphs above are the fused ones: each decoder layer's MLP
/// middle is one `gated_act`, q/k/v and gate/up are merged linears with the
/// RMSNorm before them folded in (the final norm folds into the LM head),
/// and only the per-head q/k norms remain as norms.
#[test]
fn qwen3_decode_graph_is_fused() {
    let m = load_case("gqa_tied_f32");
    let raw = mllm_interpreter::compile::capture(&m.runner.model, &CpuBackend, 1, 64, true)
        .unwrap_or_else(|e| panic!("{e}"));
    let g = mllm_graph::passes::all(raw.clone()).expect("passes");
    let text = mllm_graph::text::to_text(&g);
    let count = |s: &str| text.matches(s).count();
    let layers = 2;
    assert_eq!(count("= gated_act{act: Silu}"), layers, "{text}");
    for (parts, n) in [(3, layers), (2, layers), (1, 1)] {
        let op = format!("= merged_linear{{parts: {parts}, norm_eps: Some(");
        assert_eq!(count(&op), n, "{op}\n{text}");
    }
    // o_proj and down_proj read no norm and share no input.
    assert_eq!(count("= linear("), 2 * layers, "{text}");
    assert_eq!(count("= rms_norm{"), 2 * layers, "{text}");
    assert!(!text.contains("unary{Silu}"), "{text}");
    assert!(g.node_count() < raw.node_count());
}

/// Gemma's norms scale by `1 + w`: compiled, those adds run once when the
/// graph is bound to the weights (`fold_params`), so the decode graph has
/// no node left that reads a norm weight, and compiled still equals eager
/// (and transformers' greedy ids) on f32 and bf16 weights.
#[test]
fn gemma_norm_gains_fold_when_bound() {
    use mllm_graph::{Def, Graph};
    for case in ["gemma3/gemma3_f32", "gemma3/gemma3_bf16"] {
        let m = load_with(&script("gemma3"), case);
        let raw = mllm_interpreter::compile::capture(&m.runner.model, &CpuBackend, 1, 64, true)
            .unwrap_or_else(|e| panic!("{e}"));
        let weights: std::collections::HashMap<&str, &mllm_backends::Tensor> = m
            .runner
            .model
            .weights
            .iter()
            .map(|(n, t)| (n.as_str(), t))
            .collect();
        let folded = mllm_graph::passes::fold_params::fold_params(&raw, &|n| {
            weights.get(n).map(|t| (*t).clone())
        })
        .expect("fold_params");
        let reads_norm = |g: &Graph| {
            g.values
                .iter()
                .filter(|v| {
                    match &v.def {
                    Def::Node { inputs, .. } => inputs.iter().any(|&i| {
                        matches!(&g.values[i].def, Def::Param { name } if name.contains("norm"))
                    }),
                    _ => false,
                }
                })
                .count()
        };
        assert!(
            reads_norm(&raw) > 0,
            "{case}: the captured graph reads norm weights"
        );
        assert_eq!(reads_norm(&folded), 0, "{case}: norm gains left as nodes");
        assert!(folded.node_count() < raw.node_count());
        check_text_model("gemma3", case, true);
    }
}
