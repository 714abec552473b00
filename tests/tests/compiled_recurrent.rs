//! Compiled execution of models with recurrent layers (Qwen3.5's Gated
//! DeltaNet): each layer's conv and delta-rule state is graph I/O
//! (`state.L.K` in, `new_state.L.K` out), read from and stored back into
//! the cache around each step, so Qwen3.5 and Qwen3.5-MoE prefill chunks
//! and decode steps run as captured graphs. Compiled steps give eager
//! steps' logits bit for bit when both run the same step shapes, the
//! greedy ids of transformers, interleave with eager steps either way,
//! and the runtime's default path no longer falls back to eager steps.

mod common;

use common::golden::load_auto;
use common::*;
use mllm_backends::CpuBackend;
use mllm_interpreter::compile::piece;
use mllm_interpreter::CompiledModel;
use mllm_runtime::Loaded;

/// Every Qwen3.5 text fixture: dense, MoE, and the published
/// `*ForConditionalGeneration` layout of both.
const CASES: &[&str] = &[
    "qwen3_5/qwen3_5_f32",
    "qwen3_5/qwen3_5_bf16",
    "qwen3_5/quant_scaled_f32",
    "qwen3_5_moe/moe_f32",
    "qwen3_5_moe/moe_bf16",
    "qwen3_5_moe/quant_scaled_f32",
    "qwen3_5_cg/dense_f32",
    "qwen3_5_cg/moe_f32",
];

/// Prefill chunk of the compiled runs: whole chunks and a power-of-two
/// tail (fixture prompts are 5 to 40 tokens).
const CHUNK: usize = 3;

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as i32
}

/// A model stepping eagerly (the interpreter) or through graphs.
struct Stepper {
    m: Loaded,
    c: CompiledModel<CpuBackend>,
}

type Cache = std::rc::Rc<std::cell::RefCell<mllm_interpreter::KvCache>>;

impl Stepper {
    fn new(case: &str) -> Stepper {
        Stepper {
            m: load_auto(case),
            c: CompiledModel::new(CpuBackend, 256, CHUNK),
        }
    }

    /// Runs `ids` at `pos..` (the last row's logits), in the pieces a
    /// compiled prefill uses, so eager and compiled runs compute the same
    /// step shapes (the DeltaNet's chunked form sums in another order for
    /// other splits).
    fn run(&mut self, compiled: bool, cache: &Cache, ids: &[i32], pos: usize) -> Vec<f32> {
        let mut at = 0;
        let mut logits = vec![];
        while at < ids.len() {
            let end = at + piece(ids.len() - at, CHUNK);
            let (part, p) = (&ids[at..end], pos + at);
            let t = if compiled {
                self.c
                    .forward(&self.m.runner.model, part, p, &mut cache.borrow_mut(), true)
                    .unwrap_or_else(|e| panic!("{e}"))
            } else {
                self.m
                    .step(cache, part, p, true)
                    .unwrap_or_else(|e| panic!("{}", e.render(false)))
            };
            logits = data(&t);
            at = end;
        }
        logits
    }

    /// Greedy decoding of `n` tokens after `prompt` on a fresh cache, the
    /// prompt compiled or not, the decode steps compiled or not; returns
    /// the ids and every step's logits (the prompt's last row first).
    fn greedy(
        &mut self,
        prompt: &[i32],
        n: usize,
        prefill_compiled: bool,
        decode_compiled: bool,
    ) -> (Vec<i32>, Vec<Vec<f32>>) {
        let cache = new_cache();
        let mut rows = vec![self.run(prefill_compiled, &cache, prompt, 0)];
        let mut ids = vec![];
        while ids.len() < n {
            let next = argmax(rows.last().expect("logits"));
            ids.push(next);
            let pos = prompt.len() + ids.len() - 1;
            rows.push(self.run(decode_compiled, &cache, &[next], pos));
        }
        (ids, rows)
    }
}

