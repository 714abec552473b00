//! The C ABI called from Rust as C would call it: status codes and
//! messages for bad arguments and missing files, then the real SmolLM2
//! GGUF (tokens, greedy answers, sessions, stop strings, cancellation from
//! the callback and from another thread).

mod common;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};

use common::{smollm2, ANSWER, QUESTION};
use mllm::ffi::*;
use mllm::{Status, StopReason};

fn last_error() -> String {
    unsafe { CStr::from_ptr(mllm_last_error()) }
        .to_str()
        .expect("utf-8")
        .to_string()
}

fn load(path: &str) -> *mut MllmModel {
    let p = CString::new(path).expect("path");
    let mut m = null_mut();
    let st = unsafe { mllm_model_load(p.as_ptr(), null(), &mut m) };
    assert_eq!(st, Status::Ok, "{}", last_error());
    m
}

fn session(m: *const MllmModel) -> *mut MllmSession {
    let mut s = null_mut();
    assert_eq!(
        unsafe { mllm_session_new(m, null(), &mut s) },
        Status::Ok,
        "{}",
        last_error()
    );
    s
}

fn greedy(max_tokens: u32) -> MllmGenerateParams {
    let mut p = mllm_generate_params_default();
    p.temperature = 0.0;
    p.max_tokens = max_tokens;
    p
}

/// What a callback collects, and when it stops.
struct Sink {
    text: String,
    pieces: usize,
    /// Return nonzero at this piece.
    stop_at: usize,
    /// Call `mllm_cancel` on this session at piece `stop_at` instead.
    cancel: *const MllmSession,
}

impl Sink {
    fn new() -> Sink {
        Sink {
            text: String::new(),
            pieces: 0,
            stop_at: 0,
            cancel: null(),
        }
    }
}

unsafe extern "C" fn collect(text: *const c_char, user: *mut c_void) -> c_int {
    let sink = &mut *(user as *mut Sink);
    sink.text
        .push_str(CStr::from_ptr(text).to_str().expect("utf-8 piece"));
    sink.pieces += 1;
    if sink.stop_at > 0 && sink.pieces == sink.stop_at {
        if sink.cancel.is_null() {
            return 1;
        }
        mllm_cancel(sink.cancel);
    }
    0
}

fn generate(
    s: *mut MllmSession,
    prompt: &str,
    p: &MllmGenerateParams,
    sink: &mut Sink,
) -> MllmGenerateResult {
    let prompt = CString::new(prompt).expect("prompt");
    let mut r = std::mem::MaybeUninit::<MllmGenerateResult>::uninit();
    let st = unsafe {
        mllm_generate(
            s,
            prompt.as_ptr(),
            p,
            Some(collect),
            sink as *mut Sink as *mut c_void,
            r.as_mut_ptr(),
        )
    };
    assert_eq!(st, Status::Ok, "{}", last_error());
    unsafe { r.assume_init() }
}

#[test]
fn a_missing_model_is_not_found_with_a_message() {
    let path = CString::new("/no/such/model.gguf").expect("path");
    let mut m = std::ptr::dangling_mut::<MllmModel>();
    let st = unsafe { mllm_model_load(path.as_ptr(), null(), &mut m) };
    assert_eq!(st, Status::NotFound);
    assert!(m.is_null(), "out is cleared on failure");
    assert_eq!(
        last_error(),
        "/no/such/model.gguf: no such file or directory"
    );
    let name = unsafe { CStr::from_ptr(mllm_status_string(st as c_int)) };
    assert_eq!(name.to_str().expect("utf-8"), "model not found");
}

#[test]
fn a_file_that_is_no_model_fails_to_load() {
    let path = CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).expect("path");
    let mut m = null_mut();
    let st = unsafe { mllm_model_load(path.as_ptr(), null(), &mut m) };
    assert_eq!(st, Status::Load, "{}", last_error());
    assert!(m.is_null());
    let msg = last_error();
    assert!(!msg.is_empty() && !msg.contains('\u{1b}'), "{msg:?}");
    assert!(!msg.starts_with("error: "), "{msg:?}");
}

