//! The NPU host loop (`mllm_runtime::npu`) end to end, with no vendor SDK:
//! each golden Qwen3 fixture is exported as `mllm export` writes it (a
//! prefill chunk graph and the 1-token decode graph, KV cache as I/O), the
//! io.json files are read back as `--backend qnn|ascend` reads them, and
//! the same captured steps run as static graphs by our compiled executor
//! (`npu::reference`: whole past buffers and past_len in, present rows
//! out, nothing kept between steps). The host loop keeps the cache, pads
//! the last prefill chunk and decodes greedily; its ids must equal
//! transformers' (the fixtures' `greedy_ids`) and the eager path's, and
//! its logits the reference logits within 1e-4.

mod common;
mod onnx_common;

use std::path::Path;

use common::*;
use mllm_cli::commands::run::{run, RunArgs, SamplingArgs};
use mllm_runtime::npu::reference::ReferenceGraph;
use mllm_runtime::npu::{ExportDir, GraphIo, HostLoop, Stage};
use onnx_common::{export, export_target, Export};

const CONTEXT: usize = 64;

fn export_graph(case: &str, seq: usize, context: usize, out: &Path) {
    export_for(case, "generic", seq, context, out)
}

/// `mllm export --target TARGET` of `case`'s step.
fn export_for(case: &str, target: &str, seq: usize, context: usize, out: &Path) {
    let model = fixture(case);
    let e = Export {
        script: &qwen3_script(),
        model: model.to_str().expect("utf-8 path"),
        seq,
        context: Some(context),
        quant: "dequantize",
    };
    export_target(&e, target, out).unwrap_or_else(|m| panic!("export failed:\n{m}"));
}

fn stage(m: &mllm_runtime::Loaded, io: &GraphIo) -> Stage {
    let g = ReferenceGraph::capture(m.model(), io).unwrap_or_else(|e| panic!("capture: {e}"));
    Stage::new(Box::new(g), io.clone())
}

fn argmax(v: &[f32]) -> u32 {
    mllm_runtime::generation::argmax(v) as u32
}

/// Greedy ids of `n` tokens after `prompt`, and the prompt's last logits.
fn host_greedy(host: &mut HostLoop, prompt: &[i32], n: usize) -> (Vec<i32>, Vec<f32>) {
    let ids: Vec<u32> = prompt.iter().map(|&t| t as u32).collect();
    host.reset();
    let first = host
        .feed(&ids)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let mut logits = first.clone();
    let mut got = vec![];
    while got.len() < n {
        let t = argmax(&logits);
        got.push(t as i32);
        logits = host
            .feed(&[t])
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
    }
    (got, first)
}

/// A prefill chunk that leaves a remainder, so the last chunk is padded.
fn chunk_for(len: usize) -> usize {
    (3..len).find(|c| !len.is_multiple_of(*c)).unwrap_or(2)
}

#[test]
fn host_loop_over_exported_graphs_gives_transformers_greedy_ids() {
    for case in QWEN3_CASES {
        let r = reference(case);
        let chunk = chunk_for(r.input_ids.len());
        let tmp = tempfile::tempdir().expect("tempdir");
        export_graph(case, 1, CONTEXT, &tmp.path().join("decode"));
        export_graph(case, chunk, CONTEXT, &tmp.path().join("prefill"));
        let dir = ExportDir::open(tmp.path()).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let (_, prefill_io) = dir.prefill.as_ref().expect("prefill graph found");
        assert_eq!((prefill_io.seq, dir.decode.1.seq), (chunk, 1));
        assert_eq!(prefill_io.context, CONTEXT);

        let mut m = load_case(case);
        let mut host = HostLoop::new(Some(stage(&m, prefill_io)), stage(&m, &dir.decode.1))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let n = r.greedy.len();
        let (got, last) = host_greedy(&mut host, &r.input_ids, n);
        let len = r.input_ids.len();
        // Full chunks plus one padded chunk (a single last token takes the
        // decode graph instead), then a decode step per generated token.
        let rem = len % chunk;
        let expect = (
            len / chunk + usize::from(rem > 1),
            n + usize::from(rem == 1),
        );
        assert_eq!(host.steps, expect, "{case}: steps");
        assert_eq!(host.past_len(), len + n, "{case}: cached rows");
        let err = max_abs(&last, &r.logits[(len - 1) * r.vocab..len * r.vocab]);
        eprintln!("{case}: chunk {chunk}, last prompt logits vs transformers max-abs {err:.2e}");
        assert!(err <= 1e-4, "{case}: logits differ by {err}");
        assert_eq!(
            got, r.greedy,
            "{case}: host-loop ids differ from transformers"
        );
        let eager = greedy(&mut m, &r.input_ids, n);
        assert_eq!(
            got, eager,
            "{case}: host-loop ids differ from the eager path"
        );
    }
}

