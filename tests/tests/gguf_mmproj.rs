//! Qwen3-VL (dense and MoE) and Qwen3.5 (dense and MoE) with images from the
//! two GGUFs llama.cpp writes for a vision-language model: the text model
//! (arch `qwen3vl`, `qwen3vlmoe`, `qwen35`, `qwen35moe`)
//! and the `mmproj` file (arch `clip`: vision tower and projector), made by
//! llama.cpp's own converter from the committed random fixtures
//! (`make_family_ggufs.py --vl-pairs tests/fixtures/gguf/mmproj`, committed:
//! ~3.8 MB, so CI needs neither torch nor llama.cpp's source). Checked
//! against the fixtures' transformers references and the Hugging Face
//! directory path: the joined config, every tensor bit for bit (the patch
//! kernel the converter split in two included), prefill logits and greedy
//! ids with images, an F16 mmproj, the dense text model alone, and the
//! errors that name `--mmproj`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mllm_backends::weights::WeightSource;
use mllm_runtime::images::{self, read_images, Images};
use mllm_runtime::model_files::{self, ModelFiles};
use mllm_runtime::{Loaded, Runner};
use serde_json::Value;

/// (fixture, its script) for every pair the script writes.
const PAIRS: &[(&str, &str)] = &[
    ("qwen3_vl/p16_m2_tied_published", "qwen3_vl"),
    ("qwen3_vl/p8_m3_untied_ropeparams", "qwen3_vl"),
    ("qwen3_vl_moe/p8_m2_moe_bf16", "qwen3_vl_moe"),
    ("qwen3_5_vl/dense", "qwen3_5"),
    ("qwen3_5_vl/moe", "qwen3_5_moe"),
];

/// The committed pairs (tests/fixtures/gguf/mmproj), written by
/// `make_family_ggufs.py --vl-pairs tests/fixtures/gguf/mmproj` with
/// llama.cpp's converter; re-running the script reproduces them.
fn pairs_dir() -> PathBuf {
    root().join("tests/fixtures/gguf/mmproj")
}

/// The pair's file stem: the fixture's path with `_` for `/`.
fn name(case: &str) -> String {
    case.replace('/', "_")
}

fn text_gguf(case: &str) -> String {
    let p = pairs_dir().join(format!("{}.gguf", name(case)));
    p.to_str().expect("utf-8").to_string()
}

fn mmproj_gguf(case: &str) -> String {
    let p = pairs_dir().join(format!("{}.mmproj.gguf", name(case)));
    p.to_str().expect("utf-8").to_string()
}

