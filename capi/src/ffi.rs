//! The C ABI (`include/mllm.h`, generated from this file by cbindgen; see
//! tests/header.rs). Every function checks its pointers, catches panics
//! (a panic never unwinds into C: it becomes `MLLM_STATUS_INTERNAL`) and
//! reports failures as a status code plus a message `mllm_last_error`
//! returns on the same thread.

#![allow(clippy::missing_safety_doc)] // the safety contract is in mllm.h's comments

mod vectors;
pub use vectors::*;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use mllm_embed::{
    ConstraintSpec, Error, Input, LoadConfig, Model, Params, Result, Session, Status, StopReason,
};

/// A loaded model (weights, tokenizer, chat template). Calls on one model
/// and its sessions may come from any thread; they run one at a time.
pub struct MllmModel {
    model: Model,
}

/// A conversation on a model: its messages and its KV cache.
pub struct MllmSession {
    session: Session,
}

/// How a model loads; start from `mllm_model_options_default()`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MllmModelOptions {
    /// Compute threads; 0: one per core. The process has one pool: the
    /// first load that sets a count sizes it, later counts are ignored.
    pub threads: u32,
    /// Context length in tokens; 0: the model's own.
    pub context: u32,
}

/// Sampling and stopping for one answer; start from
/// `mllm_generate_params_default()` (the defaults of `mllm run`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MllmGenerateParams {
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: u32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Random seed; negative: from the clock.
    pub seed: i64,
    /// `n_stop` stop strings (UTF-8): generation ends where one appears,
    /// and it is not passed to the callback. May be NULL when `n_stop` is 0.
    pub stop: *const *const c_char,
    pub n_stop: usize,
    /// `n_images` image files (PNG, JPEG, WebP) shown with this message,
    /// for vision-language models. May be NULL when `n_images` is 0.
    pub images: *const *const c_char,
    pub n_images: usize,
    /// true: the prompt is plain text continued as is (no chat template,
    /// the session's messages untouched).
    pub raw: bool,
    /// A JSON Schema (UTF-8 JSON text; `{}` for any JSON object) the
    /// answer must follow, or NULL.
    pub json_schema: *const c_char,
    /// A llama.cpp GBNF grammar the answer must follow, or NULL. At most
    /// one of `json_schema` and `grammar`.
    pub grammar: *const c_char,
}

/// What an answer came to.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MllmGenerateResult {
    pub prompt_tokens: usize,
    /// Prompt tokens actually computed (the rest were in the KV cache).
    pub prompt_computed: usize,
    pub generated_tokens: usize,
    pub stop_reason: StopReason,
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
}

/// Receives the answer in pieces of UTF-8 text (never splitting a
/// character) on the thread that called `mllm_generate`; `text` is valid
/// only during the call. Returning nonzero stops the answer.
pub type MllmTokenCallback =
    Option<unsafe extern "C" fn(text: *const c_char, user: *mut c_void) -> c_int>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Runs `f`, turning its error or a panic into a status and the thread's
/// last error message.
fn guard(f: impl FnOnce() -> Result<()>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(p) => {
            set_last_error(&format!("internal error: {}", panic_message(&*p)));
            Status::Internal
        }
    }
}

fn invalid(what: &str) -> Error {
    Error::new(Status::InvalidArgument, what)
}

/// `ptr` as a `&str`, or an error naming `what`.
unsafe fn str_arg<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map_err(|_| invalid(&format!("{what} is not UTF-8")))
}

/// `n` C strings at `ptr`.
unsafe fn strs_arg(ptr: *const *const c_char, n: usize, what: &str) -> Result<Vec<String>> {
    if n == 0 {
        return Ok(vec![]);
    }
    if ptr.is_null() {
        return Err(invalid(&format!("{what} is NULL but its count is {n}")));
    }
    (0..n)
        .map(|i| str_arg(*ptr.add(i), &format!("{what}[{i}]")).map(str::to_string))
        .collect()
}

