//! Qwen3.5 GGUF files by llama.cpp's converter, tensor by tensor: what
//! `GgufWeights` hands out under a Hugging Face name equals the fixture's
//! safetensors tensor it was converted from. That proves each of the
//! converter's changes undone exactly (the logits tests in
//! gguf_families.rs only bound their sum): the value heads it moved from
//! grouped to tiled order (V rows of `in_proj_qkv` and of the conv,
//! `in_proj_z`, `in_proj_a`/`b`, `A_log`, `dt_bias`, the columns of
//! `out_proj`), the squeezed conv weight, norms stored as 1 + w (back to
//! the very factor 1 + w the model multiplies by; w itself lost its low
//! bits in the sum), and `A_log` stored as -exp(A_log) (ln(exp(x)) is
//! within a few ulp of x).

mod common;

use common::*;
use mllm_backends::weights::WeightSource;
use mllm_converter::gguf::GgufWeights;
use mllm_converter::SafetensorsDir;

/// (GGUF file, the f32 fixture it was converted from). Both have 2 key
/// heads serving 4 value heads, so every reordered tensor moved.
const CASES: &[(&str, &str)] = &[
    ("qwen35_f32.gguf", "qwen3_5/qwen3_5_f32"),
    ("qwen35moe_f32.gguf", "qwen3_5_moe/moe_f32"),
];

/// The HF tensor `name` of `hf` as f32 with its shape: a per-expert
/// checkpoint's experts stacked into the 3-D tensor the GGUF holds.
fn hf_tensor(hf: &SafetensorsDir, name: &str) -> Option<(Vec<usize>, Vec<f32>)> {
    if let Some(t) = hf.info(name).and_then(|_| hf.load(name).ok()) {
        return Some((t.shape().to_vec(), t.to_f32_vec().ok()?));
    }
    // model.layers.N.mlp.experts.P.weight <- model.layers.N.mlp.experts.E.P.weight
    let (head, proj) = name.strip_suffix(".weight")?.rsplit_once(".experts.")?;
    let (mut values, mut shape) = (vec![], vec![0]);
    for e in 0.. {
        let Ok(t) = hf.load(&format!("{head}.experts.{e}.{proj}.weight")) else {
            break;
        };
        shape = [vec![e + 1], t.shape().to_vec()].concat();
        values.extend(t.to_f32_vec().ok()?);
    }
    (shape[0] > 0).then_some((shape, values))
}

