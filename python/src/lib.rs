//! The `mllm` Python module: `mllm.load(path)` gives a `Model` that
//! generates (whole or streamed), chats (with images for vision-language
//! models), tokenizes and detokenizes, over mllm-embed (the same code
//! path as the C ABI and `mllm run`). It owns only the Python
//! surface: argument conversion, exceptions, and the worker thread each
//! answer runs on, so that the GIL is released while the model computes,
//! a streamed answer is an iterator fed through a channel, and Ctrl-C or
//! dropping the iterator cancels the answer. Embedding and reranking
//! models load with `mllm.load_embedder` / `mllm.load_reranker`
//! (`vectors`).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod vectors;

use mllm_embed as mllm;
use mllm_embed::{Input, LoadConfig, Outcome, Params, Session, Status, Turn};
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

pyo3::create_exception!(
    mllm,
    MllmError,
    PyException,
    "A model failed to load, or tokenizing or generation failed."
);

fn py_err(e: mllm::Error) -> PyErr {
    match e.status {
        Status::NotFound => PyFileNotFoundError::new_err(e.message),
        Status::InvalidArgument => PyValueError::new_err(e.message),
        _ => MllmError::new_err(e.message),
    }
}

/// What the worker thread sends: text as it is generated, then the end.
enum Msg {
    Text(String),
    Done(mllm::Result<Outcome>),
}

/// What the model is asked, owned by the worker thread.
enum Request {
    Prompt {
        system: Option<String>,
        prompt: String,
        images: Vec<String>,
        raw: bool,
    },
    Conversation(Vec<Turn>),
}

/// A loaded model with the session its answers run in (so a prompt that
/// starts like the previous one reuses its KV cache). One answer runs at a
/// time; a second call waits for the first.
#[pyclass(frozen, module = "mllm")]
struct Model {
    session: Arc<Session>,
    path: String,
    last: Arc<Mutex<Option<Outcome>>>,
}

/// An answer being generated, as an iterator of text pieces. Dropping it
/// (or `close()`) before the end cancels the answer.
#[pyclass(module = "mllm")]
struct Stream {
    /// None once the answer ended. (A Mutex only to make the class
    /// `Sync`, as PyO3 asks; `&mut self` methods reach it without locking.)
    rx: Mutex<Option<Receiver<Msg>>>,
    session: Arc<Session>,
    last: Arc<Mutex<Option<Outcome>>>,
}

impl Stream {
    /// The next piece (`None` at the end), waiting without the GIL and
    /// waking every 100 ms for Python's signal handlers (Ctrl-C cancels).
    fn next_piece(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        loop {
            let slot = self.rx.get_mut().unwrap_or_else(|e| e.into_inner());
            let Some(rx) = slot.take() else {
                return Ok(None);
            };
            // The receiver moves into the closure (a `&Receiver` is not
            // `Send`) and comes back with what it got.
            let (rx, got) = py.detach(move || {
                let got = rx.recv_timeout(Duration::from_millis(100));
                (rx, got)
            });
            let done = matches!(got, Ok(Msg::Done(_)));
            if !done {
                *slot = Some(rx);
                // Pieces may come faster than the timeout: look at
                // signals (Ctrl-C) after each one too.
                if let Err(e) = py.check_signals() {
                    self.cancel_rest();
                    return Err(e);
                }
            }
            match got {
                Ok(Msg::Text(s)) => return Ok(Some(s)),
                Ok(Msg::Done(r)) => {
                    let out = r.map_err(py_err)?;
                    *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
                    return Ok(None);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    *slot = None;
                    return Err(MllmError::new_err("the generation thread ended early"));
                }
            }
        }
    }

    /// Cancels the answer if it is still being generated.
    fn cancel_rest(&mut self) {
        let slot = self.rx.get_mut().unwrap_or_else(|e| e.into_inner());
        if slot.take().is_some() {
            self.session.cancel();
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.cancel_rest();
    }
}

#[pymethods]
impl Stream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        self.next_piece(py)
    }

    /// Cancels the answer if it is still being generated.
    fn close(&mut self) {
        self.cancel_rest();
    }
}