unsafe fn model_ref<'a>(model: *const MllmModel) -> Result<&'a Model> {
    model
        .as_ref()
        .map(|m| &m.model)
        .ok_or_else(|| invalid("model is NULL"))
}

unsafe fn session_ref<'a>(session: *const MllmSession) -> Result<&'a Session> {
    session
        .as_ref()
        .map(|s| &s.session)
        .ok_or_else(|| invalid("session is NULL"))
}

/// `options` (NULL: the defaults) as mllm-embed's load settings.
unsafe fn load_config(options: *const MllmModelOptions) -> LoadConfig {
    let opts = options
        .as_ref()
        .copied()
        .unwrap_or_else(|| mllm_model_options_default());
    LoadConfig {
        threads: (opts.threads > 0).then_some(opts.threads as usize),
        context: (opts.context > 0).then_some(opts.context as usize),
    }
}

/// The default load options: all cores, the model's context.
#[no_mangle]
pub extern "C" fn mllm_model_options_default() -> MllmModelOptions {
    MllmModelOptions {
        threads: 0,
        context: 0,
    }
}

/// Loads a model: a GGUF or `.mllm` file, or a Hugging Face directory.
/// `options` may be NULL (the defaults). On success `*out` is the model
/// (free it with `mllm_model_free`); on failure it is NULL.
#[no_mangle]
pub unsafe extern "C" fn mllm_model_load(
    path: *const c_char,
    options: *const MllmModelOptions,
    out: *mut *mut MllmModel,
) -> Status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let path = str_arg(path, "path")?;
        let cfg = load_config(options);
        let model = Model::load(path, &cfg)?;
        *out = Box::into_raw(Box::new(MllmModel { model }));
        Ok(())
    })
}

/// Frees a model; NULL is ignored. Sessions made from it stay usable (the
/// weights are freed with the last of them).
#[no_mangle]
pub unsafe extern "C" fn mllm_model_free(model: *mut MllmModel) {
    if !model.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(model))));
    }
}

/// A new conversation on `model` with an empty KV cache. `system` (may be
/// NULL) is its system message. On success `*out` is the session (free it
/// with `mllm_session_free`); on failure it is NULL.
#[no_mangle]
pub unsafe extern "C" fn mllm_session_new(
    model: *const MllmModel,
    system: *const c_char,
    out: *mut *mut MllmSession,
) -> Status {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        *out = std::ptr::null_mut();
        let model = model_ref(model)?;
        let system = if system.is_null() {
            None
        } else {
            Some(str_arg(system, "system")?)
        };
        let session = model.session(system)?;
        *out = Box::into_raw(Box::new(MllmSession { session }));
        Ok(())
    })
}

/// Frees a session; NULL is ignored. No call may be running on it.
#[no_mangle]
pub unsafe extern "C" fn mllm_session_free(session: *mut MllmSession) {
    if !session.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(session))));
    }
}

/// Forgets the conversation: its messages (except the system message) and
/// its KV cache.
#[no_mangle]
pub unsafe extern "C" fn mllm_session_reset(session: *mut MllmSession) -> Status {
    guard(|| session_ref(session)?.reset())
}

/// The default generation parameters (`mllm run`'s: temperature 0.8,
/// top-k 40, top-p 0.95, min-p 0.05, 512 tokens, seed from the clock).
#[no_mangle]
pub extern "C" fn mllm_generate_params_default() -> MllmGenerateParams {
    let d = Params::default();
    MllmGenerateParams {
        max_tokens: d.max_tokens as u32,
        temperature: d.temperature,
        top_k: d.top_k as u32,
        top_p: d.top_p,
        min_p: d.min_p,
        repeat_penalty: d.repeat_penalty,
        repeat_last_n: d.repeat_last_n as u32,
        presence_penalty: d.presence_penalty,
        frequency_penalty: d.frequency_penalty,
        seed: -1,
        stop: std::ptr::null(),
        n_stop: 0,
        images: std::ptr::null(),
        n_images: 0,
        raw: false,
        json_schema: std::ptr::null(),
        grammar: std::ptr::null(),
    }
}