/// A `--target qnn` export takes the step's rotary tables as inputs and no
/// positions: the host feeds rows past_len.. of `rope_cos.bin` /
/// `rope_sin.bin`, and the graph (prepared for qnn, as the export does)
/// gives transformers' ids only if those rows are the right ones (rows
/// 0..N every step fail here; a shift of every row by one would not, as
/// rotary attention sees position differences: the runtime's unit test
/// checks the rows exactly).
#[test]
fn qnn_target_exports_are_fed_their_rotary_tables() {
    let case = "gqa_tied_f32";
    let r = reference(case);
    let chunk = chunk_for(r.input_ids.len());
    let tmp = tempfile::tempdir().expect("tempdir");
    export_for(case, "qnn", 1, CONTEXT, &tmp.path().join("decode"));
    export_for(case, "qnn", chunk, CONTEXT, &tmp.path().join("prefill"));
    let dir = ExportDir::open(tmp.path()).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let (pdir, pio) = dir.prefill.as_ref().expect("prefill");
    let (ddir, dio) = &dir.decode;
    assert!(
        !pio.rope.is_empty() && pio.input("positions").is_none(),
        "a qnn graph: {pio:?}"
    );
    let m = load_case(case);
    let stage_in = |io: &GraphIo, d: &Path| {
        let g = ReferenceGraph::capture(m.model(), io).unwrap_or_else(|e| panic!("capture: {e}"));
        Stage::with_tables(Box::new(g), io.clone(), d)
            .unwrap_or_else(|e| panic!("{}", e.render(false)))
    };
    let mut host = HostLoop::new(Some(stage_in(pio, pdir)), stage_in(dio, ddir)).expect("host");
    let (got, last) = host_greedy(&mut host, &r.input_ids, r.greedy.len());
    let len = r.input_ids.len();
    let err = max_abs(&last, &r.logits[(len - 1) * r.vocab..len * r.vocab]);
    eprintln!("{case} (--target qnn): last prompt logits vs transformers max-abs {err:.2e}");
    assert!(err <= 1e-4, "logits differ by {err}");
    assert_eq!(got, r.greedy);
}

#[test]
fn decode_graph_alone_feeds_the_prompt_token_by_token() {
    let case = "gqa_tied_f32";
    let r = reference(case);
    let tmp = tempfile::tempdir().expect("tempdir");
    // The flat layout: DIR/io.json is the decode graph.
    export_graph(case, 1, CONTEXT, tmp.path());
    let dir = ExportDir::open(tmp.path()).unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(dir.prefill.is_none());
    let m = load_case(case);
    let mut host = HostLoop::new(None, stage(&m, &dir.decode.1)).expect("host loop");
    let n = 4.min(r.greedy.len());
    let (got, _) = host_greedy(&mut host, &r.input_ids, n);
    assert_eq!(got, r.greedy[..n]);
    assert_eq!(host.steps, (0, r.input_ids.len() + n));
}

