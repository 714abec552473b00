//! `mllm export --target qnn` and `--target ascend` (issue #12), checked
//! with onnxruntime, since the vendors' tools are not here:
//! - both targets' exports of golden Qwen3 fixtures (no-cache, and cached:
//!   two 3-token chunks then 1-token decode steps through the KV I/O) agree
//!   with our eager forward within 1e-4; for qnn the host feeds the rotary
//!   tables (rows `positions` of rope_cos.bin / rope_sin.bin) instead of
//!   positions, and check.py proves every value of the graph has rank <= 4
//!   by ONNX shape inference;
//! - each README names the files the export wrote and the real inputs with
//!   their shapes (`--input_dim` for qnn-onnx-converter, `--input_shape`
//!   for atc);
//! - quant_overrides.json of `w8a8`, `w4a16` and `q8_0` checkpoints lists
//!   exactly the scales stored in the checkpoint (decoded here from the raw
//!   blocks, independently of the exporter), and onnxruntime running the
//!   graph with every weight re-quantized by those encodings (check.py's
//!   fake quantization, what the converter does) changes no weight and
//!   agrees with our quantized CPU kernels: cosine >= 0.999 per position;
//! - refused combinations say what to use instead.
//!
//! Needs the onnxruntime venv (tests/onnx/setup.sh, run on first use);
//! `MLLM_SKIP_ONNX=1` skips the onnxruntime runs knowingly.

mod common;
mod onnx_common;

use std::path::{Path, PathBuf};

use common::*;
use onnx_common::*;
use serde_json::Value;

const CONTEXT: usize = 64;
const TOLERANCE: f32 = 1e-4;

/// The three graphs of one model for one target: no-cache over the prompt,
/// a 3-token chunk and the decode step against a cache of CONTEXT rows.
struct Graphs {
    nocache: PathBuf,
    chunk3: PathBuf,
    decode: PathBuf,
}

fn export_all(target: &str, model: &str, prompt: usize, quant: &str, dir: &Path) -> Graphs {
    let g = Graphs {
        nocache: dir.join(format!("{target}_nocache")),
        chunk3: dir.join(format!("{target}_chunk3")),
        decode: dir.join(format!("{target}_decode")),
    };
    for (seq, context, out) in [
        (prompt, None, &g.nocache),
        (3, Some(CONTEXT), &g.chunk3),
        (1, Some(CONTEXT), &g.decode),
    ] {
        let e = Export {
            script: "qwen3",
            model,
            seq,
            context,
            quant,
        };
        export_target(&e, target, out)
            .unwrap_or_else(|m| panic!("--target {target} export of {model} failed:\n{m}"));
    }
    g
}

fn names(ports: &Value) -> Vec<String> {
    ports
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

/// What a qnn export's io.json must say about its inputs and tables.
fn check_qnn_io(dir: &Path, seq: usize, cached: bool) {
    let io = io_json(dir);
    let inputs = names(&io["inputs"]);
    assert!(!inputs.contains(&"positions".to_string()), "{inputs:?}");
    let rope = io["rope"].as_array().map(|v| v.len()).unwrap_or(0);
    if !cached {
        assert_eq!(inputs, ["input_ids"], "no-cache qnn inputs");
        assert_eq!(rope, 0, "no-cache tables are constants");
        return;
    }
    assert_eq!(rope, 1, "one pair of rotary tables: {}", io["rope"]);
    let r = &io["rope"][0];
    let width = r["width"].as_u64().expect("width") as usize;
    assert_eq!(r["rows"].as_u64(), Some(CONTEXT as u64));
    for (input, file) in [("cos_input", "cos_file"), ("sin_input", "sin_file")] {
        let name = r[input].as_str().expect("input");
        let decl = io["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not an input"));
        assert_eq!(decl["shape"], serde_json::json!([seq, width]), "{name}");
        let bytes = std::fs::metadata(dir.join(r[file].as_str().expect("file")))
            .expect("table file")
            .len();
        assert_eq!(bytes as usize, CONTEXT * width * 4, "{name} table");
    }
}