#[test]
fn null_and_bad_arguments_are_invalid() {
    unsafe {
        let mut m = null_mut();
        assert_eq!(
            mllm_model_load(null(), null(), &mut m),
            Status::InvalidArgument
        );
        assert_eq!(last_error(), "path is NULL");
        let p = CString::new("x").expect("path");
        assert_eq!(
            mllm_model_load(p.as_ptr(), null(), null_mut()),
            Status::InvalidArgument
        );
        let bad = [0xffu8, 0xfe, 0];
        assert_eq!(
            mllm_model_load(bad.as_ptr() as *const c_char, null(), &mut m),
            Status::InvalidArgument
        );
        assert_eq!(last_error(), "path is not UTF-8");
        let opts = MllmModelOptions {
            threads: 0,
            context: 0,
        };
        let empty = CString::new("").expect("empty");
        assert_eq!(
            mllm_model_load(empty.as_ptr(), &opts, &mut m),
            Status::InvalidArgument
        );

        let mut s = null_mut();
        assert_eq!(
            mllm_session_new(null(), null(), &mut s),
            Status::InvalidArgument
        );
        assert_eq!(last_error(), "model is NULL");
        assert_eq!(
            mllm_generate(null_mut(), p.as_ptr(), null(), None, null_mut(), null_mut()),
            Status::InvalidArgument
        );
        assert_eq!(last_error(), "session is NULL");
        assert_eq!(mllm_cancel(null()), Status::InvalidArgument);
        assert_eq!(mllm_session_reset(null_mut()), Status::InvalidArgument);
        let (mut ids, mut n) = (null_mut(), 0usize);
        assert_eq!(
            mllm_tokenize(null(), p.as_ptr(), false, &mut ids, &mut n),
            Status::InvalidArgument
        );
        assert_eq!(
            mllm_tokenize(null(), p.as_ptr(), false, null_mut(), &mut n),
            Status::InvalidArgument
        );
        let mut t = null_mut();
        assert_eq!(
            mllm_detokenize(null(), null(), 0, false, &mut t),
            Status::InvalidArgument
        );
        // Freeing NULL does nothing.
        mllm_model_free(null_mut());
        mllm_session_free(null_mut());
        mllm_tokens_free(null_mut(), 3);
        mllm_string_free(null_mut());
    }
}

#[test]
fn the_last_error_belongs_to_its_thread() {
    let p = CString::new("/no/such/file").expect("path");
    let mut m = null_mut();
    assert_eq!(
        unsafe { mllm_model_load(p.as_ptr(), null(), &mut m) },
        Status::NotFound
    );
    let other = std::thread::spawn(last_error).join().expect("thread");
    assert_eq!(other, "");
    assert!(last_error().contains("/no/such/file"));
}

#[test]
fn tokens_round_trip() {
    let m = load(&smollm2());
    let text = CString::new("Hello, world! Ünïcödé 🙂").expect("text");
    unsafe {
        let (mut ids, mut n) = (null_mut(), 0usize);
        assert_eq!(
            mllm_tokenize(m, text.as_ptr(), false, &mut ids, &mut n),
            Status::Ok
        );
        assert!(n > 3);
        let mut back = null_mut();
        assert_eq!(mllm_detokenize(m, ids, n, false, &mut back), Status::Ok);
        assert_eq!(CStr::from_ptr(back), text.as_c_str());
        mllm_string_free(back);
        mllm_tokens_free(ids, n);
        // An id past the vocabulary is a tokenizer error, not a crash.
        let bad = [1u32 << 30];
        let mut out = null_mut();
        assert_eq!(
            mllm_detokenize(m, bad.as_ptr(), 1, false, &mut out),
            Status::Tokenizer
        );
        assert!(out.is_null());
        mllm_model_free(m);
    }
}

#[test]
fn sessions_answer_stop_and_cancel() {
    let m = load(&smollm2());
    let s = session(m);
    // Greedy, as `mllm run --temp 0` answers.
    let mut sink = Sink::new();
    let r = generate(s, QUESTION, &greedy(64), &mut sink);
    assert_eq!(sink.text, ANSWER);
    assert_eq!(r.stop_reason, StopReason::Eos);
    assert_eq!(r.prompt_tokens, r.prompt_computed);
    assert!(r.generated_tokens >= 7);

    // The next turn continues the conversation: only its new tokens are
    // computed. A callback that returns nonzero stops it.
    let mut sink = Sink::new();
    sink.stop_at = 3;
    let r = generate(s, "And of Germany?", &greedy(64), &mut sink);
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(sink.pieces, 3);
    assert!(r.prompt_computed < r.prompt_tokens / 2, "{r:?}");

    // mllm_cancel from the callback.
    let mut sink = Sink::new();
    sink.stop_at = 2;
    sink.cancel = s;
    let r = generate(s, "Tell me a long story.", &greedy(64), &mut sink);
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(sink.pieces, 2);
    assert_eq!(r.generated_tokens, 2);

    // A stop string ends the answer and is not shown.
    unsafe { assert_eq!(mllm_session_reset(s), Status::Ok) };
    let stop = CString::new(" Paris").expect("stop");
    let stops = [stop.as_ptr()];
    let mut p = greedy(64);
    p.stop = stops.as_ptr();
    p.n_stop = 1;
    let mut sink = Sink::new();
    let r = generate(s, QUESTION, &p, &mut sink);
    assert_eq!(r.stop_reason, StopReason::StopString);
    assert_eq!(sink.text, "The capital of France is");

    // Raw text is continued as is; max_tokens bounds it.
    let mut p = greedy(5);
    p.raw = true;
    let mut sink = Sink::new();
    let r = generate(s, "The capital of France is", &p, &mut sink);
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.generated_tokens, 5);
    assert!(!sink.text.is_empty());

    // Images on a text-only model: a generation error with a message.
    let img = CString::new("/no/such.png").expect("img");
    let imgs = [img.as_ptr()];
    let mut p = greedy(4);
    p.images = imgs.as_ptr();
    p.n_images = 1;
    let q = CString::new("Describe it.").expect("q");
    let st = unsafe { mllm_generate(s, q.as_ptr(), &p, None, null_mut(), null_mut()) };
    assert_eq!(st, Status::Generate);
    assert!(!last_error().is_empty());

    // The session outlives the model handle.
    unsafe { mllm_model_free(m) };
    let mut sink = Sink::new();
    unsafe { assert_eq!(mllm_session_reset(s), Status::Ok) };
    generate(s, QUESTION, &greedy(64), &mut sink);
    assert_eq!(sink.text, ANSWER);
    unsafe { mllm_session_free(s) };
}

