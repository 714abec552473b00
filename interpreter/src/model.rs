//! A loaded model: a checked program, its config, and the root module
//! instance bound to checkpoint weights; `forward` calls the entry module's
//! `forward` with inputs passed by parameter name.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::weights::WeightSource;
use mllm_dsl::program::{Program, Ty};
use serde_json::Value as Json;

use crate::bind::{Binder, ParamRecord};
use crate::cache::KvCache;
use crate::error::{RtError, RtResult};
use crate::eval::Interp;
use crate::executor::Executor;
use crate::limits::ScriptLimits;
use crate::value::{ConfigValue, Instance, Value};

pub struct Model {
    pub program: Rc<Program>,
    pub root: Rc<Instance>,
    pub config: Rc<ConfigValue>,
    pub entry: usize,
    pub params: Vec<ParamRecord>,
    /// The bound weights by checkpoint name, as the executor prepared them.
    pub weights: Vec<(String, mllm_backends::Tensor)>,
    /// The backend whose memory and layouts the weights are in (the CPU
    /// unless the loader says otherwise): runners run steps on it.
    pub backend: mllm_backends::SharedBackend,
    /// Steps and memory each call may take (from the environment at load).
    pub limits: ScriptLimits,
}

/// What a runner hands a language model's `forward`: the one place the
/// names of its parameters are spelled.
pub struct ForwardInputs {
    /// i32 `[seq]`.
    pub input_ids: mllm_backends::Tensor,
    /// i32 `[seq]`, or `[3, seq]` (t, h, w) for multimodal rotary positions.
    pub positions: mllm_backends::Tensor,
    pub cache: Rc<RefCell<KvCache>>,
    /// A batched decode step: one cache per row of `input_ids` (then
    /// `cache` is unused). Scripts see them as one `cache` whose layers
    /// append row by row and whose keys `sdpa` attends to per row.
    pub batch: Vec<Rc<RefCell<KvCache>>>,
    /// `pixel_values` f32 `[patches, C*T*P*P]` and `image_grid_thw` i32
    /// `[images, 3]`, for a prompt with images.
    pub images: Option<(mllm_backends::Tensor, mllm_backends::Tensor)>,
    /// `pixel_values_videos` f32 `[patches, C*T*P*P]` and `video_grid_thw`
    /// i32 `[videos, 3]`, for a prompt with videos.
    pub videos: Option<(mllm_backends::Tensor, mllm_backends::Tensor)>,
    /// Other named inputs of a model's processor (DeepSeek-OCR 2's
    /// `pixel_values`, `pixel_values_local`, `num_local_patches`), passed
    /// as they are.
    pub extra: Vec<(&'static str, Value)>,
    /// Logits of the last position only.
    pub last_only: bool,
}

impl ForwardInputs {
    /// Text ids at positions `start..` (1-D positions).
    pub fn text(
        ids: &[i32],
        start: usize,
        cache: Rc<RefCell<KvCache>>,
        last_only: bool,
    ) -> Result<ForwardInputs, mllm_backends::BackendError> {
        let n = ids.len();
        let pos = (start..start + n).map(|p| p as i32).collect();
        Ok(ForwardInputs {
            input_ids: mllm_backends::Tensor::from_i32(ids.to_vec(), vec![n])?,
            positions: mllm_backends::Tensor::from_i32(pos, vec![n])?,
            cache,
            batch: vec![],
            images: None,
            videos: None,
            extra: vec![],
            last_only,
        })
    }

    /// One new token for each of several sequences: `ids[b]` at position
    /// `positions[b]` of the sequence whose cache is `caches[b]`. Logits
    /// come back for every row.
    pub fn batch(
        ids: &[i32],
        positions: &[i32],
        caches: Vec<Rc<RefCell<KvCache>>>,
    ) -> Result<ForwardInputs, mllm_backends::BackendError> {
        let n = ids.len();
        if positions.len() != n || caches.len() != n || n == 0 {
            return Err(mllm_backends::BackendError::Invalid {
                op: "batch",
                msg: format!(
                    "a batch needs one position and one cache per id: {n} ids, {} positions, {} caches",
                    positions.len(),
                    caches.len()
                ),
            });
        }
        Ok(ForwardInputs {
            input_ids: mllm_backends::Tensor::from_i32(ids.to_vec(), vec![n])?,
            positions: mllm_backends::Tensor::from_i32(positions.to_vec(), vec![n])?,
            cache: caches[0].clone(),
            batch: caches,
            images: None,
            videos: None,
            extra: vec![],
            last_only: false,
        })
    }