#[test]
fn qnn_and_ascend_exports_match_eager() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut runs = vec![];
    let mut expected = vec![];
    for case in ["gqa_tied_f32", "untied_bf16_ropeparams"] {
        let r = reference(case);
        let model = fixture(case).display().to_string();
        let all: Vec<i32> = r.input_ids.iter().chain(&r.greedy).copied().collect();
        let opts = mllm_runtime::model_files::LoadOptions {
            dequantize: true,
            ..Default::default()
        };
        let m = mllm_runtime::load_with(&qwen3_script(), &model, opts)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let prompt_logits = data(&full_logits(&m.runner.model, &r.input_ids));
        let all_logits = data(&full_logits(&m.runner.model, &all));
        for target in ["qnn", "ascend"] {
            let dir = tmp.path().join(case);
            let g = export_all(target, &model, r.input_ids.len(), "dequantize", &dir);
            if target == "qnn" {
                check_qnn_io(&g.nocache, r.input_ids.len(), false);
                check_qnn_io(&g.chunk3, 3, true);
                check_qnn_io(&g.decode, 1, true);
            } else {
                let io = io_json(&g.chunk3);
                assert_eq!(
                    io["opsets"],
                    serde_json::json!([{"domain": "", "version": 17}])
                );
                assert!(names(&io["inputs"]).contains(&"positions".to_string()));
            }
            runs.push(Run::new(
                format!("{case} {target} no-cache"),
                vec![(g.nocache.clone(), r.input_ids.clone())],
            ));
            expected.push(prompt_logits.clone());
            runs.push(Run::new(
                format!("{case} {target} cached"),
                cached_plan(&all, &g.chunk3, 3, 2, &g.decode),
            ));
            expected.push(all_logits.clone());
        }
    }
    let Some(outs) = run_ort(&runs, 2, tmp.path()) else {
        return;
    };
    for ((run, out), want) in runs.iter().zip(&outs).zip(&expected) {
        assert_eq!(out.logits.len(), want.len(), "{}", run.name);
        let err = max_abs(&out.logits, want);
        eprintln!(
            "{}: onnxruntime vs eager max-abs = {err:.3e} over {} rows",
            run.name, out.rows
        );
        assert!(
            err <= TOLERANCE,
            "{}: max-abs {err} > {TOLERANCE}",
            run.name
        );
    }
}

/// The `--input_dim NAME DIMS` lines of a qnn README.
fn input_dims(readme: &str) -> Vec<(String, String)> {
    readme
        .lines()
        .filter_map(|l| l.trim().strip_prefix("--input_dim "))
        .map(|l| {
            let mut it = l.trim_end_matches('\\').split_whitespace();
            (
                it.next().expect("name").to_string(),
                it.next().expect("dims").to_string(),
            )
        })
        .collect()
}

