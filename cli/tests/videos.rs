//! `mllm run --video` on the tiny Qwen3-VL (tests/fixtures/qwen3_vl/video,
//! made by make_qwen3_vl_video_fixtures.py): a frame directory and an
//! animated PNG give transformers' prompt length and greedy ids.

mod common;

use common::{mllm, root, text};

fn reference() -> serde_json::Value {
    let p = root().join("tests/fixtures/qwen3_vl/video/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("reference.json")).expect("json")
}

fn run_video(video: &str, fps: Option<&str>, prompt: &str) -> std::process::Output {
    let model = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let mut args = vec![
        "run",
        "--model",
        model.to_str().expect("utf-8"),
        "--video",
        video,
        "--prompt",
        prompt,
        "--temp",
        "0",
        "-n",
        "6",
        "--threads",
        "2",
    ];
    if let Some(f) = fps {
        args.extend(["--video-fps", f]);
    }
    mllm(&args)
}

#[test]
fn run_with_a_video() {
    let r = reference();
    let dir = root().join("tests/fixtures/qwen3_vl/video");
    let frames = dir.join("frames").display().to_string();
    let clip = dir.join("clip_2fps.png").display().to_string();
    // A frame directory at the default 24 fps, the same at --video-fps 2,
    // and the animated PNG whose delays say 2 fps.
    for (video, fps, case) in [
        (&frames, None, "frames_default"),
        (&frames, Some("2"), "frames_fps2"),
        (&clip, None, "frames_fps2"),
    ] {
        let c = &r["cases"][case];
        let out = run_video(video, fps, c["prompt"].as_str().expect("prompt"));
        assert!(out.status.success(), "{case}: {}", text(&out.stderr));
        let n = c["input_ids"].as_array().expect("ids").len();
        let err = text(&out.stderr);
        assert!(err.contains(&format!("prompt {n} tok")), "{case}: {err}");
        let want = c["generated_text"].as_str().expect("text");
        assert_eq!(
            text(&out.stdout).trim_end_matches('\n'),
            want,
            "{case}: output text"
        );
    }
    let out = run_video(&frames, Some("0"), "hi");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("frame rate"),
        "{}",
        text(&out.stderr)
    );
}

/// `chat --video` shows the video with the first message as `run` does
/// (same prompt length, same answer); `/video PATH` attaches another to the
/// next message, and a bad path loses nothing.
#[test]
fn chat_with_a_video() {
    use std::io::Write;
    let r = reference();
    let c = &r["cases"]["frames_fps2"];
    let dir = root().join("tests/fixtures/qwen3_vl/video");
    let model = root().join("tests/fixtures/qwen3_vl/p16_m2_tied_published");
    let s = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mllm"))
        .args([
            "chat",
            "--model",
            &s(&model),
            "--video",
            &s(&dir.join("frames")),
            "--video-fps",
            "2",
            "--temp",
            "0",
            "-n",
            "6",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn chat");
    let input = format!(
        "{}\n/video {}\nAnd this one?\n/video /no/such/frames\nhello\n/exit\n",
        c["prompt"].as_str().expect("prompt"),
        s(&dir.join("clip_2fps.png"))
    );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("chat");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let n = c["input_ids"].as_array().expect("ids").len();
    assert!(err.contains(&format!("prompt {n} tok")), "{err}");
    let want = c["generated_text"].as_str().expect("text");
    assert!(
        text(&out.stdout).starts_with(want),
        "chat {:?} vs transformers {want:?}",
        text(&out.stdout)
    );
    assert!(
        err.contains("/no/such/frames") && err.contains("message not sent"),
        "{err}"
    );
    // Two turns answered (the second with both videos, so a longer
    // prompt); the message with the bad video was not sent.
    assert_eq!(err.matches("| generated ").count(), 2, "{err}");
}
