//! DeepSeek-OCR 2 with images from the two GGUFs llama.cpp writes for it:
//! the text model (arch `deepseek2-ocr`) and the mmproj (projector
//! `deepseekocr2`: SAM, the Qwen2 encoder with its queries, the projector,
//! the view separator), made by llama.cpp's own converter from the
//! committed fixture tests/fixtures/deepseek_ocr2/gguf_shaped
//! (make_deepseek_ocr2_gguf_fixture.py, then `make_family_ggufs.py
//! --vl-pairs tests/fixtures/gguf/mmproj`; committed, so CI needs neither
//! torch nor llama.cpp's source). Checked against the fixture's
//! transformers references and the Hugging Face directory: the joined
//! config and processor settings, every tensor bit for bit, prompt ids,
//! the prompt's logits and greedy ids on a page with tiles and on one
//! without, and the errors of a mismatched pair.

mod common;

use std::path::PathBuf;

use common::*;
use mllm_backends::weights::WeightSource;
use mllm_runtime::engine::Engine;
use mllm_runtime::images;
use mllm_runtime::model_files::{self, load_model, ModelFiles};
use serde_json::Value;

const CASE: &str = "deepseek_ocr2/gguf_shaped";

fn dir() -> PathBuf {
    fixture(CASE)
}

fn pair_file(suffix: &str) -> String {
    root()
        .join("tests/fixtures/gguf/mmproj")
        .join(format!("deepseek_ocr2_gguf_shaped{suffix}"))
        .display()
        .to_string()
}