fn open_pair(case: &str) -> ModelFiles {
    model_files::open_with_mmproj(
        &text_gguf(case),
        Some(&mmproj_gguf(case)),
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{case}: {}", e.render(false)))
}

fn loaded(files: &ModelFiles) -> Loaded {
    let model =
        model_files::load_model(files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    Loaded {
        runner: Runner::new(model),
        eos: files.eos.clone(),
        config: files.config.clone(),
    }
}

fn hf_config(case: &str) -> Value {
    let p = fixture(case).join("config.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("config.json")).expect("json")
}

#[test]
fn pair_config_agrees_with_config_json() {
    for &(case, script) in PAIRS {
        let files = open_pair(case);
        let (ours, hf) = (&files.config, hf_config(case));
        assert_eq!(
            mllm_runtime::assets::script_for_config(ours),
            Ok(script),
            "{case}"
        );
        for key in [
            "architectures",
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
            "tie_word_embeddings",
        ] {
            assert!(
                same_json(&ours[key], &hf[key]),
                "{case}: `{key}` is {}, config.json says {}",
                ours[key],
                hf[key]
            );
        }
        let (v, hv) = (&ours["vision_config"], &hf["vision_config"]);
        // Qwen3.5's configs have no DeepStack list: none.
        let mut hv = hv.clone();
        hv.as_object_mut()
            .expect("vision_config")
            .entry("deepstack_visual_indexes")
            .or_insert(serde_json::json!([]));
        for key in [
            "depth",
            "hidden_size",
            "intermediate_size",
            "num_heads",
            "in_channels",
            "patch_size",
            "spatial_merge_size",
            "temporal_patch_size",
            "out_hidden_size",
            "num_position_embeddings",
            "deepstack_visual_indexes",
            "hidden_act",
        ] {
            assert!(
                same_json(&v[key], &hv[key]),
                "{case}: vision `{key}` is {}, config.json says {}",
                v[key],
                hv[key]
            );
        }
        let (t, ht) = (&ours["text_config"], &hf["text_config"]);
        for key in [
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "rms_norm_eps",
        ] {
            assert!(
                same_json(&t[key], &ht[key]),
                "{case}: text `{key}` is {}, text_config says {}",
                t[key],
                ht[key]
            );
        }
        let rope = ht.get("rope_scaling").unwrap_or(&ht["rope_parameters"]);
        // Without sections Qwen3.5 takes transformers' default, which
        // llama.cpp's converter writes.
        let default = serde_json::json!([11, 11, 10]);
        let sections = rope.get("mrope_section").unwrap_or(&default);
        assert_eq!(&t["rope_parameters"]["mrope_section"], sections, "{case}");
        assert_eq!(
            t["rope_parameters"]["mrope_interleaved"],
            Value::Bool(true),
            "{case}"
        );
        let theta = ht.get("rope_theta").unwrap_or(&rope["rope_theta"]);
        assert!(
            same_json(&t["rope_parameters"]["rope_theta"], theta),
            "{case}: rope theta"
        );
    }
}

/// The processor settings from the mmproj: what preprocessor_config.json
/// says for mean, std and sizes; the pixel budget is llama.cpp's for
/// Qwen-VL (8 to 4096 merged tokens), which the file does not store.
#[test]
fn pair_preprocessor_settings_come_from_the_mmproj() {
    let case = PAIRS[0].0;
    let files = open_pair(case);
    let ours = files
        .preprocessor_config
        .as_ref()
        .expect("preprocessor settings");
    let hf: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(case).join("preprocessor_config.json")).expect("file"),
    )
    .expect("json");
    for key in [
        "patch_size",
        "temporal_patch_size",
        "merge_size",
        "image_mean",
        "image_std",
    ] {
        assert_eq!(ours[key], hf[key], "{key}");
    }
    let token = 32 * 32;
    assert_eq!(ours["size"]["shortest_edge"], 8 * token);
    assert_eq!(ours["size"]["longest_edge"], 4096 * token);
}

/// Every tensor of the checkpoint, under its own name, equals the pair's
/// (f32 values compared exactly; the bf16 fixture was widened exactly).
#[test]
fn pair_tensors_equal_the_checkpoint() {
    for &(case, _) in PAIRS {
        let files = open_pair(case);
        let hf = mllm_converter::HfModelDir::open(&fixture(case)).expect("HF dir");
        let mut n = 0;
        for t in hf.weights.names() {
            // The HF checkpoint stores Qwen3-VL-MoE's experts fused; the
            // pair holds them per projection, as the loader lays them out
            // (gguf_families.rs checks those through the logits).
            if t.contains(".mlp.experts.") {
                continue;
            }
            // The pairs are converted without the MTP head (`--no-mtp`);
            // gguf_qwen35.rs checks a file that keeps it.
            if t.starts_with("mtp.") {
                continue;
            }
            let want = hf
                .weights
                .load(&t)
                .and_then(|x| x.to_f32_vec().map_err(|e| e.to_string()));
            let info = files
                .weights
                .info(&t)
                .unwrap_or_else(|| panic!("{case}: the pair has no `{t}`"));
            let got = files
                .weights
                .load(&t)
                .and_then(|x| x.to_f32_vec().map_err(|e| e.to_string()));
            assert_eq!(
                info.shape,
                hf.weights.info(&t).expect("info").shape,
                "{case}: `{t}` shape"
            );
            let (got, want) = (got.expect("pair"), want.expect("hf"));
            // Exact, but for the values llama.cpp's Qwen3.5 converter
            // changed (norms stored as 1 + w, `A_log` as -exp(A_log)),
            // which come back within f32 rounding (gguf_qwen35.rs).
            let changed = case.starts_with("qwen3_5")
                && (t.ends_with("norm.weight") || t.ends_with("A_log"))
                && !t.starts_with("model.visual.");
            let err = max_abs(&got, &want);
            let tol = if changed { 1e-6 } else { 0.0 };
            assert!(err <= tol, "{case}: `{t}` differs by {err}");
            n += 1;
        }
        let vision = files
            .weights
            .names()
            .iter()
            .filter(|t| t.starts_with("model.visual."))
            .count();
        eprintln!("{case}: {n} tensors equal the checkpoint's ({vision} of the vision tower)");
        assert!(vision > 20, "{case}: only {vision} vision tensors");
    }
}

/// (prompt case, reference file) of each fixture's prompts with images.
fn image_prompts(case: &str) -> Vec<String> {
    ["one_image", "two_images"]
        .iter()
        .map(|p| fixture(case).join(format!("reference_{p}.safetensors")))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .collect()
}

fn f32s(path: &str, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("reference");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn prefill(m: &mut Loaded, ids: &[i32], images: &Images) -> Vec<f32> {
    let (logits, _) = m
        .prefill_images(&new_cache(), ids, images, false)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    data(&logits)
}

#[test]
fn image_prefill_matches_transformers_and_the_hf_dir() {
    for &(case, _) in PAIRS {
        let mut pair = loaded(&open_pair(case));
        let hf_files = model_files::open(fixture(case).to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut hf = loaded(&hf_files);
        let prompts = image_prompts(case);
        assert!(!prompts.is_empty(), "{case}: no image references");
        for r in prompts {
            let ids = ref_i32s(Path::new(&r), "input_ids");
            let imgs = read_images(&r).unwrap_or_else(|e| panic!("{}", e.render(false)));
            let got = prefill(&mut pair, &ids, &imgs);
            let err = max_abs(&got, &f32s(&r, "logits"));
            let vs_dir = max_abs(&got, &prefill(&mut hf, &ids, &imgs));
            eprintln!(
                "{r}: GGUF pair max-abs vs transformers {err:.3e}, vs the HF dir {vs_dir:.3e}"
            );
            assert!(err <= 1e-4, "{r}: max-abs error {err} exceeds 1e-4");
            assert!(
                vs_dir <= 1e-5,
                "{r}: the pair and the HF dir differ by {vs_dir}"
            );
        }
    }
}

#[test]
fn greedy_ids_after_images_match_transformers() {
    for &(case, _) in PAIRS {
        let mut m = loaded(&open_pair(case));
        for r in image_prompts(case) {
            let ids = ref_i32s(Path::new(&r), "input_ids");
            let want = ref_i32s(Path::new(&r), "greedy_ids");
            let imgs = read_images(&r).unwrap_or_else(|e| panic!("{}", e.render(false)));
            let cache = new_cache();
            let (mut logits, delta) = m
                .prefill_images(&cache, &ids, &imgs, true)
                .unwrap_or_else(|e| panic!("{}", e.render(false)));
            let mut got = vec![];
            for i in ids.len().. {
                got.push(m.argmax_last(&logits).expect("argmax"));
                if got.len() == want.len() {
                    break;
                }
                let pos = (i as i64 + delta) as usize;
                logits = m
                    .step(&cache, &got[got.len() - 1..], pos, true)
                    .expect("decode");
            }
            assert_eq!(got, want, "{r}: greedy ids");
        }
    }
}

/// Dense Qwen3-VL's text GGUF alone (arch `qwen3vl`) runs as Qwen3 on the
/// fixtures' text-only prompts, as qwen3vlmoe's runs as Qwen3-MoE.
#[test]
fn dense_text_gguf_alone_runs_text_prompts() {
    for &(case, _) in &PAIRS[..2] {
        let files =
            model_files::open(&text_gguf(case)).unwrap_or_else(|e| panic!("{}", e.render(false)));
        assert_eq!(
            mllm_runtime::assets::script_for_config(&files.config),
            Ok("qwen3"),
            "{case}"
        );
        let r = reference_file(&fixture(case).join("reference_text_only.safetensors"));
        let model =
            model_files::load_model(&files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let err = max_abs(&data(&full_logits(&model, &r.input_ids)), &r.logits);
        eprintln!("{case}: text GGUF alone, text-only prompt max-abs vs transformers {err:.3e}");
        assert!(err <= 1e-4, "{case}: max-abs error {err}");
        let mut m = loaded(&files);
        assert_eq!(
            greedy(&mut m, &r.input_ids, r.greedy.len()),
            r.greedy,
            "{case}: greedy ids"
        );
    }
}

fn error_of(r: mllm_runtime::Result<impl Sized>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.render(false),
    }
}

#[test]
fn images_without_mmproj_and_misplaced_files_say_what_to_pass() {
    let case = PAIRS[0].0;
    let image = root().join("tests/fixtures/qwen3_vl/run_images/a_160x120.png");
    let text =
        model_files::open(&text_gguf(case)).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let e = error_of(images::from_files(&text, &[image.display().to_string()]));
    assert!(e.contains("--mmproj") && e.contains("mmproj GGUF"), "{e}");
    // The mmproj as the model, an mmproj beside a Hugging Face directory,
    // a text GGUF as the mmproj.
    let e = error_of(model_files::open(&mmproj_gguf(case)));
    assert!(
        e.contains("is an mmproj file") && e.contains("--mmproj"),
        "{e}"
    );
    let dir = fixture(case).display().to_string();
    let e = error_of(model_files::open_with_mmproj(
        &dir,
        Some(&mmproj_gguf(case)),
        Default::default(),
    ));
    assert!(e.contains("--mmproj goes with a GGUF text model"), "{e}");
    let e = error_of(model_files::open_with_mmproj(
        &text_gguf(case),
        Some(&text_gguf(case)),
        Default::default(),
    ));
    assert!(e.contains("not an mmproj file"), "{e}");
    // Another model's mmproj: the projector's width does not fit.
    let other = mmproj_gguf(PAIRS[1].0);
    let e = error_of(model_files::open_with_mmproj(
        &text_gguf(case),
        Some(&other),
        Default::default(),
    ));
    assert!(e.contains("not its mmproj"), "{e}");
}

/// An F16 mmproj (the converter's `--outtype f16`: F16 patch kernel and
/// matrices, F32 norms and positions) with the F32 text model: logits
/// close to the f32 reference, as an f16 conversion of the HF dir is.
#[test]
fn f16_mmproj_keeps_logits_close() {
    let case = PAIRS[0].0;
    let f16 = pairs_dir().join(format!("{}.f16.mmproj.gguf", name(case)));
    let files = model_files::open_with_mmproj(
        &text_gguf(case),
        Some(f16.to_str().expect("utf-8")),
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let kernel = "model.visual.patch_embed.proj.weight";
    let info = files.weights.info(kernel).expect("kernel");
    assert_eq!(info.shape, [32, 3, 2, 16, 16], "{kernel}");
    let qkv = "model.visual.blocks.0.attn.qkv.weight";
    let info = files.weights.info(qkv).expect("qkv");
    assert_eq!(info.dtype, mllm_backends::DType::F16, "{qkv} stays F16");
    let mut m = loaded(&files);
    for r in image_prompts(case) {
        let ids = ref_i32s(Path::new(&r), "input_ids");
        let imgs = read_images(&r).unwrap_or_else(|e| panic!("{}", e.render(false)));
        let got = prefill(&mut m, &ids, &imgs);
        let want = f32s(&r, "logits");
        let vocab = want.len() / ids.len();
        let cos = common::golden::worst_cosine(&got, &want, vocab);
        eprintln!("{r}: F16 mmproj worst per-position cosine vs transformers {cos:.6}");
        assert!(cos >= 0.9999, "{r}: cosine {cos}");
    }
}

/// `mllm convert TEXT.gguf OUT.mllm --mmproj MMPROJ.gguf`: the `.mllm`
/// holds both files (text blocks copied, the tower under transformers'
/// names, the pair's image settings) and answers image prompts as the pair.
#[test]
fn pair_converts_to_one_mllm_file() {
    let dir = tempfile::tempdir().expect("tmp");
    for &(case, _) in PAIRS {
        let out = dir.path().join(format!("{}.mllm", name(case)));
        let (text, mm) = (text_gguf(case), mmproj_gguf(case));
        mllm_converter::mllm_format::convert_cancellable(
            Path::new(&text),
            Some(Path::new(&mm)),
            &out,
            "f32",
            None,
            |_, _| {},
            &Default::default(),
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        let conv = model_files::open(out.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let pair = open_pair(case);
        assert!(
            same_json(&conv.config, &pair.config),
            "{case}: configs differ"
        );
        let (mut a, mut b) = (loaded(&conv), loaded(&pair));
        for r in image_prompts(case) {
            let ids = ref_i32s(Path::new(&r), "input_ids");
            let imgs = read_images(&r).unwrap_or_else(|e| panic!("{}", e.render(false)));
            let d = max_abs(&prefill(&mut a, &ids, &imgs), &prefill(&mut b, &ids, &imgs));
            eprintln!("{r}: converted pair vs the pair max-abs {d:.3e}");
            assert!(d <= 1e-6, "{r}: the converted pair differs by {d}");
        }
    }
    // Only a GGUF text model takes an mmproj.
    let e = mllm_converter::mllm_format::convert_cancellable(
        &fixture(PAIRS[0].0),
        Some(Path::new(&mmproj_gguf(PAIRS[0].0))),
        &dir.path().join("x.mllm"),
        "f32",
        None,
        |_, _| {},
        &Default::default(),
    )
    .expect_err("an HF dir with --mmproj is refused")
    .to_string();
    assert!(e.contains("--mmproj goes with a GGUF text model"), "{e}");
}