impl Model {
    /// Starts `req` on a worker thread; the pieces come through the stream.
    fn start(&self, req: Request, params: Params) -> Stream {
        let (tx, rx) = mpsc::channel();
        let session = self.session.clone();
        std::thread::spawn(move || {
            let mut on_text = |s: &str| tx.send(Msg::Text(s.to_string())).is_ok();
            let input = match &req {
                Request::Prompt {
                    system,
                    prompt,
                    images,
                    raw,
                } => Input::Prompt {
                    system: system.as_deref(),
                    prompt,
                    images,
                    raw: *raw,
                },
                Request::Conversation(turns) => Input::Conversation(turns),
            };
            // A panic (a bug) becomes an error for the caller, not a thread
            // that vanishes.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                session.generate(input, &params, &mut on_text)
            }))
            .unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                Err(mllm::Error::new(
                    Status::Internal,
                    format!("internal error: {what}"),
                ))
            });
            let _ = tx.send(Msg::Done(r));
        });
        Stream {
            rx: Mutex::new(Some(rx)),
            session: self.session.clone(),
            last: self.last.clone(),
        }
    }

    /// `req`'s answer: a `Stream`, or its text joined.
    fn answer(
        &self,
        py: Python<'_>,
        req: Request,
        params: Params,
        stream: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut s = self.start(req, params);
        if stream {
            return Ok(Py::new(py, s)?.into_any());
        }
        let mut text = String::new();
        while let Some(piece) = s.next_piece(py)? {
            text.push_str(&piece);
        }
        Ok(PyString::new(py, &text).into_any().unbind())
    }
}

/// `stop` as a list: None, one string, or a sequence of strings.
fn stop_list(stop: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match stop {
        None => Ok(vec![]),
        Some(s) if s.is_none() => Ok(vec![]),
        Some(s) => match s.extract::<String>() {
            Ok(one) => Ok(vec![one]),
            Err(_) => s.extract::<Vec<String>>(),
        },
    }
}

#[allow(clippy::too_many_arguments)]
fn params(
    max_tokens: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    presence_penalty: f32,
    frequency_penalty: f32,
    seed: Option<u64>,
    stop: Option<&Bound<'_, PyAny>>,
    enable_thinking: Option<bool>,
    json_schema: Option<&Bound<'_, PyAny>>,
    grammar: Option<String>,
) -> PyResult<Params> {
    let constraint = constraint(json_schema, grammar)?;
    Ok(Params {
        max_tokens,
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        presence_penalty,
        frequency_penalty,
        seed,
        stop: stop_list(stop)?,
        enable_thinking,
        constraint,
        ..Params::default()
    })
}

/// `json_schema` (a dict, or its JSON text; `{}` or `True` for any JSON
/// object) or `grammar` (llama.cpp's GBNF), one at most.
fn constraint(
    json_schema: Option<&Bound<'_, PyAny>>,
    grammar: Option<String>,
) -> PyResult<Option<mllm::ConstraintSpec>> {
    let schema = match json_schema {
        Some(s) if !s.is_none() => {
            let text: String = match s.extract::<String>() {
                Ok(t) => t,
                Err(_) if s.extract::<bool>().is_ok_and(|b| b) => "{}".into(),
                Err(_) => s
                    .py()
                    .import("json")?
                    .call_method1("dumps", (s,))?
                    .extract()?,
            };
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                PyValueError::new_err(format!("json_schema is not valid JSON: {e}"))
            })?;
            Some(match v.as_object() {
                Some(o) if o.is_empty() => mllm::ConstraintSpec::JsonObject,
                _ => mllm::ConstraintSpec::JsonSchema(v),
            })
        }
        _ => None,
    };
    match (schema, grammar) {
        (Some(_), Some(_)) => Err(PyValueError::new_err(
            "json_schema and grammar each constrain the answer; give one",
        )),
        (Some(s), None) => Ok(Some(s)),
        (None, Some(g)) => Ok(Some(mllm::ConstraintSpec::Gbnf(g))),
        (None, None) => Ok(None),
    }
}