fn open_pair() -> ModelFiles {
    model_files::open_with_mmproj(
        &pair_file(".gguf"),
        Some(&pair_file(".mmproj.gguf")),
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

fn open_dir() -> ModelFiles {
    model_files::open(dir().to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

fn json(file: &str) -> Value {
    let text = std::fs::read_to_string(dir().join(file)).expect(file);
    serde_json::from_str(&text).expect("json")
}

#[test]
fn pair_config_and_processor_agree_with_the_checkpoint() {
    let files = open_pair();
    let (ours, hf) = (&files.config, json("config.json"));
    assert_eq!(
        mllm_runtime::assets::script_for_config(ours),
        Ok("deepseek_ocr2")
    );
    for key in ["architectures", "image_token_id", "tie_word_embeddings"] {
        assert!(
            same_json(&ours[key], &hf[key]),
            "`{key}`: {} vs {}",
            ours[key],
            hf[key]
        );
    }
    let (v, hv) = (&ours["vision_config"], &hf["vision_config"]);
    for key in [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
        "image_size",
        "patch_size",
        "hidden_act",
        "layer_norm_eps",
        "mlp_dim",
        "output_channels",
        "window_size",
        "global_attn_indexes",
        "downsample_channels",
    ] {
        let (a, b) = (&v["sam_config"][key], &hv["sam_config"][key]);
        assert!(same_json(a, b), "sam `{key}`: {a} vs {b}");
    }
    for key in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_act",
        "rms_norm_eps",
    ] {
        let (a, b) = (&v["encoder_config"][key], &hv["encoder_config"][key]);
        assert!(same_json(a, b), "encoder `{key}`: {a} vs {b}");
    }
    let theta = |c: &Value| c["encoder_config"]["rope_parameters"]["rope_theta"].clone();
    assert!(same_json(&theta(v), &theta(hv)), "encoder rope theta");
    let (t, ht) = (&ours["text_config"], &hf["text_config"]);
    for key in [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "n_routed_experts",
        "num_experts_per_tok",
        "n_shared_experts",
        "moe_intermediate_size",
        "routed_scaling_factor",
        "mlp_layer_types",
        "rms_norm_eps",
    ] {
        assert!(
            same_json(&t[key], &ht[key]),
            "text `{key}`: {} vs {}",
            t[key],
            ht[key]
        );
    }
    let pre = files.preprocessor_config.as_ref().expect("settings");
    let proc = json("processor_config.json");
    let ip = &proc["image_processor"];
    for key in [
        "size",
        "tile_size",
        "min_patches",
        "max_patches",
        "crop_to_patches",
        "background_color",
        "image_mean",
        "image_std",
        "resample",
    ] {
        assert!(
            same_json(&pre[key], &ip[key]),
            "`{key}`: {} vs {}",
            pre[key],
            ip[key]
        );
    }
    for key in ["patch_size", "downsample_ratio"] {
        assert!(
            same_json(&pre[key], &proc[key]),
            "`{key}`: {} vs {}",
            pre[key],
            proc[key]
        );
    }
}

/// Every tensor of the checkpoint, under its own name, equals the pair's
/// (f32 both sides, compared exactly); experts are stacked in the GGUF
/// and checked through the logits.
#[test]
fn pair_tensors_equal_the_checkpoint() {
    let files = open_pair();
    let hf = mllm_converter::HfModelDir::open(&dir()).expect("HF dir");
    let (mut n, mut vision) = (0, 0);
    for t in hf.weights.names() {
        if t.contains(".mlp.experts.") {
            continue;
        }
        let info = files
            .weights
            .info(&t)
            .unwrap_or_else(|| panic!("the pair has no `{t}`"));
        assert_eq!(
            info.shape,
            hf.weights.info(&t).expect("info").shape,
            "`{t}` shape"
        );
        let load = |w: &dyn WeightSource| {
            w.load(&t)
                .and_then(|x| x.to_f32_vec().map_err(|e| e.to_string()))
                .unwrap_or_else(|e| panic!("`{t}`: {e}"))
        };
        let err = max_abs(&load(files.weights.as_ref()), &load(&hf.weights));
        assert!(err == 0.0, "`{t}` differs by {err}");
        n += 1;
        vision += usize::from(t.contains("sam_model") || t.contains("qwen2_model"));
    }
    eprintln!("{n} tensors equal the checkpoint's ({vision} of the vision tower)");
    // 12 SAM blocks of 12 tensors, 12 encoder blocks of 12.
    assert!(vision > 250, "only {vision} vision tensors");
}

fn image_path(case: &str) -> String {
    let rel = json("reference.json")["cases"][case]["image"]
        .as_str()
        .expect("image")
        .to_string();
    dir().join(rel).display().to_string()
}

/// The prompt's ids, its last rows' logits (the reference keeps the last
/// 32: they read every image row), and with `greedy` the greedy ids.
fn check(files: &ModelFiles, case: &str, greedy: bool) -> Vec<f32> {
    let r = RefFile::open(&dir().join("reference.safetensors"));
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let (imgs, spec) = images::from_files(files, &[image_path(case)])
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let text = images::prompt_text(files, None, "Free OCR .", &imgs, &spec, false, None)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let ids = tok.encode(&text, false).expect("encode");
    assert_eq!(
        ids,
        r.u32s(&format!("{case}.input_ids")),
        "{case}: prompt ids"
    );
    let model = load_model(files, None).unwrap_or_else(|e| panic!("{}", e.render(false)));
    let signed: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
    let mut exec = mllm_interpreter::Eager::new(mllm_backends::CpuBackend);
    let (all, _) = images::run_forward_images(
        &model,
        &mut exec,
        &new_cache(),
        &signed,
        &imgs,
        &spec,
        false,
    )
    .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let all = data(&all);
    let want = r.f32s(&format!("{case}.logits"));
    let tail = &all[all.len() - want.len()..];
    let err = max_abs(tail, &want);
    eprintln!(
        "{case}: GGUF pair, last {} rows max-abs vs transformers {err:.3e}",
        want.len() / 300
    );
    assert!(err <= 1e-4, "{case}: logits differ by {err}");
    if !greedy {
        return tail.to_vec();
    }
    let mut engine = Engine::new(model, files.max_context());
    let logits = engine
        .feed_images(&ids, &imgs, &spec)
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    let want_ids = r.u32s(&format!("{case}.greedy"));
    let got = engine_greedy(&mut engine, logits, want_ids.len());
    assert_eq!(got, want_ids, "{case}: greedy ids");
    tail.to_vec()
}

#[test]
fn pages_through_the_pair_match_transformers_and_the_hf_dir() {
    let (pair, hf) = (open_pair(), open_dir());
    for case in ["tiles", "global"] {
        let ours = check(&pair, case, true);
        let theirs = check(&hf, case, false);
        let err = max_abs(&ours, &theirs);
        eprintln!("{case}: GGUF pair vs the HF dir {err:.3e}");
        assert!(
            err <= 1e-5,
            "{case}: the pair and the HF dir differ by {err}"
        );
    }
}

#[test]
fn mismatched_pairs_say_what_goes_together() {
    let err = |text: &str, mm: &str| match model_files::open_with_mmproj(
        text,
        Some(mm),
        Default::default(),
    ) {
        Ok(_) => panic!("{text} + {mm} opened"),
        Err(e) => e.render(false),
    };
    let qwen = root().join("tests/fixtures/gguf/mmproj");
    let qwen_text = qwen.join("qwen3_vl_p16_m2_tied_published.gguf");
    let qwen_mm = qwen.join("qwen3_vl_p16_m2_tied_published.mmproj.gguf");
    for (text, mm) in [
        (pair_file(".gguf"), qwen_mm.display().to_string()),
        (qwen_text.display().to_string(), pair_file(".mmproj.gguf")),
    ] {
        let e = err(&text, &mm);
        assert!(
            e.contains("are not a pair") && e.contains("deepseek2-ocr"),
            "{e}"
        );
    }
    // The mmproj as the text model.
    let e = match model_files::open(&pair_file(".mmproj.gguf")) {
        Ok(_) => panic!("an mmproj opened as a model"),
        Err(e) => e.render(false),
    };
    assert!(e.contains("--mmproj"), "{e}");
}