/// Largest `max_abs` over paired rows (which panics on a non-finite
/// value, so the fold never meets a NaN).
fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "row counts differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| max_abs(x, y))
        .fold(0.0, f32::max)
}

/// Chunked compiled prefill (chunk 3) and compiled decode equal the same
/// steps run eagerly bit for bit, and give transformers' greedy ids; the
/// whole prompt as one compiled graph (every row's logits) equals the
/// eager forward too.
#[test]
fn qwen3_5_compiled_steps_equal_eager_and_transformers() {
    for case in CASES {
        let mut s = Stepper::new(case);
        let r = reference(case);
        let n = r.greedy.len();
        let (want, eager_rows) = s.greedy(&r.input_ids, n, false, false);
        let (got, rows) = s.greedy(&r.input_ids, n, true, true);
        let err = worst(&rows, &eager_rows);
        eprintln!("{case}: compiled vs eager steps max-abs = {err:.3e}");
        assert_eq!(
            err, 0.0,
            "{case}: compiled steps differ from eager by {err}"
        );
        assert_eq!(got, want, "{case}: compiled greedy ids differ from eager");
        assert_eq!(
            got, r.greedy,
            "{case}: compiled greedy ids differ from transformers"
        );
        assert!(s.c.graph_count() >= 2, "{case}: prefill and decode graphs");

        let model = &s.m.runner.model;
        let eager = data(&full_logits(model, &r.input_ids));
        let mut whole = CompiledModel::new(CpuBackend, 256, 64);
        let compiled = whole
            .forward(model, &r.input_ids, 0, &mut new_cache().borrow_mut(), false)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let err = max_abs(&data(&compiled), &eager);
        eprintln!("{case}: compiled whole prompt vs eager max-abs = {err:.3e}");
        assert_eq!(
            err, 0.0,
            "{case}: compiled prompt differs from eager by {err}"
        );
    }
}

/// The state a step stores is the next step's, whichever way either runs:
/// an eager prompt then compiled decode steps, and a compiled prompt then
/// eager steps, give the all-eager logits bit for bit.
#[test]
fn eager_and_compiled_steps_interleave() {
    for case in ["qwen3_5/qwen3_5_f32", "qwen3_5_moe/moe_bf16"] {
        let mut s = Stepper::new(case);
        let r = reference(case);
        let (want, eager_rows) = s.greedy(&r.input_ids, 6, false, false);
        for (prefill, decode) in [(false, true), (true, false)] {
            let (got, rows) = s.greedy(&r.input_ids, 6, prefill, decode);
            let err = worst(&rows, &eager_rows);
            assert_eq!(
                err, 0.0,
                "{case}: compiled {prefill}/{decode} differs by {err}"
            );
            assert_eq!(got, want, "{case}: compiled {prefill}/{decode}");
        }
    }
}

/// The captured graphs carry each DeltaNet layer's state: inputs
/// `state.L.0` (the conv's last inputs) and `state.L.1` (the delta rule's
/// matrices), outputs `new_state.L.K` of the same types, covering as many
/// positions as the graph has tokens; the attention layers keep KV I/O.
#[test]
fn graphs_carry_the_recurrent_state_as_io() {
    let m = load_auto("qwen3_5/qwen3_5_f32");
    for seq in [1, 4] {
        let raw = mllm_interpreter::compile::capture(&m.runner.model, &CpuBackend, seq, 64, true)
            .unwrap_or_else(|e| panic!("{e}"));
        let g = mllm_graph::passes::all(raw).expect("passes");
        // Layers 0-2 linear attention, layer 3 full attention.
        let layers: Vec<usize> = g.states.iter().map(|s| s.layer).collect();
        assert_eq!(layers, [0, 1, 2]);
        assert_eq!(g.kv.iter().map(|l| l.layer).collect::<Vec<_>>(), [3]);
        for s in &g.states {
            assert_eq!(s.tokens, seq);
            assert_eq!((s.inputs.len(), s.outputs.len()), (2, 2));
            let l = s.layer;
            assert_eq!(g.input(&format!("state.{l}.0")), Some(s.inputs[0]));
            assert_eq!(g.output(&format!("new_state.{l}.1")), Some(s.outputs[1]));
            // conv state [kernel - 1, 2 * 2 * 8 + 4 * 12], matrices [hv, dk, dv].
            assert_eq!(g.values[s.inputs[0]].meta.shape, [3, 80]);
            assert_eq!(g.values[s.inputs[1]].meta.shape, [4, 8, 12]);
        }
    }
}