    fn into_args(self) -> Vec<(&'static str, Value)> {
        let mut args = vec![
            ("input_ids", Value::Tensor(self.input_ids)),
            ("positions", Value::Tensor(self.positions)),
            (
                "cache",
                if self.batch.is_empty() {
                    Value::Cache(self.cache)
                } else {
                    Value::BatchCache(Rc::new(self.batch))
                },
            ),
        ];
        if let Some((pixels, grids)) = self.images {
            args.push(("pixel_values", Value::Tensor(pixels)));
            args.push(("image_grid_thw", Value::Tensor(grids)));
        }
        if let Some((pixels, grids)) = self.videos {
            args.push(("pixel_values_videos", Value::Tensor(pixels)));
            args.push(("video_grid_thw", Value::Tensor(grids)));
        }
        args.extend(self.extra);
        args.push(("last_only", Value::Bool(self.last_only)));
        args
    }
}

/// Picks the module to run: the one named by config.json's
/// `architectures[0]` when the script declares it, else the script's last module.
pub fn pick_entry(prog: &Program, config: &Json) -> RtResult<usize> {
    let arch = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str());
    if let Some(i) = arch.and_then(|a| prog.module_by_name(a)) {
        return Ok(i);
    }
    prog.main_modules().last().copied().ok_or_else(|| {
        RtError::new(
            "mdl::load::no_module",
            format!("{} declares no module to run", prog.sources.name(prog.main)),
        )
    })
}

impl Model {
    /// Builds the config from `config_json`, constructs the entry module and
    /// binds its parameters to `weights` (all problems reported at once).
    pub fn load(
        program: Rc<Program>,
        config_json: &Json,
        config_origin: &str,
        weights: Option<&dyn WeightSource>,
        exec: &mut dyn Executor,
    ) -> Result<Model, Vec<RtError>> {
        let prog: &Program = &program;
        let entry = pick_entry(prog, config_json).map_err(|e| vec![e])?;
        let m = &prog.modules[entry];
        let Some(first) = m.params.first() else {
            return Err(vec![RtError::new("mdl::load::entry", format!("module `{}` takes no config", m.name)).at(m.source, m.span).help("the module to run takes its config as the first parameter, e.g. `module Qwen3ForCausalLM(c: Qwen3)`")]);
        };
        let Some(Ty::Config(ci)) = first.ty.clone() else {
            return Err(vec![RtError::new(
                "mdl::load::entry",
                format!(
                    "the first parameter of `{}` must be typed with a config",
                    m.name
                ),
            )
            .at(m.source, first.span)]);
        };
        if let Some(p) = m.params.iter().skip(1).find(|p| p.default.is_none()) {
            return Err(vec![RtError::new(
                "mdl::load::entry",
                format!(
                    "module `{}` has a second required parameter `{}`",
                    m.name, p.name
                ),
            )
            .at(m.source, p.span)
            .help("the module to run takes only its config")]);
        }
        let limits = ScriptLimits::from_env().map_err(|e| {
            vec![RtError::new("mdl::load::limits", e)
                .help("unset it, or give a positive number such as 200000000 or 16G")]
        })?;
        let mut it = Interp::with_limits(prog, exec, limits);
        let config =
            crate::config::build(&mut it, ci, config_json, config_origin).map_err(|e| vec![e])?;
        it.binder = Some(Binder::new(weights));
        it.ctor_path = Some(String::new());
        let root = it.construct(entry, vec![Value::Config(config.clone())], vec![]);
        let binder = it.binder.take().expect("binder set above");
        let mut errors = binder.errors.clone();
        let root = match root {
            Ok(Value::Module(r)) => Some(r),
            Ok(_) => None,
            Err(e) => {
                errors.insert(0, e);
                None
            }
        };
        if errors.is_empty() {
            let unused = binder.unused();
            if !unused.is_empty() {
                let shown: Vec<&str> = unused.iter().take(8).map(|s| s.as_str()).collect();
                let more = if unused.len() > 8 {
                    format!(" and {} more", unused.len() - 8)
                } else {
                    String::new()
                };
                errors.push(
                    RtError::new("mdl::bind::unused", format!("{} checkpoint tensor(s) are not declared by the script: {}{more}", unused.len(), shown.join(", ")))
                        .at(m.source, m.span)
                        .label("the module run")
                        .help("declare them (a `param` or submodule with that path), or check that the script matches this architecture"),
                );
            }
        }
        match (root, errors.is_empty()) {
            (Some(root), true) => Ok(Model {
                program: program.clone(),
                // An alias entry (`module X(c) = nn.CausalLM(...)`) runs the
                // functions of the module it built.
                entry: root.module,
                root,
                config,
                params: binder.params,
                weights: binder.bound,
                backend: std::sync::Arc::new(mllm_backends::CpuBackend),
                limits,
            }),
            (_, _) => Err(errors),
        }
    }