fn shape_text(p: &Value) -> String {
    p["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim").to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn readmes_name_the_written_files_and_the_real_inputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model_path = {
        let out = tmp.path().join("w4a16.mllm").display().to_string();
        let src = fixture("quant_scaled_f32").display().to_string();
        mllm_cli::commands::convert::run(&src, None, &out, "w4a16", None, false)
            .unwrap_or_else(|e| panic!("convert: {}", e.render(false)));
        out
    };
    for model in [fixture("gqa_tied_f32").display().to_string(), model_path] {
        for (seq, context) in [(3, Some(CONTEXT)), (4, None)] {
            let e = Export {
                script: "qwen3",
                model: &model,
                seq,
                context,
                quant: "dequantize",
            };
            // QNN: the converter's inputs are the model's, with their shapes.
            let dir = tmp.path().join(format!("qnn_{seq}"));
            export_target(&e, "qnn", &dir).unwrap_or_else(|m| panic!("{m}"));
            let io = io_json(&dir);
            let readme = std::fs::read_to_string(dir.join("README.txt")).expect("README.txt");
            let want: Vec<(String, String)> = io["inputs"]
                .as_array()
                .expect("inputs")
                .iter()
                .map(|p| (p["name"].as_str().expect("name").to_string(), shape_text(p)))
                .collect();
            assert_eq!(input_dims(&readme), want, "{readme}");
            for cmd in [
                "qnn-onnx-converter",
                "--input_network model.onnx",
                "qnn-model-lib-generator -c qnn/model.cpp -b qnn/model.bin",
                "qnn-context-binary-generator",
                "libQnnHtp.so",
                "--model qnn/lib/x86_64-linux-clang/libmodel.so",
                "--input_list input_list.txt",
            ] {
                assert!(readme.contains(cmd), "no `{cmd}` in:\n{readme}");
            }
            let files: Vec<String> = io["qnn"]["files"]
                .as_array()
                .expect("files")
                .iter()
                .map(|f| f.as_str().expect("file").to_string())
                .collect();
            for f in &files {
                assert!(dir.join(f).is_file(), "io.json lists {f}, not written");
            }
            let quantized = model.ends_with(".mllm");
            assert_eq!(
                readme.contains("--quantization_overrides quant_overrides.json"),
                quantized,
                "{readme}"
            );
            assert_eq!(files.contains(&"quant_overrides.json".into()), quantized);
            // Ascend: the atc line's --input_shape is the model's inputs.
            let dir = tmp.path().join(format!("ascend_{seq}"));
            export_target(&e, "ascend", &dir).unwrap_or_else(|m| panic!("{m}"));
            let io = io_json(&dir);
            let readme = std::fs::read_to_string(dir.join("README.txt")).expect("README.txt");
            let shape: Vec<String> = io["inputs"]
                .as_array()
                .expect("inputs")
                .iter()
                .map(|p| format!("{}:{}", p["name"].as_str().expect("name"), shape_text(p)))
                .collect();
            let line = format!(
                "atc --model=model.onnx --framework=5 --output=model --input_format=ND --input_shape=\"{}\" --soc_version=${{SOC_VERSION}}",
                shape.join(";")
            );
            assert!(readme.contains(&line), "no `{line}` in:\n{readme}");
            assert_eq!(io["ascend"]["input_shape"], shape.join(";"));
            assert!(dir.join("model.onnx").is_file() && dir.join("model.onnx.data").is_file());
        }
    }
}