/// The runtime's default path (`compile_default`, what `mllm run`, `bench`
/// and the server use) now captures Qwen3.5: it stays in graph mode (a
/// script that cannot be captured would have warned "running eagerly" and
/// dropped to eager steps) and still answers transformers' greedy ids,
/// with the prompt's whole chunks as graphs and its tail eager.
#[test]
fn the_default_path_runs_qwen3_5_as_graphs() {
    for case in ["qwen3_5/qwen3_5_f32", "qwen3_5_moe/moe_f32"] {
        let mut m = load_auto(case);
        let r = reference(case);
        m.runner.compile_default(256);
        let got = greedy(&mut m, &r.input_ids, r.greedy.len());
        assert_eq!(m.runner.mode(), "graph", "{case}: fell back to eager steps");
        assert_eq!(got, r.greedy, "{case}");
    }
}

/// A small script over one recurrent layer, with `body` computing `st`
/// (the state read) and writing it back.
fn state_script(body: &str) -> mllm_interpreter::Model {
    let text = format!(
        "module M(c: C) {{\n  fn forward(input_ids, positions, cache, last_only: bool = false) {{\n    let t = size(input_ids, 0)\n{body}\n    return input_ids.float().unsqueeze(1) + sum(st[0], 0, keepdim: true)\n  }}\n}}\nconfig C {{ x: int = 1 }}\n"
    );
    let (prog, diags) = mllm_dsl::check("m.mdl", &text, &mllm_dsl::NoImports);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    let mut exec = mllm_interpreter::Eager::new(CpuBackend);
    mllm_interpreter::Model::load(
        std::rc::Rc::new(prog),
        &serde_json::json!({}),
        "config.json",
        None,
        &mut exec,
    )
    .unwrap_or_else(|_| panic!("load"))
}

/// A graph takes a state of one fixed shape: a script whose state grows
/// from step to step, or whose state has no declared shapes, is refused
/// with the reason; one that keeps its declared shapes is captured.
#[test]
fn states_of_changing_or_undeclared_shapes_are_refused() {
    let cap = |m: &mllm_interpreter::Model| {
        mllm_interpreter::compile::capture(m, &CpuBackend, 2, 16, true)
    };
    let grows = state_script(
        "    let st = cache.layer(0).recurrent_state([[1]])\n    cache.layer(0).set_recurrent_state([concat([st[0], st[0]], 0)], t)",
    );
    let err = cap(&grows).expect_err("refused");
    assert!(
        err.contains("recurrent state 0 is read as f32[1] but written as f32[2]")
            && err.contains("one fixed shape"),
        "{err}"
    );
    // Eagerly the next step's read says the same.
    let cache = new_cache();
    let mut exec = mllm_interpreter::Eager::new(CpuBackend);
    let step = |exec: &mut mllm_interpreter::Eager<CpuBackend>| {
        mllm_runtime::engine::run_forward(&grows, exec, &cache, &[1, 2], 0, true)
    };
    step(&mut exec).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let err = step(&mut exec)
        .expect_err("the second step reads a grown state")
        .render(false);
    assert!(
        err.contains("but `recurrent_state` declares [f32[1]]"),
        "{err}"
    );

    let undeclared = state_script(
        "    let s = cache.layer(0).recurrent_state()\n    let st = if s == none { [zeros([1])] } else { s }\n    cache.layer(0).set_recurrent_state(st, t)",
    );
    let err = cap(&undeclared).expect_err("refused");
    assert!(err.contains("without declaring its shapes"), "{err}");

    let kept = state_script(
        "    let st = cache.layer(0).recurrent_state([[1]])\n    cache.layer(0).set_recurrent_state([st[0] + 1.0], t)",
    );
    let g = cap(&kept).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.states.len(), 1);
    // Replayed, it starts from zeros and stores each step's state with the
    // positions it covers, as eager steps do.
    let mut c = CompiledModel::new(CpuBackend, 16, 2);
    let (eager, compiled) = (new_cache(), new_cache());
    let mut exec = mllm_interpreter::Eager::new(CpuBackend);
    for step in 0..3 {
        let e =
            mllm_runtime::engine::run_forward(&kept, &mut exec, &eager, &[1, 2], 2 * step, true)
                .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let k = c
            .forward(&kept, &[1, 2], 2 * step, &mut compiled.borrow_mut(), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(data(&e), data(&k), "step {step}");
    }
    for cache in [&eager, &compiled] {
        let cache = cache.borrow();
        assert_eq!(cache.len(0), 6);
        assert_eq!(data(&cache.state(0).expect("a state")[0]), [3.0]);
    }
}

