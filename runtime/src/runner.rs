//! A bound model with what its steps run on: the eager executor and, with
//! `compile`, captured graphs. `Engine` (conversations) and `Loaded` (one
//! model and its checkpoint's settings, for `exec` and the tests) both step
//! through it, so there is one path from ids to logits.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::{CpuBackend, Op, Tensor};
use mllm_interpreter::{CompiledModel, Eager, Executor, KvCache, Model};

use crate::images::{run_forward_images, ImageTokens, Images};
use crate::{Error, Result};

/// Tokens per captured prefill graph (`--compiled`).
pub const PREFILL_CHUNK: usize = 128;

pub struct Runner {
    pub model: Model,
    pub exec: Eager<CpuBackend>,
    /// Captured graphs, when every text step runs compiled (`compile`).
    pub compiled: Option<CompiledModel<CpuBackend>>,
    /// The 1-token decode graph, when only decoding runs compiled
    /// (`compile_decode`; what `Engine` does by default).
    decode: Option<CompiledModel<CpuBackend>>,
}

impl Runner {
    pub fn new(model: Model) -> Runner {
        Runner {
            model,
            exec: Eager::new(CpuBackend),
            compiled: None,
            decode: None,
        }
    }

    /// Runs 1-token decode steps as a captured graph (bit-identical to the
    /// eager step and faster: no interpreter); prompts stay eager. A script
    /// that cannot be captured decodes eagerly after one warning.
    pub fn compile_decode(&mut self, context: usize) {
        self.decode = Some(CompiledModel::new(CpuBackend, context, 1));
    }

    /// Every step eager (`--eager`).
    pub fn eager_only(&mut self) {
        self.compiled = None;
        self.decode = None;
    }

    /// How steps run, for reports: `eager`, `graph decode`, `graph`.
    pub fn mode(&self) -> &'static str {
        match (&self.compiled, &self.decode) {
            (Some(_), _) => "graph",
            (None, Some(_)) => "graph decode",
            _ => "eager",
        }
    }

    /// Runs later text steps as captured graphs: prefill in chunks of
    /// `chunk` tokens, decode one token a step, against KV buffers of
    /// `context` rows (prompts with images are still prefilled eagerly;
    /// the decoding after them is compiled).
    pub fn compile(&mut self, context: usize, chunk: usize) {
        self.compiled = Some(CompiledModel::new(CpuBackend, context, chunk));
    }

    /// Runs `ids` at rotary positions `start..` against `cache`; returns the
    /// logits `[rows, vocab]` (one row with `last_only`).
    pub fn step(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        start: usize,
        last_only: bool,
    ) -> Result<Tensor> {
        if let Some(c) = self.compiled.as_mut() {
            return c
                .forward(&self.model, ids, start, &mut cache.borrow_mut(), last_only)
                .map_err(|e| Error(format!("error: compiled step: {e}")));
        }
        if ids.len() == 1 && last_only {
            if let Some(d) = self.decode.as_mut() {
                let dtype = cache.borrow().dtype();
                match d.prepare(&self.model, 1, true, dtype) {
                    Ok(()) => {
                        return d
                            .forward(&self.model, ids, start, &mut cache.borrow_mut(), true)
                            .map_err(|e| Error(format!("error: compiled decode step: {e}")));
                    }
                    Err(e) => {
                        eprintln!("warning: decoding eagerly: the script's decode step cannot be captured: {e}");
                        self.decode = None;
                    }
                }
            }
        }
        crate::engine::run_forward(&self.model, &mut self.exec, cache, ids, start, last_only)
    }

    /// Prefills a prompt with images (ids already hold each image's
    /// placeholder tokens), always eagerly; returns the logits and the
    /// offset at which decoding continues (token `i` sits at `i + delta`).
    pub fn prefill_images(
        &mut self,
        cache: &Rc<RefCell<KvCache>>,
        ids: &[i32],
        images: &Images,
        spec: &ImageTokens,
        last_only: bool,
    ) -> Result<(Tensor, i64)> {
        run_forward_images(
            &self.model,
            &mut self.exec,
            cache,
            ids,
            images,
            spec,
            last_only,
        )
    }

    /// The greedy choice after the last row of `logits`.
    pub fn argmax_last(&mut self, logits: &Tensor) -> Result<i32> {
        let rows = logits.shape()[0];
        let last = logits.narrow0(rows - 1, rows)?;
        let idx = self.exec.run(&Op::Argmax { dim: 1 }, &[&last])?;
        Ok(self.exec.read(&idx)?.i32s()?[0])
    }
}