#[test]
fn last_chunk_is_not_padded_past_the_cache() {
    let case = "gqa_tied_f32";
    let r = reference(case);
    let len = r.input_ids.len();
    let chunk = chunk_for(len);
    let rem = len % chunk;
    // A cache that holds the prompt exactly: no room for a padded last
    // chunk, so its tokens go through the decode graph one by one.
    let context = len;
    assert!(
        rem > 0 && len > chunk,
        "the fixture's prompt is too short for this test"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    export_graph(case, 1, context, &tmp.path().join("decode"));
    export_graph(case, chunk, context, &tmp.path().join("prefill"));
    let dir = ExportDir::open(tmp.path()).expect("dir");
    let m = load_case(case);
    let prefill = dir.prefill.as_ref().map(|(_, io)| stage(&m, io));
    let mut host = HostLoop::new(prefill, stage(&m, &dir.decode.1)).expect("host loop");
    let ids: Vec<u32> = r.input_ids.iter().map(|&t| t as u32).collect();
    let logits = host
        .feed(&ids)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert_eq!(argmax(&logits) as i32, r.greedy[0]);
    assert_eq!(host.steps, (len / chunk, rem));
    // The cache is now full: one more token is refused by name.
    let e = host.feed(&[1]).unwrap_err();
    assert!(
        e.render(false).contains("do not fit the graphs' cache"),
        "{}",
        e.render(false)
    );
}

#[test]
fn mismatched_or_uncached_exports_are_refused() {
    let case = "gqa_tied_f32";
    let tmp = tempfile::tempdir().expect("tempdir");
    export_graph(case, 1, CONTEXT, &tmp.path().join("decode"));
    export_graph(case, 3, CONTEXT / 2, &tmp.path().join("prefill"));
    let dir = ExportDir::open(tmp.path()).expect("dir");
    let m = load_case(case);
    let prefill = dir.prefill.as_ref().map(|(_, io)| stage(&m, io));
    let e = HostLoop::new(prefill, stage(&m, &dir.decode.1))
        .err()
        .expect("refused");
    assert!(
        e.render(false).contains("do not share one cache"),
        "{}",
        e.render(false)
    );

    // A --no-cache export is not a step the host loop can drive.
    let nocache = tmp.path().join("nocache");
    export(
        &Export {
            script: &qwen3_script(),
            model: fixture(case).to_str().expect("utf-8"),
            seq: 4,
            context: None,
            quant: "dequantize",
        },
        &nocache,
    );
    let e = GraphIo::read(&nocache.join("io.json")).unwrap_err();
    assert!(e.contains("--no-cache"), "{e}");
    let e = ExportDir::open(&nocache).err().expect("refused");
    assert!(
        e.render(false).contains("--no-cache"),
        "{}",
        e.render(false)
    );

    // A prefill graph where the decode graph should be.
    let wrong = tmp.path().join("wrong");
    std::fs::create_dir_all(wrong.join("decode")).expect("mkdir");
    std::fs::copy(
        tmp.path().join("prefill/io.json"),
        wrong.join("decode/io.json"),
    )
    .expect("copy");
    let e = ExportDir::open(&wrong).err().expect("refused");
    assert!(
        e.render(false).contains("the decode graph takes 1"),
        "{}",
        e.render(false)
    );
    let e = ExportDir::open(&tmp.path().join("absent"))
        .err()
        .expect("refused");
    assert!(
        e.render(false).contains("is not a directory"),
        "{}",
        e.render(false)
    );
}

#[test]
fn builds_without_an_npu_feature_name_the_rebuild() {
    for (name, var) in [("qnn", "QNN_SDK_ROOT"), ("ascend", "ASCEND_TOOLKIT_HOME")] {
        let parsed = name.parse::<mllm_runtime::model_files::Backend>();
        if mllm_backends::backend::npu_built(name) {
            assert!(parsed.is_ok(), "{name}");
            continue;
        }
        let e = parsed.unwrap_err();
        assert!(
            e.contains(&format!("this build has no {name} backend"))
                && e.contains(&format!("--features {name}"))
                && e.contains(var),
            "{e}"
        );
    }
}

fn run_args(model: &Path, backend: mllm_runtime::model_files::Backend) -> RunArgs {
    RunArgs {
        script: None,
        ctx_size: None,
        model: model.to_str().expect("utf-8").to_string(),
        mmproj: None,
        prompt: "hi".into(),
        images: vec![],
        videos: vec![],
        video_fps: None,
        system: None,
        raw: true,
        spec: Default::default(),
        sampling: SamplingArgs {
            temp: 0.0,
            top_k: 1,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: Some(1),
            max_new_tokens: 2,
            stop: vec![],
            ignore_eos: false,
            enable_thinking: None,
            json_schema: None,
            grammar_file: None,
            json: false,
        },
        load: mllm_runtime::model_files::LoadOptions {
            backend,
            ..Default::default()
        },
    }
}

#[test]
fn run_with_an_npu_backend_takes_the_export_directory() {
    use mllm_runtime::model_files::Backend;
    let tmp = tempfile::tempdir().expect("tempdir");
    export_graph("gqa_tied_f32", 1, CONTEXT, &tmp.path().join("decode"));
    for (backend, name) in [(Backend::Qnn, "qnn"), (Backend::Ascend, "ascend")] {
        // Without the checkpoint's tokenizer beside the graphs.
        let e = run(run_args(tmp.path(), backend)).unwrap_err();
        assert!(
            e.render(false).contains("no tokenizer.json"),
            "{}",
            e.render(false)
        );
        // Other commands refuse an NPU backend by name.
        let opts = mllm_runtime::model_files::LoadOptions {
            backend,
            ..Default::default()
        };
        let e = mllm_runtime::model_files::open_with(tmp.path().to_str().expect("utf-8"), opts)
            .err()
            .expect("refused");
        assert!(
            e.render(false).contains("runs exported graphs"),
            "{}",
            e.render(false)
        );
        assert!(e.render(false).contains(name), "{}", e.render(false));
    }
    std::fs::copy(
        root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published/tokenizer.json"),
        tmp.path().join("tokenizer.json"),
    )
    .expect("copy tokenizer");
    for (backend, name) in [(Backend::Qnn, "qnn"), (Backend::Ascend, "ascend")] {
        let e = run(run_args(tmp.path(), backend)).unwrap_err();
        if mllm_backends::backend::npu_built(name) {
            // Built with the feature: the directory lacks the compiled
            // graphs (a context binary, .om models), said before any
            // vendor library is loaded.
            let want = if name == "qnn" {
                "no QNN context binary"
            } else {
                "no decode model"
            };
            assert!(e.render(false).contains(want), "{}", e.render(false));
            // With a (fake) compiled graph: the vendor library is looked
            // for, and its absence named with what to install or set.
            let fake = tmp.path().join("decode").join(format!(
                "model.{}",
                if name == "qnn" { "bin" } else { "om" }
            ));
            std::fs::write(&fake, b"not a compiled graph").expect("write");
            let e = run(run_args(tmp.path(), backend)).unwrap_err();
            std::fs::remove_file(&fake).expect("remove");
            eprintln!("{name} without its library: {}", e.render(false));
            let var = if name == "qnn" {
                "MLLM_QNN_SYSTEM_LIB"
            } else {
                "MLLM_ASCEND_LIB"
            };
            assert!(
                e.render(false).contains("cannot load") && e.render(false).contains(var),
                "{}",
                e.render(false)
            );
        } else {
            assert!(
                e.render(false)
                    .contains(&format!("this build has no {name} backend")),
                "{}",
                e.render(false)
            );
        }
    }
}