/// The constraint `json_schema` or `grammar` asks for (NULL: none).
unsafe fn constraint_arg(
    json_schema: *const c_char,
    grammar: *const c_char,
) -> Result<Option<ConstraintSpec>> {
    let schema = if json_schema.is_null() {
        None
    } else {
        let text = str_arg(json_schema, "params.json_schema")?;
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| invalid(&format!("params.json_schema is not valid JSON: {e}")))?;
        Some(match v.as_object() {
            Some(o) if o.is_empty() => ConstraintSpec::JsonObject,
            _ => ConstraintSpec::JsonSchema(v),
        })
    };
    let grammar = if grammar.is_null() {
        None
    } else {
        Some(ConstraintSpec::Gbnf(
            str_arg(grammar, "params.grammar")?.to_string(),
        ))
    };
    match (schema, grammar) {
        (Some(_), Some(_)) => Err(invalid(
            "params.json_schema and params.grammar each constrain the answer; give one",
        )),
        (s, g) => Ok(s.or(g)),
    }
}

/// Answers `prompt` on `session`, streaming the answer to `callback` (may
/// be NULL). Without `raw`, `prompt` is the conversation's next user
/// message, sent through the model's chat template, and the answer joins
/// the conversation; a model without a chat template continues `prompt` as
/// plain text. A prompt that continues what the session's KV cache holds
/// (the next turn) computes only its new tokens; any other starts afresh.
/// `params` may be NULL (the defaults); `result` may be NULL.
/// An answer stopped by `mllm_cancel` or by the callback is a success
/// (`MLLM_STOP_REASON_CANCELLED`).
#[no_mangle]
pub unsafe extern "C" fn mllm_generate(
    session: *mut MllmSession,
    prompt: *const c_char,
    params: *const MllmGenerateParams,
    callback: MllmTokenCallback,
    user: *mut c_void,
    result: *mut MllmGenerateResult,
) -> Status {
    guard(|| {
        let session = session_ref(session)?;
        let prompt = str_arg(prompt, "prompt")?;
        let p = params
            .as_ref()
            .copied()
            .unwrap_or_else(|| mllm_generate_params_default());
        let images = strs_arg(p.images, p.n_images, "params.images")?;
        let params = Params {
            max_tokens: p.max_tokens as usize,
            temperature: p.temperature,
            top_k: p.top_k as usize,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: p.repeat_last_n as usize,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            seed: (p.seed >= 0).then_some(p.seed as u64),
            stop: strs_arg(p.stop, p.n_stop, "params.stop")?,
            enable_thinking: None,
            constraint: constraint_arg(p.json_schema, p.grammar)?,
        };
        let mut on_text = |s: &str| -> bool {
            let Some(cb) = callback else { return true };
            let c = CString::new(s.replace('\0', "")).unwrap_or_default();
            cb(c.as_ptr(), user) == 0
        };
        let out = if p.raw || !session.model().has_chat_template() {
            session.generate(
                Input::Prompt {
                    system: None,
                    prompt,
                    images: &images,
                    raw: true,
                },
                &params,
                &mut on_text,
            )?
        } else {
            session.say(prompt, &images, &params, &mut on_text)?
        };
        if let Some(r) = result.as_mut() {
            *r = MllmGenerateResult {
                prompt_tokens: out.prompt_tokens,
                prompt_computed: out.prompt_computed,
                generated_tokens: out.generated_tokens,
                stop_reason: out.stop_reason,
                prompt_seconds: out.prompt_seconds,
                generate_seconds: out.generate_seconds,
            };
        }
        Ok(())
    })
}

