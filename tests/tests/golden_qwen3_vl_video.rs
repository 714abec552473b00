//! Qwen3-VL video against transformers 5 (fixture made by
//! tests/fixtures/qwen3_vl/make_qwen3_vl_video_fixtures.py on the tiny
//! p16_m2_tied_published model): five 96x56 PNG frames in a directory,
//! sampled, resized and patchified as `Qwen3VLVideoProcessor` does, the
//! prompt with per-frame `<t seconds>` text as `Qwen3VLProcessor` writes
//! it, 3D positions as `get_rope_index`, then logits and greedy ids.

mod common;

use common::*;
use mllm_converter::image_preprocess::{decode_video, VideoPreprocessConfig};
use mllm_interpreter::mrope::{mrope_positions_multi, split_video_grids, Placeholders};
use mllm_runtime::images::{self, ImageTokens, Images};
use mllm_runtime::model_files::{self, ModelFiles};
use mllm_runtime::{videos, Loaded};

const CASES: &[&str] = &["frames_default", "frames_fps2", "image_and_video"];
const MODEL: &str = "qwen3_vl/p16_m2_tied_published";

fn video_dir() -> std::path::PathBuf {
    fixture("qwen3_vl/video")
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(video_dir().join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("json")
}

struct Ref(Vec<u8>);

impl Ref {
    fn open(case: &str) -> Ref {
        Ref(std::fs::read(video_dir().join(format!("reference_{case}.safetensors"))).expect("file"))
    }
    fn raw(&self, name: &str) -> Vec<u8> {
        let st = safetensors::SafeTensors::deserialize(&self.0).expect("safetensors");
        let t = st.tensor(name).unwrap_or_else(|_| panic!("{name}"));
        t.data().to_vec()
    }
    fn f32s(&self, name: &str) -> Vec<f32> {
        self.raw(name)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
    fn i32s(&self, name: &str) -> Vec<i32> {
        self.raw(name)
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
    fn i64s(&self, name: &str) -> Vec<i64> {
        self.raw(name)
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect()
    }
}

fn fps_of(c: &serde_json::Value) -> Option<f64> {
    c["fps"].as_f64()
}

fn files() -> ModelFiles {
    model_files::open(fixture(MODEL).to_str().expect("utf-8"))
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
}

/// The case's images and videos preprocessed in Rust from the fixture files.
fn inputs(files: &ModelFiles, case: &str) -> (Images, ImageTokens) {
    let c = &reference()["cases"][case];
    let imgs = c["image"].as_str().map(|name| {
        let p = fixture("qwen3_vl/run_images")
            .join(name)
            .display()
            .to_string();
        images::from_files(files, &[p]).unwrap_or_else(|e| panic!("{}", e.render(false)))
    });
    let frames = video_dir().join("frames").display().to_string();
    videos::with_videos(files, imgs, &[frames], fps_of(c))
        .unwrap_or_else(|e| panic!("{}", e.render(false)))
        .expect("a video")
}

#[test]
fn preprocessing_matches_the_video_processor() {
    let r = reference();
    let cfg = VideoPreprocessConfig::from_model_dir(&fixture(MODEL)).expect("config");
    for case in ["frames_default", "frames_fps2"] {
        let c = &r["cases"][case];
        let v = decode_video(&video_dir().join("frames"), fps_of(c), &cfg).expect("video");
        let want_idx: Vec<usize> =
            serde_json::from_value(c["sampled_indices"].clone()).expect("idx");
        assert_eq!(v.indices, want_idx, "{case}: sampled frames");
        let grid: Vec<Vec<usize>> =
            serde_json::from_value(c["video_grid_thw"].clone()).expect("grid");
        assert_eq!(v.grid_thw.to_vec(), grid[0], "{case}: video_grid_thw");
        let stamps: Vec<String> = v.timestamps.iter().map(|t| format!("{t:.1}")).collect();
        let want: Vec<String> = serde_json::from_value(c["timestamps"].clone()).expect("stamps");
        assert_eq!(stamps, want, "{case}: timestamps");
        let f = Ref::open(case);
        let want = f.f32s("pixel_values_videos");
        assert_eq!(
            v.pixel_values.len(),
            want.len(),
            "{case}: pixel_values_videos size"
        );
        let err = max_abs(&v.pixel_values, &want);
        eprintln!(
            "{case}: pixel_values_videos max-abs = {err:e} ({} rows)",
            v.num_patches
        );
        assert!(err <= 1e-6, "{case}: pixel_values_videos differ by {err}");
        assert_eq!(
            f.i64s("video_grid_thw"),
            grid[0].iter().map(|&x| x as i64).collect::<Vec<_>>()
        );
    }
}

/// An animated PNG of the same frames at 500 ms each: its delays give
/// 2 fps, so it is frames_fps2 exactly.
#[test]
fn animated_png_takes_its_frame_rate_from_the_delays() {
    let cfg = VideoPreprocessConfig::from_model_dir(&fixture(MODEL)).expect("config");
    let v = decode_video(&video_dir().join("clip_2fps.png"), None, &cfg).expect("animation");
    assert_eq!(v.grid_thw, [3, 2, 4]);
    assert_eq!(v.timestamps, [0.25, 1.25, 2.0]);
    let err = max_abs(
        &v.pixel_values,
        &Ref::open("frames_fps2").f32s("pixel_values_videos"),
    );
    assert!(err <= 1e-6, "animated PNG pixels differ by {err}");
    // --video-fps overrides the delays: 24 fps samples 4 frames.
    let v = decode_video(&video_dir().join("clip_2fps.png"), Some(24.0), &cfg).expect("animation");
    assert_eq!(v.indices, [0, 1, 3, 4]);
}

#[test]
fn prompt_text_and_ids_match_the_processor() {
    let r = reference();
    let files = files();
    let tok = files
        .tokenizer()
        .unwrap_or_else(|e| panic!("{}", e.render(false)));
    for &case in CASES {
        let c = &r["cases"][case];
        let (imgs, spec) = inputs(&files, case);
        let prompt = c["prompt"].as_str().expect("prompt");
        let text = images::prompt_text(&files, None, prompt, &imgs, &spec, false, None)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        assert_eq!(
            text,
            c["expanded"].as_str().expect("text"),
            "{case}: prompt text"
        );
        let ids: Vec<u32> = serde_json::from_value(c["input_ids"].clone()).expect("ids");
        assert_eq!(
            tok.encode(&text, false).expect("encode"),
            ids,
            "{case}: input ids"
        );
    }
}

#[test]
fn positions_match_get_rope_index() {
    for &case in CASES {
        let f = Ref::open(case);
        let ids = f.i32s("input_ids");
        let vg = f.i64s("video_grid_thw");
        let frames = split_video_grids(&[[vg[0], vg[1], vg[2]]]);
        let image_grids: Vec<[i64; 3]> = if case == "image_and_video" {
            let g = f.i64s("image_grid_thw");
            vec![[g[0], g[1], g[2]]]
        } else {
            vec![]
        };
        let kinds = [
            Placeholders {
                token: 300,
                what: "image",
                grids: &image_grids,
            },
            Placeholders {
                token: 301,
                what: "video frame",
                grids: &frames,
            },
        ];
        let p = mrope_positions_multi(&ids, &kinds, 2).expect("positions");
        assert_eq!(p.rows.concat(), f.i32s("positions"), "{case}: positions");
        assert_eq!(p.delta, f.i32s("rope_delta")[0] as i64, "{case}: delta");
    }
}

fn load() -> Loaded {
    load_with(&script("qwen3_vl"), MODEL)
}

#[test]
fn prefill_logits_match_transformers() {
    let files = files();
    let mut m = load();
    for &case in CASES {
        let f = Ref::open(case);
        let ids = f.i32s("input_ids");
        let (imgs, _) = inputs(&files, case);
        let (logits, _) = m
            .prefill_images(&new_cache(), &ids, &imgs, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let err = max_abs(&data(&logits), &f.f32s("logits"));
        eprintln!("{case}: prefill max-abs error vs transformers = {err:.3e}");
        assert!(err <= 1e-4, "{case}: logits differ by {err}");
    }
}

#[test]
fn greedy_and_cached_decode_after_video() {
    let files = files();
    let mut m = load();
    for &case in CASES {
        let f = Ref::open(case);
        let ids = f.i32s("input_ids");
        let want = f.i32s("greedy_ids");
        let (imgs, _) = inputs(&files, case);
        // Greedy through the KV cache after the video prompt.
        let cache = new_cache();
        let (mut logits, delta) = m
            .prefill_images(&cache, &ids, &imgs, true)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let mut got = vec![];
        let mut rows = vec![];
        for i in ids.len().. {
            let next = m.argmax_last(&logits).expect("argmax");
            got.push(next);
            if got.len() == want.len() {
                break;
            }
            logits = m
                .step(&cache, &[next], (i as i64 + delta) as usize, true)
                .expect("step");
            rows.extend(data(&logits));
        }
        assert_eq!(got, want, "{case}: greedy ids differ from transformers");
        // One forward over prompt + continuation equals the cached steps.
        let all: Vec<i32> = ids.iter().chain(&want).copied().collect();
        let (full, _) = m
            .prefill_images(&new_cache(), &all, &imgs, false)
            .unwrap_or_else(|e| panic!("{}", e.render(false)));
        let full = data(&full);
        let vocab = full.len() / all.len();
        // Step j fed want[j] at sequence position ids.len() + j.
        let tail = &full[ids.len() * vocab..(ids.len() + want.len() - 1) * vocab];
        let err = max_abs(&rows, tail);
        let scale = tail.iter().fold(1.0f32, |a, v| a.max(v.abs()));
        eprintln!("{case}: cached decode vs full forward max-abs = {err:.3e}");
        assert!(
            err <= 2e-6 * scale,
            "{case}: cached decode differs by {err}"
        );
    }
}

#[test]
fn video_errors_are_clear() {
    let files = files();
    let tmp = tempfile::tempdir().expect("tmp");
    let empty = tmp.path().display().to_string();
    let err = match videos::with_videos(&files, None, &[empty], None) {
        Ok(_) => panic!("an empty directory must be refused"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("no frames"), "{err}");
    let one = tmp.path().join("only.png");
    std::fs::copy(video_dir().join("frames/frame_0.png"), &one).expect("copy");
    let err = match videos::with_videos(&files, None, &[tmp.path().display().to_string()], None) {
        Ok(_) => panic!("one frame must be refused"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("at least"), "{err}");
    let still = fixture("qwen3_vl/run_images/a_160x120.png")
        .display()
        .to_string();
    let err = match videos::with_videos(&files, None, &[still], None) {
        Ok(_) => panic!("a still image is not a video"),
        Err(e) => e.render(false),
    };
    assert!(err.contains("--image"), "{err}");
}