/// ONNX export captures Qwen3.5 now (the state is graph I/O) but still
/// refuses it, cached or not: Gated DeltaNet's ops have no ONNX form yet.
#[test]
fn onnx_export_refuses_the_delta_rule_ops() {
    use mllm_cli::commands::export::{run, ExportArgs};
    let tmp = tempfile::tempdir().expect("tmp");
    for context in [Some(16), None] {
        let err = run(ExportArgs {
            script: script("qwen3_5"),
            model: fixture("qwen3_5/qwen3_5_f32").display().to_string(),
            format: "onnx".into(),
            seq: 3,
            context,
            no_cache: context.is_none(),
            quant: "dequantize".into(),
            target: "generic".into(),
            out: tmp.path().join("out"),
        })
        .map(|_| ())
        .expect_err("refused")
        .render(false);
        assert!(
            err.contains(
                "`causal_conv1d` (Gated DeltaNet, a recurrent layer) is not exportable to ONNX yet"
            ),
            "{context:?}: {err}"
        );
    }
}

/// Qwen3.5 with images: the prompt is prefilled eagerly (image placement
/// reads data), leaving the DeltaNet states in the cache; compiled decode
/// steps continue from them with the eager steps' logits bit for bit and
/// transformers' greedy ids.
#[test]
fn qwen3_5_decode_after_images_runs_compiled() {
    use mllm_runtime::images::read_images;
    for case in ["dense", "moe"] {
        let path = fixture(&format!("qwen3_5_vl/{case}")).join("reference_one_image.safetensors");
        let ids = ref_i32s(&path, "input_ids");
        let want = ref_i32s(&path, "greedy_ids");
        let images = read_images(path.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut m = load_auto(&format!("qwen3_5_vl/{case}"));
        let (eager, compiled) = (new_cache(), new_cache());
        let (l0, delta) = m
            .prefill_images(&eager, &ids, &images, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        m.prefill_images(&compiled, &ids, &images, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut c = CompiledModel::new(CpuBackend, 512, 32);
        let mut got = vec![argmax(&data(&l0))];
        while got.len() < want.len() {
            let next = *got.last().expect("an id");
            let pos = ((ids.len() + got.len() - 1) as i64 + delta) as usize;
            let e = data(&m.step(&eager, &[next], pos, true).expect("eager step"));
            let k = c
                .forward(
                    &m.runner.model,
                    &[next],
                    pos,
                    &mut compiled.borrow_mut(),
                    true,
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(e, data(&k), "{case}: step {}", got.len());
            got.push(argmax(&e));
        }
        assert_eq!(got, want, "{case}: greedy ids after the image");
    }
}