/// The scales stored in checkpoint tensor `name`, decoded from its raw
/// blocks: per row for w8a8, per block (row-major) otherwise.
fn checkpoint_scales(src: &dyn mllm_backends::weights::WeightSource, name: &str) -> Vec<f32> {
    use mllm_backends::quant::QuantType;
    let t = src.load(name).expect("load");
    let k = t.shape()[1];
    let (bytes, q) = t.quant_bytes().expect("quantized");
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    match q {
        QuantType::W8A8 { .. } => bytes
            .chunks_exact(4 + k)
            .map(|r| f32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            .collect(),
        QuantType::Q8_0 => bytes.chunks_exact(34).map(f16).collect(),
        QuantType::Q4_0 => bytes.chunks_exact(18).map(f16).collect(),
        QuantType::W4A16 { group } => bytes
            .chunks_exact(2 + group as usize / 2)
            .map(f16)
            .collect(),
        other => panic!("{name}: unexpected {other:?}"),
    }
}

#[test]
fn qnn_overrides_carry_our_scales_and_match_the_quantized_kernels() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = reference("quant_scaled_f32");
    let all: Vec<i32> = r.input_ids.iter().chain(&r.greedy).copied().collect();
    let mut runs = vec![];
    let mut expected = vec![];
    for ty in ["w8a8", "w4a16", "q8_0"] {
        let model = tmp.path().join(format!("{ty}.mllm")).display().to_string();
        let src = fixture("quant_scaled_f32").display().to_string();
        mllm_cli::commands::convert::run(&src, None, &model, ty, None, false)
            .unwrap_or_else(|e| panic!("convert to {ty}: {}", e.render(false)));
        let g = export_all(
            "qnn",
            &model,
            r.input_ids.len(),
            "dequantize",
            &tmp.path().join(ty),
        );

        // Every quantized weight the graph holds has its checkpoint's scales.
        let files = mllm_runtime::model_files::open(&model)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let text = std::fs::read_to_string(g.chunk3.join("quant_overrides.json"))
            .expect("quant_overrides.json");
        let doc: Value = serde_json::from_str(&text).expect("overrides are JSON");
        assert_eq!(doc["version"], "1.0.0");
        assert_eq!(doc["activation_encodings"], serde_json::json!([]));
        let entries = doc["param_encodings"].as_array().expect("param_encodings");
        let mut linears = 0;
        for e in entries {
            let onnx = e["name"].as_str().expect("name");
            let ckpt = onnx.strip_suffix(".T").unwrap_or(onnx);
            linears += usize::from(onnx.ends_with(".T"));
            let info = files.weights.info(ckpt).expect("a checkpoint tensor");
            let q = info.dtype.quant().expect("quantized");
            let want = checkpoint_scales(files.weights.as_ref(), ckpt);
            let got: Vec<f32> = e["scale"]
                .as_array()
                .expect("scale")
                .iter()
                .map(|s| s.as_f64().expect("scale") as f32)
                .collect();
            assert_eq!(got, want, "{onnx}: scales differ from the checkpoint's");
            use mllm_backends::quant::QuantType;
            let (kind, bw, block) = match q {
                QuantType::W8A8 { .. } => ("PER_CHANNEL", 8, None),
                QuantType::Q8_0 => ("PER_BLOCK", 8, Some(32)),
                QuantType::Q4_0 => ("PER_BLOCK", 4, Some(32)),
                QuantType::W4A16 { group } => ("PER_BLOCK", 4, Some(group as u64)),
                other => panic!("{other:?}"),
            };
            assert_eq!(e["enc_type"], kind, "{onnx}");
            assert_eq!(e["bw"].as_u64(), Some(bw), "{onnx}");
            assert_eq!(e["block_size"].as_u64(), block, "{onnx}");
            assert_eq!(e["is_sym"], true);
            let lo = -(1i64 << (bw - 1));
            assert!(e["offset"]
                .as_array()
                .expect("offset")
                .iter()
                .all(|o| o.as_i64() == Some(lo)));
        }
        // 2 layers x 7 linears (and the tied output projection).
        assert!(linears >= 14, "{ty}: {linears} linear encodings in {text}");

        let m = load_with(&qwen3_script(), &model);
        let mut nocache = Run::new(
            format!("{ty} qnn no-cache"),
            vec![(g.nocache.clone(), r.input_ids.clone())],
        );
        nocache.fake_quant = true;
        runs.push(nocache);
        expected.push(data(&full_logits(&m.runner.model, &r.input_ids)));
        let mut cached = Run::new(
            format!("{ty} qnn cached"),
            cached_plan(&all, &g.chunk3, 3, 2, &g.decode),
        );
        cached.fake_quant = true;
        runs.push(cached);
        expected.push(data(&full_logits(&m.runner.model, &all)));
    }
    let Some(outs) = run_ort(&runs, 2, tmp.path()) else {
        return;
    };
    for ((run, out), want) in runs.iter().zip(&outs).zip(&expected) {
        assert_eq!(out.logits.len(), want.len(), "{}", run.name);
        let change = out
            .weight_change
            .expect("check.py reports the weight change");
        let worst = out
            .logits
            .chunks(out.vocab)
            .zip(want.chunks(out.vocab))
            .map(|(a, b)| cosine(a, b))
            .fold(1.0f64, f64::min);
        eprintln!(
            "{}: re-quantized by the overrides (largest weight change {change:.1e}), onnxruntime vs quantized CPU: min cosine {worst:.6}, max-abs {:.3e}",
            run.name,
            max_abs(&out.logits, want)
        );
        assert!(
            change <= 1e-7,
            "{}: the overrides changed a weight by {change}",
            run.name
        );
        assert!(worst >= 0.999, "{}: cosine {worst} < 0.999", run.name);
    }
}

#[test]
fn vendor_targets_refuse_kept_quantized_weights() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = fixture("gqa_tied_f32").display().to_string();
    let e = Export {
        script: "qwen3",
        model: &model,
        seq: 2,
        context: None,
        quant: "keep",
    };
    for (target, want) in [
        ("qnn", "--target qnn takes --quant dequantize"),
        ("ascend", "--target ascend takes --quant dequantize"),
    ] {
        let out = tmp.path().join(target);
        let err = export_target(&e, target, &out).expect_err("refused");
        assert!(err.contains(want), "{err}");
        assert!(
            !out.join("model.onnx").exists(),
            "a refused export wrote files"
        );
    }
}
