//! The `mllm export` contract without running anything: the files it
//! writes, what io.json declares for no-cache, chunk and decode graphs, and
//! its refusals, each naming what was wrong and what to do.

mod common;
mod onnx_common;

use common::*;
use mllm_cli::commands::export::{run, ExportArgs};
use onnx_common::io_json;

fn args(model: &str, out: &std::path::Path) -> ExportArgs {
    ExportArgs {
        script: qwen3_script(),
        model: model.into(),
        format: "onnx".into(),
        seq: 4,
        context: Some(16),
        no_cache: false,
        quant: "dequantize".into(),
        target: "generic".into(),
        out: out.to_path_buf(),
    }
}

fn gqa() -> String {
    fixture("gqa_tied_f32").display().to_string()
}

/// (name, dtype, shape) of io.json's inputs or outputs.
fn ports(v: &serde_json::Value) -> Vec<(String, String, Vec<u64>)> {
    v.as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            assert!(
                !p["meaning"].as_str().expect("meaning").is_empty(),
                "{p} has no meaning"
            );
            (
                p["name"].as_str().expect("name").to_string(),
                p["dtype"].as_str().expect("dtype").to_string(),
                p["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim"))
                    .collect(),
            )
        })
        .collect()
}

fn port(name: &str, dtype: &str, shape: &[u64]) -> (String, String, Vec<u64>) {
    (name.into(), dtype.into(), shape.to_vec())
}

#[test]
fn no_cache_graph_takes_ids_and_gives_logits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut a = args(&gqa(), tmp.path());
    a.no_cache = true;
    a.context = None;
    a.seq = 5;
    let done = run(a).unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(done.model.is_file() && done.data.is_file() && done.io.is_file());
    // The tied table twice (Gather's [vocab, hidden], the output
    // projection's [hidden, vocab]) and every other weight once, f32.
    let params: usize =
        128 * 64 * 2 + 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64 + 2 * 64 + 2 * 16) + 64;
    assert!(
        done.data_bytes as usize >= params * 4,
        "{} bytes of data",
        done.data_bytes
    );
    let io = io_json(tmp.path());
    assert_eq!(ports(&io["inputs"]), [port("input_ids", "int64", &[5])]);
    assert_eq!(
        ports(&io["outputs"]),
        [port("logits", "float32", &[5, 128])]
    );
    assert_eq!(
        io["opsets"],
        serde_json::json!([{"domain": "", "version": 17}])
    );
    assert_eq!(io["seq"], 5);
    assert!(io.get("kv_cache").is_none(), "{io}");
}

#[test]
fn cached_graph_has_the_kv_cache_as_inputs_and_outputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    run(args(&gqa(), tmp.path())).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let io = io_json(tmp.path());
    let mut want_in = vec![
        port("input_ids", "int64", &[4]),
        port("positions", "int64", &[4]),
    ];
    let mut want_out = vec![port("logits", "float32", &[4, 128])];
    for l in 0..2 {
        want_in.push(port(&format!("past_key.{l}"), "float32", &[16, 2, 16]));
        want_in.push(port(&format!("past_value.{l}"), "float32", &[16, 2, 16]));
        if l == 0 {
            want_in.push(port("past_len", "int64", &[1]));
        }
        want_out.push(port(&format!("present_key.{l}"), "float32", &[4, 2, 16]));
        want_out.push(port(&format!("present_value.{l}"), "float32", &[4, 2, 16]));
    }
    assert_eq!(ports(&io["inputs"]), want_in);
    assert_eq!(ports(&io["outputs"]), want_out);
    assert_eq!(io["context"], 16);
    assert_eq!(io["kv_cache"]["layers"].as_array().map(Vec::len), Some(2));
    assert!(io["kv_cache"]["host"]
        .as_str()
        .expect("host")
        .contains("past_len += 4"));
}

#[test]
fn refusals_say_what_was_wrong() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path();
    let err = |a: ExportArgs| match run(a) {
        Ok(_) => panic!("export succeeded"),
        Err(e) => e.render(false),
    };
    let cases: Vec<(ExportArgs, &str)> = vec![
        (
            ExportArgs {
                format: "tflite".into(),
                ..args(&gqa(), out)
            },
            "--format takes `onnx`, not `tflite`",
        ),
        (
            ExportArgs {
                seq: 0,
                ..args(&gqa(), out)
            },
            "--seq must be at least 1",
        ),
        (
            ExportArgs {
                context: Some(2),
                ..args(&gqa(), out)
            },
            "--context 2 cannot hold a step of --seq 4",
        ),
        (
            ExportArgs {
                no_cache: true,
                ..args(&gqa(), out)
            },
            "a --no-cache graph does not have",
        ),
        (
            ExportArgs {
                quant: "int3".into(),
                ..args(&gqa(), out)
            },
            "--quant takes `keep` or `dequantize`",
        ),
        (
            ExportArgs {
                target: "qnn".into(),
                quant: "keep".into(),
                ..args(&gqa(), out)
            },
            "--target qnn takes --quant dequantize",
        ),
        (
            ExportArgs {
                target: "tpu".into(),
                ..args(&gqa(), out)
            },
            "--target takes `generic`",
        ),
        (args("/nonexistent/model", out), "does not exist"),
    ];
    for (a, want) in cases {
        let msg = err(a);
        assert!(msg.contains(want), "expected `{want}` in:\n{msg}");
    }
    assert!(
        !out.join("model.onnx").exists(),
        "a refused export wrote files"
    );
}