/// Stops the answer being generated on `session` at its next token. Safe
/// from any thread (a signal handler excepted) while the session exists;
/// a cancel while nothing runs is forgotten when the next answer starts.
#[no_mangle]
pub unsafe extern "C" fn mllm_cancel(session: *const MllmSession) -> Status {
    guard(|| {
        session_ref(session)?.cancel();
        Ok(())
    })
}

/// The token ids of `text`. `add_special`: add what the tokenizer adds
/// around a sequence (a BOS for Llama-style vocabularies). On success
/// `*ids` holds `*n_ids` ids (free them with `mllm_tokens_free`).
#[no_mangle]
pub unsafe extern "C" fn mllm_tokenize(
    model: *const MllmModel,
    text: *const c_char,
    add_special: bool,
    ids: *mut *mut u32,
    n_ids: *mut usize,
) -> Status {
    guard(|| {
        if ids.is_null() || n_ids.is_null() {
            return Err(invalid("ids or n_ids is NULL"));
        }
        *ids = std::ptr::null_mut();
        *n_ids = 0;
        let model = model_ref(model)?;
        let v = model.tokenize(str_arg(text, "text")?, add_special)?;
        *n_ids = v.len();
        *ids = Box::into_raw(v.into_boxed_slice()) as *mut u32;
        Ok(())
    })
}

/// Frees ids from `mllm_tokenize` (`n_ids` as it returned); NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn mllm_tokens_free(ids: *mut u32, n_ids: usize) {
    if !ids.is_null() {
        let slice = std::ptr::slice_from_raw_parts_mut(ids, n_ids);
        drop(Box::from_raw(slice));
    }
}

/// The text of `n_ids` ids. `skip_special`: leave out special tokens. On
/// success `*text` is a NUL-terminated UTF-8 string (free it with
/// `mllm_string_free`).
#[no_mangle]
pub unsafe extern "C" fn mllm_detokenize(
    model: *const MllmModel,
    ids: *const u32,
    n_ids: usize,
    skip_special: bool,
    text: *mut *mut c_char,
) -> Status {
    guard(|| {
        if text.is_null() {
            return Err(invalid("text is NULL"));
        }
        *text = std::ptr::null_mut();
        let model = model_ref(model)?;
        let ids: &[u32] = if n_ids == 0 {
            &[]
        } else if ids.is_null() {
            return Err(invalid("ids is NULL"));
        } else {
            std::slice::from_raw_parts(ids, n_ids)
        };
        let s = model.detokenize(ids, skip_special)?;
        *text = CString::new(s.replace('\0', ""))
            .unwrap_or_default()
            .into_raw();
        Ok(())
    })
}

/// Frees a string from `mllm_detokenize`; NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn mllm_string_free(text: *mut c_char) {
    if !text.is_null() {
        drop(CString::from_raw(text));
    }
}

/// The message of the last call on this thread that failed ("" if none);
/// valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn mllm_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// A short, static description of a status code.
#[no_mangle]
pub extern "C" fn mllm_status_string(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        0 => c"ok",
        1 => c"invalid argument",
        2 => c"model not found",
        3 => c"model could not be loaded",
        4 => c"tokenizer error",
        5 => c"generation failed",
        6 => c"internal error",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// The library's version ("0.1.0").
#[no_mangle]
pub extern "C" fn mllm_version() -> *const c_char {
    const V: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    V.as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings_match_the_rust_names() {
        for s in [
            Status::Ok,
            Status::InvalidArgument,
            Status::NotFound,
            Status::Load,
            Status::Tokenizer,
            Status::Generate,
            Status::Internal,
        ] {
            let c = unsafe { CStr::from_ptr(mllm_status_string(s as c_int)) };
            assert_eq!(c.to_str().unwrap(), s.describe());
        }
    }

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let st = guard(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(st, Status::Internal);
        let msg = unsafe { CStr::from_ptr(mllm_last_error()) };
        assert_eq!(msg.to_str().unwrap(), "internal error: boom");
    }
}