/// Image paths (str or os.PathLike) as the runtime takes them.
fn paths(v: Vec<std::path::PathBuf>) -> PyResult<Vec<String>> {
    v.into_iter()
        .map(|p| {
            p.into_os_string()
                .into_string()
                .map_err(|_| PyValueError::new_err("an image path is not UTF-8"))
        })
        .collect()
}

/// A message dict: `{"role": ..., "content": ..., "images": [paths]}`.
fn turn(m: &Bound<'_, PyAny>) -> PyResult<Turn> {
    let d = m
        .cast::<PyDict>()
        .map_err(|_| PyValueError::new_err("each message is a dict with role and content"))?;
    let get = |k: &str| -> PyResult<String> {
        d.get_item(k)?
            .ok_or_else(|| PyValueError::new_err(format!("a message has no {k:?}")))?
            .extract()
    };
    let images = match d.get_item("images")? {
        Some(v) if !v.is_none() => paths(v.extract()?)?,
        _ => vec![],
    };
    Ok(Turn {
        role: get("role")?,
        content: get("content")?,
        images,
    })
}

#[pymethods]
impl Model {
    /// Generates an answer to `prompt`: through the model's chat template
    /// as one user message (after `system`, when given), or as plain text
    /// to continue with `raw=True` or when the model has no template.
    /// Returns the text, or with `stream=True` an iterator of text pieces.
    /// Sampling defaults are `mllm run`'s; `temperature=0` is greedy.
    #[pyo3(signature = (
        prompt, *, max_tokens=512, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
        repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, seed=None,
        stop=None, stream=false, raw=false, system=None, images=None, enable_thinking=None,
        json_schema=None, grammar=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: String,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        presence_penalty: f32,
        frequency_penalty: f32,
        seed: Option<u64>,
        stop: Option<&Bound<'_, PyAny>>,
        stream: bool,
        raw: bool,
        system: Option<String>,
        images: Option<Vec<std::path::PathBuf>>,
        enable_thinking: Option<bool>,
        json_schema: Option<&Bound<'_, PyAny>>,
        grammar: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let p = params(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            seed,
            stop,
            enable_thinking,
            json_schema,
            grammar,
        )?;
        let req = Request::Prompt {
            system,
            prompt,
            images: paths(images.unwrap_or_default())?,
            raw,
        };
        self.answer(py, req, p, stream)
    }

    /// The assistant's answer to `messages` (dicts with "role" and
    /// "content", and optionally "images": a list of image files shown in
    /// that message), rendered with the model's chat template. `images`
    /// are shown with the first user message. Returns the text, or with
    /// `stream=True` an iterator of text pieces.
    #[pyo3(signature = (
        messages, images=None, *, max_tokens=512, temperature=0.8, top_k=40, top_p=0.95,
        min_p=0.05, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, seed=None,
        stop=None, stream=false, enable_thinking=None, json_schema=None, grammar=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn chat(
        &self,
        py: Python<'_>,
        messages: Vec<Bound<'_, PyAny>>,
        images: Option<Vec<std::path::PathBuf>>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        presence_penalty: f32,
        frequency_penalty: f32,
        seed: Option<u64>,
        stop: Option<&Bound<'_, PyAny>>,
        stream: bool,
        enable_thinking: Option<bool>,
        json_schema: Option<&Bound<'_, PyAny>>,
        grammar: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let mut turns: Vec<Turn> = messages.iter().map(turn).collect::<PyResult<_>>()?;
        if let Some(imgs) = images.filter(|i| !i.is_empty()) {
            let imgs = paths(imgs)?;
            let first = turns
                .iter_mut()
                .find(|t| t.role == "user")
                .ok_or_else(|| PyValueError::new_err("images need a user message to go with"))?;
            first.images.splice(0..0, imgs);
        }
        let p = params(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            seed,
            stop,
            enable_thinking,
            json_schema,
            grammar,
        )?;
        self.answer(py, Request::Conversation(turns), p, stream)
    }

    /// Token ids of `text`; `add_special` adds what the tokenizer adds
    /// around a sequence (a BOS for Llama-style vocabularies).
    #[pyo3(signature = (text, add_special=false))]
    fn tokenize(&self, py: Python<'_>, text: String, add_special: bool) -> PyResult<Vec<u32>> {
        let model = self.session.model();
        py.detach(|| model.tokenize(&text, add_special))
            .map_err(py_err)
    }

    /// The text of token ids; `skip_special` leaves out special tokens.
    #[pyo3(signature = (ids, skip_special=false))]
    fn detokenize(&self, py: Python<'_>, ids: Vec<u32>, skip_special: bool) -> PyResult<String> {
        let model = self.session.model();
        py.detach(|| model.detokenize(&ids, skip_special))
            .map_err(py_err)
    }

    /// Stops the answer being generated (from any thread).
    fn cancel(&self) {
        self.session.cancel();
    }

    /// Empties the KV cache.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        let session = &self.session;
        py.detach(|| session.reset()).map_err(py_err)
    }

    /// Numbers of the last answer that finished: prompt_tokens,
    /// prompt_computed (not taken from the cache), generated_tokens,
    /// stop_reason ("eos", "stop", "length", "cancelled"), prompt_seconds,
    /// generate_seconds. None before the first.
    #[getter]
    fn last_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = last.as_ref() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("prompt_tokens", o.prompt_tokens)?;
        d.set_item("prompt_computed", o.prompt_computed)?;
        d.set_item("generated_tokens", o.generated_tokens)?;
        d.set_item("stop_reason", o.stop_reason.name())?;
        d.set_item("prompt_seconds", o.prompt_seconds)?;
        d.set_item("generate_seconds", o.generate_seconds)?;
        Ok(Some(d))
    }

    /// The path the model was loaded from.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Whether prompts go through a chat template.
    #[getter]
    fn has_chat_template(&self) -> bool {
        self.session.model().has_chat_template()
    }

    /// The context length in tokens, when known.
    #[getter]
    fn context(&self) -> Option<usize> {
        self.session.model().context()
    }

    fn __repr__(&self) -> String {
        format!("mllm.Model({:?})", self.path)
    }
}

