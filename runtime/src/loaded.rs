//! One model loaded from a script and a checkpoint with its checkpoint's
//! settings (EOS ids, config): what `mllm exec` and the golden tests drive
//! with caches of their own.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_interpreter::KvCache;
use serde_json::Value as Json;

use crate::images::{ImageTokens, Images};
use crate::model_files::{self, LoadOptions};
use crate::runner::{Runner, PREFILL_CHUNK};
use crate::Result;

pub struct Loaded {
    pub runner: Runner,
    pub eos: Vec<u32>,
    pub config: Json,
}

pub fn load(script: &str, model_path: &str) -> Result<Loaded> {
    load_with(script, model_path, LoadOptions::default())
}

pub fn load_with(script: &str, model_path: &str, opts: LoadOptions) -> Result<Loaded> {
    from_files(
        Some(script),
        model_files::open_with(model_path, opts)?,
        opts,
    )
}

/// `load_with` on files already opened (a GGUF with its `--mmproj`, say).
/// `script: None` picks the built-in script of the checkpoint's
/// architecture, as `run` does.
pub fn from_files(
    script: Option<&str>,
    files: model_files::ModelFiles,
    opts: LoadOptions,
) -> Result<Loaded> {
    let model = model_files::load_model(&files, script)?;
    let mut runner = Runner::new(model);
    runner.exec.check_numerics = opts.check_numerics;
    if opts.compiled && !opts.check_numerics {
        let context = files.max_context().unwrap_or(model_files::DEFAULT_CONTEXT);
        runner.compile(context, PREFILL_CHUNK);
    }
    Ok(Loaded {
        runner,
        eos: files.eos,
        config: files.config,
    })
}

impl Loaded {
    pub fn model(&self) -> &mllm_interpreter::Model {
        &self.runner.model
    }

    /// Runs the entry forward on `ids` at positions `start..`; returns logits.
    pub fn step(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        last_only: bool,
    ) -> Result<Tensor> {
        self.runner.step(cache, ids, start, last_only)
    }

    /// Prefills a prompt with images (ids already hold each image's
    /// placeholder tokens); returns the logits and the offset `delta` at
    /// which decoding continues (token `i` sits at position `i + delta`).
    pub fn prefill_images(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        images: &Images,
        last_only: bool,
    ) -> Result<(Tensor, i64)> {
        let spec = ImageTokens::from_config(&self.config)?;
        self.runner
            .prefill_images(cache, ids, 0, images, &spec, last_only)
    }

    pub fn argmax_last(&mut self, logits: &Tensor) -> Result<i32> {
        self.runner.argmax_last(logits)
    }
}