#[test]
fn every_tensor_equals_the_safetensors_one() {
    for &(file, case) in CASES {
        let path = root().join("tests/fixtures/gguf").join(file);
        let g = GgufWeights::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let hf = SafetensorsDir::open(&fixture(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut seen = 0;
        for name in g.names() {
            let t = g.load(&name).unwrap_or_else(|e| panic!("{file}: {e}"));
            let got = t.to_f32_vec().expect("f32 values");
            let (shape, want) = hf_tensor(&hf, &name)
                .unwrap_or_else(|| panic!("{file}: `{name}` is not a tensor of {case}"));
            assert_eq!(t.shape(), &shape[..], "{file}: `{name}` shape");
            if name.ends_with(".A_log") {
                let err = max_abs(&got, &want);
                assert!(err <= 1e-6, "{file}: `{name}` is {err} away");
            } else if name.ends_with("norm.weight") && !name.contains("linear_attn") {
                let same = got.iter().zip(&want).all(|(a, b)| 1.0 + a == 1.0 + b);
                assert!(same, "{file}: `{name}`: 1 + w differs");
            } else {
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{file}: `{name}` differs (max-abs {})",
                    max_abs(&got, &want)
                );
            }
            seen += 1;
        }
        // Every fixture tensor is accounted for (experts as one per
        // projection and layer).
        let experts = hf
            .names()
            .iter()
            .filter(|n| n.contains(".experts."))
            .count();
        let layers_with_experts = g
            .names()
            .iter()
            .filter(|n| n.ends_with("experts.up_proj.weight"))
            .count();
        let per_expert_extra = match layers_with_experts {
            0 => 0,
            l => experts - 3 * l,
        };
        assert_eq!(
            seen + per_expert_extra,
            hf.names().len(),
            "{file}: tensor count"
        );
    }
}

/// Prefill logits of a model file (GGUF or .mllm; the script from its
/// config).
fn logits(path: &std::path::Path, ids: &[i32]) -> Vec<f32> {
    let p = path.to_str().expect("utf-8");
    let files =
        mllm_runtime::model_files::open(p).unwrap_or_else(|e| panic!("{p}: {}", e.render(false)));
    let model = mllm_runtime::model_files::load_model(&files, None)
        .unwrap_or_else(|e| panic!("{p}: {}", e.render(false)));
    data(&full_logits(&model, ids))
}

/// `mllm convert` of the GGUF files to f32: values through `load`
/// (heads reordered back, A_log, norms, the conv's shape) run to the
/// GGUF's logits exactly.
#[test]
fn converted_to_f32_mllm_keeps_the_gguf_logits() {
    let dir = tempfile::tempdir().expect("tmp");
    for &(file, case) in CASES {
        let src = root().join("tests/fixtures/gguf").join(file);
        let out = dir.path().join(format!("{file}.mllm"));
        mllm_converter::mllm_format::convert(&src, &out, "f32", None, |_, _| {})
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let ids = reference(case).input_ids;
        let err = max_abs(&logits(&out, &ids), &logits(&src, &ids));
        eprintln!("{file} -> f32 .mllm: max-abs vs the GGUF = {err:.3e}");
        assert_eq!(err, 0.0, "{file}: logits moved by {err}");
    }
}

/// `mllm convert -q q8_0` of the Q8_0 GGUF copies the GGUF's Q8_0 blocks
/// (the experts, the shared expert, the DeltaNet projections) unchanged
/// and, quantizing what llama.cpp kept in f32 (router, embeddings), stays
/// within 0.999 cosine of transformers.
#[test]
fn converted_q8_0_copies_the_blocks() {
    let (file, case) = (
        "qwen35moe_quant_scaled.q8_0.gguf",
        "qwen3_5_moe/quant_scaled_f32",
    );
    let dir = tempfile::tempdir().expect("tmp");
    let src = root().join("tests/fixtures/gguf").join(file);
    let out = dir.path().join("q8_0.mllm");
    mllm_converter::mllm_format::convert(&src, &out, "q8_0", None, |_, _| {})
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut g = GgufWeights::open(&src).unwrap_or_else(|e| panic!("{file}: {e}"));
    g.set_dequantize(true);
    let mut m = mllm_converter::mllm_format::MllmFile::open(&out).expect("open");
    m.set_dequantize(true);
    let mut copied = 0;
    for name in g.names() {
        let gguf_q8 = g
            .file()
            .tensor_info(g.gguf_name(&name).expect("name"))
            .expect("info");
        if gguf_q8.ggml_type.quant().is_none() {
            continue;
        }
        let a = g
            .load(&name)
            .and_then(|t| t.to_f32_vec().map_err(|e| e.to_string()));
        let b = m
            .load(&name)
            .and_then(|t| t.to_f32_vec().map_err(|e| e.to_string()));
        assert_eq!(a.expect("gguf"), b.expect("mllm"), "{name}: blocks differ");
        copied += 1;
    }
    assert!(copied >= 9, "only {copied} Q8_0 tensors in {file}");
    let r = reference(case);
    let cos = common::golden::worst_cosine(&logits(&out, &r.input_ids), &r.logits, r.vocab);
    eprintln!("{file} -> q8_0 .mllm: worst per-position cosine vs transformers = {cos:.6}");
    assert!(cos >= 0.999, "cosine {cos}");
}

/// A Qwen3.5 GGUF with its multi-token-prediction layer, as llama.cpp's
/// converter writes it by default (qwen35_mtp_f32.gguf, from the dense VL
/// fixture with an `mtp` shard: block 3 with `nextn.*` tensors and
/// `qwen35.nextn_predict_layers` = 1): the decoder has 3 layers, and block
/// 3 is the `mtp.*` head, tensor for tensor, whose forward equals the
/// Hugging Face checkpoint's.
#[test]
fn the_nextn_block_is_the_mtp_head() {
    let file = "qwen35_mtp_f32.gguf";
    let path = root().join("tests/fixtures/gguf").join(file);
    let g = GgufWeights::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let hf = SafetensorsDir::open(&fixture("qwen3_5_vl/dense")).expect("dense");
    let want: Vec<String> = hf
        .names()
        .into_iter()
        .filter(|n| n.starts_with("mtp."))
        .collect();
    let mut got: Vec<String> = g
        .names()
        .into_iter()
        .filter(|n| n.starts_with("mtp."))
        .collect();
    got.sort();
    let mut sorted = want.clone();
    sorted.sort();
    assert_eq!(got, sorted, "{file}: the head's tensors");
    for name in &want {
        let a = g
            .load(name)
            .and_then(|t| t.to_f32_vec().map_err(|e| e.to_string()));
        let b = hf
            .load(name)
            .and_then(|t| t.to_f32_vec().map_err(|e| e.to_string()));
        let (a, b) = (a.expect("gguf"), b.expect("hf"));
        // Norms (`pre_fc_norm_*` too) hold 1 + w: w comes back within
        // the rounding of that sum.
        let same = if name.contains("norm") {
            max_abs(&a, &b) <= 1.2e-7
        } else {
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        assert!(same, "{file}: `{name}` differs by {}", max_abs(&a, &b));
    }
    // The decoder is the blocks before the head.
    let p = path.to_str().expect("utf-8");
    let files =
        mllm_runtime::model_files::open(p).unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert_eq!(files.config["num_hidden_layers"], 3);
    assert_eq!(files.config["mtp_num_hidden_layers"], 1);
    let gguf = mllm_runtime::model_files::load_model(&files, None)
        .unwrap_or_else(|e| panic!("{p}: {}", e.render(false)));
    let d = fixture("qwen3_5_vl/dense");
    let dense = mllm_runtime::model_files::open(d.to_str().expect("utf-8")).expect("dense");
    let dense = mllm_runtime::model_files::load_model(&dense, None).expect("dense model");
    // Two calls of the head on its own cache (a catch-up and a chained step).
    let run = |m: &mllm_interpreter::Model| -> Vec<f32> {
        let mut exec = mllm_interpreter::Eager::new(m.backend.clone());
        exec.emitted = Some(vec![]);
        let cache = new_cache();
        let mut out = vec![];
        for (ids, start) in [(vec![5, 17, 200, 3], 0), (vec![42], 4)] {
            let t = ids.len();
            let hidden: Vec<f32> = (0..t * 64)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let pos: Vec<i32> = (start..start + t as i32).collect();
            let v = m
                .call(
                    "mtp_forward",
                    &mut exec,
                    vec![
                        (
                            "input_ids",
                            mllm_interpreter::Value::Tensor(
                                mllm_backends::Tensor::from_i32(ids, vec![t]).expect("ids"),
                            ),
                        ),
                        (
                            "hidden",
                            mllm_interpreter::Value::Tensor(
                                mllm_backends::Tensor::from_f32(hidden, vec![t, 64]).expect("h"),
                            ),
                        ),
                        (
                            "positions",
                            mllm_interpreter::Value::Tensor(
                                mllm_backends::Tensor::from_i32(pos, vec![t]).expect("pos"),
                            ),
                        ),
                        ("cache", mllm_interpreter::Value::Cache(cache.clone())),
                    ],
                )
                .unwrap_or_else(|e| panic!("{}", e.render(&m.program.sources, false)));
            let mllm_interpreter::Value::Tensor(logits) = v else {
                panic!("{v:?}")
            };
            out.extend(data(&logits));
            // The head's last row, its side output.
            for (_, h) in exec
                .emitted
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default()
            {
                out.extend(data(&h));
            }
        }
        out
    };
    let (a, b) = (run(&gguf), run(&dense));
    assert_finite("gguf head", &a);
    let err = max_abs(&a, &b);
    assert!(
        err <= 1e-5,
        "the GGUF's head is {err} away from the checkpoint's"
    );
}
