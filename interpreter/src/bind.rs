//! Weight binding: each `param` a script declares is looked up in the
//! checkpoint by its dotted path and checked against the declared shape.
//! Every problem is collected, so one run reports all missing, mis-shaped
//! and unused tensors.

use std::collections::HashSet;

use mllm_backends::weights::WeightSource;
use mllm_backends::{DType, Tensor};
use mllm_dsl::diagnostic::SourceId;
use mllm_dsl::Span;

use crate::error::RtError;
use crate::value::Value;

/// A declared parameter, as bound.
#[derive(Clone, Debug)]
pub struct ParamRecord {
    pub path: String,
    pub shape: Vec<usize>,
    pub dtype: Option<DType>,
}

pub struct Binder<'w> {
    source: Option<&'w dyn WeightSource>,
    used: HashSet<String>,
    pub errors: Vec<RtError>,
    pub params: Vec<ParamRecord>,
    /// Each bound weight as the executor prepared it, by checkpoint name
    /// (what graph capture tags parameters with).
    pub bound: Vec<(String, mllm_backends::Tensor)>,
    /// Member declarations being evaluated, outermost first.
    decls: Vec<(SourceId, Span)>,
}

impl<'w> Binder<'w> {
    /// Binds against `source`; with `None` it only records the parameter table.
    pub fn new(source: Option<&'w dyn WeightSource>) -> Binder<'w> {
        Binder {
            source,
            used: HashSet::new(),
            errors: vec![],
            params: vec![],
            bound: vec![],
            decls: vec![],
        }
    }

    pub(crate) fn push_decl(&mut self, source: SourceId, span: Span) {
        self.decls.push((source, span));
    }

    pub(crate) fn pop_decl(&mut self) {
        self.decls.pop();
    }

    fn located(&self, e: RtError, source: SourceId, span: Span) -> RtError {
        let mut e = e.at(source, span);
        e.trace = self.decls.iter().rev().copied().collect();
        e.trace_label = "inside the member declared at";
        e
    }

    pub(crate) fn param(
        &mut self,
        path: &str,
        shape: Vec<usize>,
        source: SourceId,
        span: Span,
    ) -> Value {
        let Some(ws) = self.source else {
            self.params.push(ParamRecord {
                path: path.to_string(),
                shape,
                dtype: None,
            });
            return Value::None;
        };
        self.used.insert(path.to_string());
        match self.fetch(ws, path, &shape) {
            Ok(t) => {
                self.params.push(ParamRecord {
                    path: path.to_string(),
                    shape,
                    dtype: Some(t.dtype()),
                });
                Value::Tensor(t)
            }
            Err(e) => {
                self.errors.push(self.located(e, source, span));
                Value::None
            }
        }
    }

    /// The checkpoint's tensor for `path`, of the declared `shape`: as
    /// stored, or stacked from another expert layout (`bind_experts`).
    fn fetch(
        &mut self,
        ws: &dyn WeightSource,
        path: &str,
        shape: &[usize],
    ) -> Result<Tensor, RtError> {
        // Absent, or (experts stored transposed) of another shape.
        if ws.info(path).is_none_or(|i| i.shape != shape) {
            if let Some(r) = crate::bind_experts::synthesize(ws, path, shape) {
                let (t, used) = r.map_err(|msg| {
                    RtError::new("mdl::bind::experts", format!("cannot stack the experts of `{path}`: {msg}"))
                        .help("the checkpoint's expert tensors disagree with each other or with the config")
                })?;
                self.used.extend(used);
                return Ok(t);
            }
        }
        let Some(info) = ws.info(path) else {
            return Err(RtError::new("mdl::bind::missing", format!("the checkpoint has no tensor `{path}`"))
                .label(format!("declares `{path}` {shape:?}"))
                .help(format!("{} lacks it; check the script's member names against `mllm inspect` of the checkpoint", ws.describe())));
        };
        if info.shape != shape {
            return Err(RtError::new("mdl::bind::shape", format!("tensor `{path}` has shape {:?} in the checkpoint, but the script declares {shape:?}", info.shape))
                .label(format!("declared as {shape:?}"))
                .help("the config (config.json) and the checkpoint disagree, or the script computes this shape wrongly"));
        }
        ws.load(path)
            .map_err(|msg| RtError::new("mdl::bind::load", format!("cannot load `{path}`: {msg}")))
    }

    /// Whether the checkpoint holds any tensor whose name starts with
    /// `prefix` (false without a checkpoint).
    pub(crate) fn holds_prefix(&self, prefix: &str) -> bool {
        self.source
            .is_some_and(|ws| ws.names().iter().any(|n| n.starts_with(prefix)))
    }

    /// Checkpoint tensors no declaration asked for. BERT's
    /// `embeddings.position_ids` and `token_type_ids` are not counted:
    /// buffers that transformers before 4.31 saved (a PyTorch checkpoint
    /// still has them) and transformers itself never loads.
    pub fn unused(&self) -> Vec<String> {
        match self.source {
            Some(ws) => ws
                .names()
                .into_iter()
                .filter(|n| {
                    !self.used.contains(n)
                        && !n.ends_with("embeddings.position_ids")
                        && !n.ends_with("embeddings.token_type_ids")
                })
                .collect(),
            None => vec![],
        }
    }
}
