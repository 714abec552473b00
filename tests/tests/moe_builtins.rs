//! The mixture-of-experts builtins from a script: `topk`, `gather` and
//! `moe_linear` (stacked and listed expert weights, shared and per-slot
//! activations) on random data, each against a naive loop over the same
//! values here; a Qwen3-MoE-style sparse block (router softmax, top-k,
//! renormalised weights, experts, weighted sum) likewise; and that block
//! captured into a graph, passed through the graph passes and replayed
//! compiled, equal to its eager run.

use std::collections::HashMap;
use std::rc::Rc;

use mllm_backends::quant::{self, QuantType};
use mllm_backends::{CpuBackend, KvCache, Tensor};
use mllm_dsl::program::Program;
use mllm_interpreter::{Capture, Eager, Executor, Interp, Value};

const SCRIPT: &str = r#"
fn route(x, k) {
  let (values, indices) = topk(x, k)
  return (values, indices)
}

fn pick(x, dim, index) {
  return gather(x, dim, index)
}

fn listed(x, ids, experts) {
  return moe_linear(x, ids, [w for w in experts])
}

fn stacked(x, ids, w) {
  return moe_linear(x, ids, w)
}

fn sparse_block(x, router, experts, k) {
  let probs = softmax(linear(x, router), -1)
  let (p, ids) = topk(probs, k)
  let weights = p / sum(p, -1, keepdim: true)
  let y = moe_linear(x, ids, experts)
  return sum(y * unsqueeze(weights, -1), 1)
}
"#;

fn program() -> Program {
    let (prog, diags) = mllm_dsl::check("moe.mdl", SCRIPT, &mllm_dsl::NoImports);
    assert!(
        diags.is_empty(),
        "{}",
        mllm_dsl::diagnostic::render_all(&diags, &prog.sources, false)
    );
    prog
}

fn call(
    prog: &Program,
    exec: &mut dyn Executor,
    name: &str,
    args: Vec<Value>,
) -> Result<Value, String> {
    let f = prog
        .fns
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no fn {name}"));
    Interp::new(prog, exec)
        .call_function(f, None, args, vec![])
        .map_err(|e| e.render(&prog.sources, false))
}

fn tensor(v: &Value) -> Tensor {
    match v {
        Value::Tensor(t) => t.clone(),
        other => panic!("expected a tensor, got {other:?}"),
    }
}

fn t(x: &Tensor) -> Value {
    Value::Tensor(x.clone())
}