#[test]
fn cancel_from_another_thread() {
    let m = load(&smollm2());
    let s = session(m);
    // The callback waits for the other thread's cancel after its first
    // piece, so the answer stops at its next token.
    struct Handshake {
        first: std::sync::mpsc::Sender<()>,
        cancelled: std::sync::mpsc::Receiver<()>,
        pieces: usize,
    }
    unsafe extern "C" fn cb(_text: *const c_char, user: *mut c_void) -> c_int {
        let h = &mut *(user as *mut Handshake);
        h.pieces += 1;
        if h.pieces == 1 {
            h.first.send(()).expect("send");
            h.cancelled.recv().expect("recv");
        }
        0
    }
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut h = Handshake {
        first: first_tx,
        cancelled: done_rx,
        pieces: 0,
    };
    let addr = s as usize;
    let canceller = std::thread::spawn(move || {
        first_rx.recv().expect("first piece");
        let st = unsafe { mllm_cancel(addr as *const MllmSession) };
        done_tx.send(()).expect("send");
        st
    });
    let prompt = CString::new("Tell me a long story about a dragon.").expect("prompt");
    let mut r = std::mem::MaybeUninit::<MllmGenerateResult>::uninit();
    let st = unsafe {
        mllm_generate(
            s,
            prompt.as_ptr(),
            &greedy(100),
            Some(cb),
            &mut h as *mut Handshake as *mut c_void,
            r.as_mut_ptr(),
        )
    };
    assert_eq!(st, Status::Ok, "{}", last_error());
    assert_eq!(canceller.join().expect("thread"), Status::Ok);
    let r = unsafe { r.assume_init() };
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(r.generated_tokens, 1);
    assert_eq!(h.pieces, 1);
    unsafe {
        mllm_session_free(s);
        mllm_model_free(m);
    }
}

#[test]
fn two_sessions_share_a_model_across_threads() {
    let m = load(&smollm2());
    let addr = m as usize;
    let answer = |q: &'static str| {
        std::thread::spawn(move || {
            let m = addr as *const MllmModel;
            let s = session(m);
            let mut sink = Sink::new();
            generate(s, q, &greedy(64), &mut sink);
            unsafe { mllm_session_free(s) };
            sink.text
        })
    };
    let (a, b) = (answer(QUESTION), answer(QUESTION));
    assert_eq!(a.join().expect("a"), ANSWER);
    assert_eq!(b.join().expect("b"), ANSWER);
    unsafe { mllm_model_free(m) };
}

/// `json_schema` and `grammar` constrain an answer; a bad one is an
/// invalid argument with the reason.
#[test]
fn answers_follow_a_json_schema_or_a_grammar() {
    let m = load(&smollm2());
    let s = session(m);
    let schema = CString::new(
        r#"{"type":"object","properties":{"answer":{"type":"string","maxLength":10}},"required":["answer"],"additionalProperties":false}"#,
    )
    .expect("schema");
    let mut p = greedy(40);
    p.json_schema = schema.as_ptr();
    let mut sink = Sink::new();
    let r = generate(s, QUESTION, &p, &mut sink);
    assert_eq!(r.stop_reason, StopReason::Eos, "{}", sink.text);
    let v: serde_json::Value = serde_json::from_str(&sink.text).expect("the answer is JSON");
    assert!(v["answer"].is_string(), "{}", sink.text);

    let grammar = CString::new(r#"root ::= "yes" | "no""#).expect("grammar");
    let mut p = greedy(10);
    p.grammar = grammar.as_ptr();
    let mut sink = Sink::new();
    generate(s, QUESTION, &p, &mut sink);
    assert!(sink.text == "yes" || sink.text == "no", "{}", sink.text);

    let bad = CString::new(r#"{"type":"objekt"}"#).expect("bad");
    let mut p = greedy(10);
    p.json_schema = bad.as_ptr();
    let prompt = CString::new(QUESTION).expect("prompt");
    let mut r = std::mem::MaybeUninit::<MllmGenerateResult>::uninit();
    let st = unsafe { mllm_generate(s, prompt.as_ptr(), &p, None, null_mut(), r.as_mut_ptr()) };
    assert_eq!(st, Status::InvalidArgument);
    assert!(
        last_error().contains("JSON schema cannot be used"),
        "{}",
        last_error()
    );
    p.grammar = grammar.as_ptr();
    let st = unsafe { mllm_generate(s, prompt.as_ptr(), &p, None, null_mut(), r.as_mut_ptr()) };
    assert_eq!(st, Status::InvalidArgument);
    assert!(last_error().contains("give one"), "{}", last_error());
    unsafe {
        mllm_session_free(s);
        mllm_model_free(m);
    }
}
