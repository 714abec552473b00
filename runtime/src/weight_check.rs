//! A `.mllm` file's checksum verification, run on its own thread while the
//! model's weights are bound and prepared, and joined before the first
//! forward (`model_files::load_model_with`). Preparing a Qwen3-VL-2B q8_0
//! file (repacking its blocks) keeps ~1.2 of 2 cores busy for ~2.5 s; the
//! CRCs of its 2.3 GB took another ~0.5 s when they ran first.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use mllm_converter::mllm_format::Checksums;

/// The state of one file's check.
enum State {
    /// Nothing to check (not a `.mllm` file, or `--no-verify`).
    None,
    Running(JoinHandle<mllm_converter::Result<()>>),
    /// The check's answer, kept for every later `wait`.
    Done(Result<(), String>),
}

/// A checksum verification that may still be running.
pub struct WeightCheck(Mutex<State>);

impl WeightCheck {
    pub fn none() -> WeightCheck {
        WeightCheck(Mutex::new(State::None))
    }

    /// Starts checking `checks` on a new thread (or checks at once when no
    /// thread can be started).
    pub fn start(checks: Checksums) -> WeightCheck {
        let checks = Arc::new(checks);
        let theirs = checks.clone();
        let spawned = std::thread::Builder::new()
            .name("mllm-verify".into())
            .spawn(move || theirs.verify());
        let state = match spawned {
            Ok(handle) => State::Running(handle),
            // Without a thread the check runs now.
            Err(_) => State::Done(checks.verify().map_err(|e| e.to_string())),
        };
        WeightCheck(Mutex::new(state))
    }

    /// Waits for the check: `Err` says which tensors are damaged.
    pub fn wait(&self) -> Result<(), String> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let answer = match std::mem::replace(&mut *state, State::None) {
            State::None => Ok(()),
            State::Done(answer) => answer,
            State::Running(handle) => match handle.join() {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(_) => Err("the checksum thread panicked".to_string()),
            },
        };
        *state = State::Done(answer.clone());
        answer
    }

    /// `wait`, with the message a user of the file at `path` gets: which
    /// tensors are damaged, and what to do about it.
    pub fn wait_for(&self, path: &Path) -> crate::Result<()> {
        self.wait().map_err(|e| {
            crate::Error::load(format!("{} is damaged (its data differs from what was written): {e}\n\
                 download or convert it again; `--no-verify` skips this check, and the model may then print garbage",
                path.display()
            ))
        })
    }
}