    /// Runs the entry `forward` of a language model.
    pub fn run(&self, exec: &mut dyn Executor, inputs: ForwardInputs) -> RtResult<Value> {
        self.forward(exec, inputs.into_args())
    }

    /// Names of the entry `forward`'s parameters.
    pub fn inputs(&self) -> Vec<String> {
        let m = &self.program.modules[self.entry];
        m.fn_index("forward").map_or(vec![], |fi| {
            m.fns[fi].params.iter().map(|p| p.name.clone()).collect()
        })
    }

    /// Runs the entry module's `forward`; `inputs` are matched to its
    /// parameters by name, and unknown names are errors.
    pub fn forward(&self, exec: &mut dyn Executor, inputs: Vec<(&str, Value)>) -> RtResult<Value> {
        self.call("forward", exec, inputs)
    }

    /// Runs any function of the entry module by name.
    pub fn call(
        &self,
        func: &str,
        exec: &mut dyn Executor,
        inputs: Vec<(&str, Value)>,
    ) -> RtResult<Value> {
        let prog: &Program = &self.program;
        let m = &prog.modules[self.entry];
        let Some(fi) = m.fn_index(func) else {
            return Err(RtError::new(
                "mdl::run::entry",
                format!("module `{}` has no `{func}`", m.name),
            )
            .at(m.source, m.span));
        };
        let f = &m.fns[fi];
        let mut kwargs = vec![];
        for (name, v) in inputs {
            // Tensors a runner hands in are the executor's named inputs.
            let v = match v {
                Value::Tensor(t) => Value::Tensor(exec.input(name, t)?),
                other => other,
            };
            match f.params.iter().find(|p| p.name == name) {
                Some(p) => kwargs.push((p.sym, v)),
                None => {
                    // Optional host inputs (`last_only`) a script may not take.
                    if name == "last_only" {
                        continue;
                    }
                    return Err(RtError::new(
                        "mdl::run::entry",
                        format!("`{}.{func}` has no parameter `{name}`", m.name),
                    )
                    .at(f.source, f.span));
                }
            }
        }
        if let Some(p) = f
            .params
            .iter()
            .find(|p| p.default.is_none() && !kwargs.iter().any(|(s, _)| *s == p.sym))
        {
            return Err(RtError::new(
                "mdl::run::entry",
                format!(
                    "`{}.{func}` takes `{}`, which this runner does not provide",
                    m.name, p.name
                ),
            )
            .at(f.source, p.span));
        }
        let mut it = Interp::with_limits(prog, exec, self.limits);
        it.call_function(f, Some(self.root.clone()), vec![], kwargs)
    }
}