/// splitmix64 values in [-1, 1).
fn vals(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn f32s(v: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_f32(v, shape.to_vec()).expect("f32 tensor")
}

fn i32s(v: Vec<i32>, shape: &[usize]) -> Tensor {
    Tensor::from_i32(v, shape.to_vec()).expect("i32 tensor")
}

/// Ids in `0..used` (of `e` experts: the rest get no rows).
fn ids(seed: u64, t: usize, s: usize, used: usize) -> Vec<i32> {
    vals(seed, t * s)
        .iter()
        .map(|v| (((v + 1.0) / 2.0 * used as f32) as usize % used) as i32)
        .collect()
}

#[test]
fn topk_gives_the_largest_values_and_their_indexes() {
    let prog = program();
    let mut exec = Eager::cpu();
    for (rows, n, k, seed) in [(5, 9, 3, 1u64), (1, 64, 8, 2), (7, 4, 4, 3), (3, 33, 1, 4)] {
        // Rounded to quarters: ties, which go to the lower index.
        let x: Vec<f32> = vals(seed, rows * n)
            .iter()
            .map(|v| (v * 4.0).round() / 4.0)
            .collect();
        let out = call(
            &prog,
            &mut exec,
            "route",
            vec![t(&f32s(x.clone(), &[rows, n])), Value::Int(k as i64)],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let Value::Tuple(pair) = out else {
            panic!("topk returned {out:?}")
        };
        let (values, indices) = (tensor(&pair[0]), tensor(&pair[1]));
        assert_eq!(values.shape(), &[rows, k]);
        assert_eq!(indices.shape(), &[rows, k]);
        let (vs, is) = (values.f32s().expect("f32"), indices.i32s().expect("i32"));
        for r in 0..rows {
            // Naive: k times, the largest value not yet taken, lowest index
            // first among equals.
            let row = &x[r * n..(r + 1) * n];
            let mut taken = vec![false; n];
            for j in 0..k {
                let mut best: Option<usize> = None;
                for i in 0..n {
                    if !taken[i] && best.is_none_or(|b| row[i] > row[b]) {
                        best = Some(i);
                    }
                }
                let b = best.expect("k <= n");
                taken[b] = true;
                assert_eq!(is[r * k + j], b as i32, "row {r} pick {j} of {row:?}");
                assert_eq!(vs[r * k + j], row[b], "row {r} pick {j}");
            }
        }
    }
}

#[test]
fn gather_picks_along_each_dim() {
    let prog = program();
    let mut exec = Eager::cpu();
    let shape = [3usize, 4, 5];
    let x = vals(10, 60);
    for dim in 0..3 {
        let mut is = shape;
        is[dim] = 6;
        let count: usize = is.iter().product();
        let idx: Vec<i32> = ids(11 + dim as u64, count, 1, shape[dim]);
        let out = call(
            &prog,
            &mut exec,
            "pick",
            vec![
                t(&f32s(x.clone(), &shape)),
                Value::Int(dim as i64),
                t(&i32s(idx.clone(), &is)),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let got = tensor(&out);
        assert_eq!(got.shape(), &is);
        let got = got.f32s().expect("f32");
        let at = |a: usize, b: usize, c: usize| (a * shape[1] + b) * shape[2] + c;
        for a in 0..is[0] {
            for b in 0..is[1] {
                for c in 0..is[2] {
                    let o = (a * is[1] + b) * is[2] + c;
                    let mut src = [a, b, c];
                    src[dim] = idx[o] as usize;
                    assert_eq!(got[o], x[at(src[0], src[1], src[2])], "dim {dim} at {o}");
                }
            }
        }
    }
    // An index past the dimension is an error, not a read out of bounds.
    let bad = call(
        &prog,
        &mut exec,
        "pick",
        vec![
            t(&f32s(x, &shape)),
            Value::Int(1),
            t(&i32s(vec![4; 60], &shape)),
        ],
    );
    assert!(bad.is_err_and(|e| e.contains("outside")), "index 4 of 4");
}

/// `out[i, j] = W[ids[i, j]] @ x_row(i, j)`, naively, in f64.
fn naive_moe(
    x: &[f32],
    per_slot: bool,
    ids: &[i32],
    s: usize,
    w: &[Vec<f32>],
    n: usize,
    k: usize,
) -> Vec<f32> {
    let mut out = vec![];
    for (p, &e) in ids.iter().enumerate() {
        let r = if per_slot { p } else { p / s };
        for j in 0..n {
            let mut acc = 0f64;
            for c in 0..k {
                acc += x[r * k + c] as f64 * w[e as usize][j * k + c] as f64;
            }
            out.push(acc as f32);
        }
    }
    out
}

#[test]
fn moe_linear_multiplies_each_row_by_its_expert() {
    let prog = program();
    let mut exec = Eager::cpu();
    // (tokens, slots, experts, experts used, n, k, per-slot x, q8_0 weights)
    let sets = [
        (7, 2, 5, 3, 9, 33, false, false),
        (1, 4, 9, 9, 16, 40, true, false),
        (23, 3, 6, 4, 24, 64, false, true),
        (12, 1, 2, 2, 5, 7, true, false),
    ];
    for (si, (tk, s, e, used, n, k, per_slot, q8)) in sets.into_iter().enumerate() {
        let seed = 100 + si as u64;
        let xs = if per_slot {
            vec![tk, s, k]
        } else {
            vec![tk, k]
        };
        let x = vals(seed, xs.iter().product());
        let id = ids(seed ^ 3, tk, s, used);
        let wv: Vec<Vec<f32>> = (0..e).map(|i| vals(seed * 31 + i as u64, n * k)).collect();
        let (experts, wf): (Vec<Tensor>, Vec<Vec<f32>>) = if q8 {
            wv.iter()
                .map(|w| {
                    let b = quant::quantize(QuantType::Q8_0, w).expect("q8_0");
                    let deq = quant::dequantize(QuantType::Q8_0, &b, n * k).expect("dequantize");
                    (
                        Tensor::from_quant(b, QuantType::Q8_0, vec![n, k]).expect("q8_0"),
                        deq,
                    )
                })
                .unzip()
        } else {
            (
                wv.iter().map(|w| f32s(w.clone(), &[n, k])).collect(),
                wv.clone(),
            )
        };
        let want = naive_moe(&x, per_slot, &id, s, &wf, n, k);
        let xt = f32s(x.clone(), &xs);
        let idt = i32s(id.clone(), &[tk, s]);
        let list = Value::List(Rc::new(experts.iter().map(t).collect()));
        let got = tensor(
            &call(&prog, &mut exec, "listed", vec![t(&xt), t(&idt), list])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(got.shape(), &[tk, s, n]);
        // q8_0 weights meet activations rounded to int8 per 32 values: at
        // most half a step (max |x| / 254) per weight magnitude.
        let got_v = got.f32s().expect("f32");
        for (i, (a, b)) in got_v.iter().zip(&want).enumerate() {
            let (p, j) = (i / n, i % n);
            let r = if per_slot { p } else { p / s };
            let amax = x[r * k..(r + 1) * k]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            let wsum: f32 = wf[id[p] as usize][j * k..(j + 1) * k]
                .iter()
                .map(|v| v.abs())
                .sum();
            let tol = if q8 {
                wsum * amax / 254.0 + 1e-4
            } else {
                1e-4 * (1.0 + b.abs())
            };
            assert!(
                (a - b).abs() <= tol,
                "set {si} out[{i}] = {a}, naive {b}, bound {tol}"
            );
        }
        if !q8 {
            // The same experts as one [e, n, k] tensor: the same values.
            let stack = f32s(wf.concat(), &[e, n, k]);
            let again = tensor(
                &call(
                    &prog,
                    &mut exec,
                    "stacked",
                    vec![t(&xt), t(&idt), t(&stack)],
                )
                .unwrap_or_else(|e| panic!("{e}")),
            );
            assert_eq!(
                again.f32s().expect("f32"),
                got.f32s().expect("f32"),
                "set {si}"
            );
        }
    }
}

#[test]
fn bad_expert_ids_and_k_are_script_errors() {
    let prog = program();
    let mut exec = Eager::cpu();
    let x = f32s(vals(1, 8), &[2, 4]);
    let w = f32s(vals(2, 3 * 5 * 4), &[3, 5, 4]);
    let err = call(
        &prog,
        &mut exec,
        "stacked",
        vec![t(&x), t(&i32s(vec![0, 3], &[2, 1])), t(&w)],
    )
    .expect_err("id 3 of 3 experts");
    assert!(err.contains("outside the 3 experts"), "{err}");
    let err = call(&prog, &mut exec, "route", vec![t(&x), Value::Int(5)]).expect_err("k > n");
    assert!(err.contains("k = 5"), "{err}");
    let err = call(
        &prog,
        &mut exec,
        "listed",
        vec![
            t(&x),
            t(&i32s(vec![0, 0], &[2, 1])),
            Value::List(Rc::new(vec![])),
        ],
    )
    .expect_err("no experts");
    assert!(err.contains("empty"), "{err}");
}

/// The sparse block's inputs: x, router weight, expert weights.
struct Block {
    x: Tensor,
    router: Tensor,
    experts: Vec<Tensor>,
}

fn block(tk: usize, e: usize, n: usize, d: usize) -> Block {
    Block {
        x: f32s(vals(7, tk * d), &[tk, d]),
        router: f32s(vals(8, e * d).iter().map(|v| v * 3.0).collect(), &[e, d]),
        experts: (0..e)
            .map(|i| f32s(vals(50 + i as u64, n * d), &[n, d]))
            .collect(),
    }
}

#[test]
fn the_sparse_block_equals_its_naive_loop() {
    let prog = program();
    let mut exec = Eager::cpu();
    let (tk, e, n, d, k) = (6, 8, 12, 20, 2);
    let b = block(tk, e, n, d);
    let list = Value::List(Rc::new(b.experts.iter().map(t).collect()));
    let got = tensor(
        &call(
            &prog,
            &mut exec,
            "sparse_block",
            vec![t(&b.x), t(&b.router), list, Value::Int(k as i64)],
        )
        .unwrap_or_else(|e| panic!("{e}")),
    );
    let (x, r) = (b.x.f32s().expect("x"), b.router.f32s().expect("router"));
    let ws: Vec<&[f32]> = b.experts.iter().map(|w| w.f32s().expect("w")).collect();
    for i in 0..tk {
        let row = &x[i * d..(i + 1) * d];
        let logits: Vec<f32> = (0..e)
            .map(|j| (0..d).map(|c| row[c] * r[j * d + c]).sum())
            .collect();
        let m = logits.iter().cloned().fold(f32::MIN, f32::max);
        let z: f32 = logits.iter().map(|l| (l - m).exp()).sum();
        let probs: Vec<f32> = logits.iter().map(|l| (l - m).exp() / z).collect();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let top = &order[..k];
        let norm: f32 = top.iter().map(|&j| probs[j]).sum();
        for o in 0..n {
            let want: f32 = top
                .iter()
                .map(|&j| probs[j] / norm * (0..d).map(|c| row[c] * ws[j][o * d + c]).sum::<f32>())
                .sum();
            let g = got.f32s().expect("f32")[i * n + o];
            assert!(
                (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "token {i} out {o}: {g} vs {want}"
            );
        }
    }
}

/// Captured (router, topk, gather, moe_linear over listed expert params),
/// optimized and compiled: the same numbers as eager, and the graph holds
/// the new ops.
#[test]
fn the_sparse_block_runs_compiled_like_eager() {
    let prog = program();
    let (tk, e, n, d, k) = (9, 6, 32, 64, 2);
    let b = block(tk, e, n, d);
    // q8_0 experts, as a converted model holds them (prepared at load).
    let q8: Vec<Tensor> = b
        .experts
        .iter()
        .map(|w| {
            let v = w.f32s().expect("w");
            Tensor::from_quant(
                quant::quantize(QuantType::Q8_0, v).expect("q8"),
                QuantType::Q8_0,
                vec![n, d],
            )
            .expect("q8")
        })
        .collect();
    let mut cap = Capture::new(Eager::cpu(), &[], 0);
    let mut params: HashMap<String, Tensor> = HashMap::new();
    let mut experts = vec![];
    for (i, w) in q8.iter().enumerate() {
        let name = format!("mlp.experts.{i}.down_proj.weight");
        let prepared = cap.weight(&name, w.clone()).expect("weight");
        params.insert(name, prepared.clone());
        experts.push(Value::Tensor(prepared));
    }
    let router = cap
        .weight("mlp.gate.weight", b.router.clone())
        .expect("router");
    params.insert("mlp.gate.weight".into(), router.clone());
    let x = cap.input("x", b.x.clone()).expect("x");
    let args = vec![
        t(&x),
        t(&router),
        Value::List(Rc::new(experts.clone())),
        Value::Int(k as i64),
    ];
    let eager = tensor(
        &call(&prog, &mut cap, "sparse_block", args.clone()).unwrap_or_else(|e| panic!("{e}")),
    );
    let graph = cap.finish(&eager).unwrap_or_else(|e| panic!("{e}"));
    let text = mllm_graph::text::to_text(&graph);
    for op in ["topk", "gather", "moe_linear"] {
        assert!(text.contains(op), "no {op} in the graph:\n{text}");
    }
    let graph = mllm_graph::passes::all(graph).expect("passes");
    let compiled = mllm_graph::Compiled::new(graph, CpuBackend, &|name| params.get(name).cloned())
        .expect("bind");
    for step in 0..2 {
        let outs = compiled
            .run(&[("x", b.x.clone())], &mut KvCache::new())
            .expect("compiled step");
        let got = &outs
            .iter()
            .find(|(name, _)| name == "logits")
            .expect("output")
            .1;
        assert_eq!(got.shape(), eager.shape());
        assert_eq!(
            got.f32s().expect("f32"),
            eager.f32s().expect("f32"),
            "step {step}"
        );
    }
    // And eager on a plain executor agrees with the captured run.
    let mut plain = Eager::cpu();
    let again =
        tensor(&call(&prog, &mut plain, "sparse_block", args).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(again.f32s().expect("f32"), eager.f32s().expect("f32"));
}