/// Loads a model: a GGUF or `.mllm` file, or a Hugging Face directory.
/// `threads` sizes the compute pool (the first load that gives it wins:
/// one pool per process); `context` caps the context length in tokens.
#[pyfunction]
#[pyo3(signature = (path, threads=None, context=None))]
fn load(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: Option<usize>,
    context: Option<usize>,
) -> PyResult<Model> {
    let path = path
        .to_str()
        .ok_or_else(|| PyValueError::new_err("the model path is not UTF-8"))?
        .to_string();
    let cfg = LoadConfig { threads, context };
    let session = py
        .detach(|| mllm::Model::load(&path, &cfg).and_then(|m| m.session(None)))
        .map_err(py_err)?;
    Ok(Model {
        session: Arc::new(session),
        path,
        last: Arc::new(Mutex::new(None)),
    })
}

#[pymodule]
#[pyo3(name = "mllm")]
fn mllm_py(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(vectors::load_embedder, m)?)?;
    m.add_function(wrap_pyfunction!(vectors::load_reranker, m)?)?;
    m.add_class::<Model>()?;
    m.add_class::<vectors::Embedder>()?;
    m.add_class::<vectors::Reranker>()?;
    m.add_class::<Stream>()?;
    m.add("MllmError", m.py().get_type::<MllmError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The engine's one table of defaults, so the keyword defaults written
    // in the signatures above are checked against it (python/tests).
    let d = Params::default();
    let defaults = PyDict::new(m.py());
    defaults.set_item("max_tokens", d.max_tokens)?;
    defaults.set_item("temperature", d.temperature)?;
    defaults.set_item("top_k", d.top_k)?;
    defaults.set_item("top_p", d.top_p)?;
    defaults.set_item("min_p", d.min_p)?;
    defaults.set_item("repeat_penalty", d.repeat_penalty)?;
    defaults.set_item("presence_penalty", d.presence_penalty)?;
    defaults.set_item("frequency_penalty", d.frequency_penalty)?;
    m.add("DEFAULTS", defaults)?;
    Ok(())
}
