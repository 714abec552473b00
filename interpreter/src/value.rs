//! Runtime values of the .mdl language.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use mllm_backends::Tensor;
use mllm_dsl::builtins::Builtin;
use mllm_dsl::program::Global;

use crate::cache::KvCache;

#[derive(Clone)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Tensor(Tensor),
    List(Rc<Vec<Value>>),
    Tuple(Rc<Vec<Value>>),
    Config(Rc<ConfigValue>),
    Module(Rc<Instance>),
    /// A member namespace node of an instance (`model` in `model.norm`).
    MemberNs(Rc<Instance>, usize),
    Global(Global),
    Builtin(Builtin),
    Cache(Rc<RefCell<KvCache>>),
    LayerCache(Rc<RefCell<KvCache>>, usize),
    /// One cache per row of a batched decode step (row `b` of the inputs
    /// is the next token of sequence `b`).
    BatchCache(Rc<Vec<Rc<RefCell<KvCache>>>>),
    BatchLayerCache(Rc<Vec<Rc<RefCell<KvCache>>>>, usize),
    /// Keys or values of a batch, one tensor per sequence (their lengths
    /// differ); `sdpa` attends row `b` of the queries to entry `b`.
    Ragged(Rc<Vec<Tensor>>),
}

/// A config built from config.json: field values in declaration order.
pub struct ConfigValue {
    pub config: usize,
    pub fields: Vec<Value>,
}

/// A constructed module: its constructor arguments and its members
/// (parameter tensors, submodules, lists of submodules, or `none`).
pub struct Instance {
    pub module: usize,
    pub args: Vec<Value>,
    pub members: Vec<Value>,
    /// Dotted path from the root (`model.layers.3.self_attn`), empty at the root.
    pub path: String,
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "none",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Tensor(_) => "tensor",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Config(_) => "config",
            Value::Module(_) => "module",
            Value::MemberNs(..) => "member group",
            Value::Global(Global::Module(_)) => "module type",
            Value::Global(Global::Fn(_)) => "function",
            Value::Global(Global::Config(_)) => "config type",
            Value::Global(Global::Namespace(_)) => "imported file",
            Value::Builtin(_) => "builtin",
            Value::Cache(_) => "kv cache",
            Value::LayerCache(..) => "layer kv cache",
            Value::BatchCache(_) => "batch of kv caches",
            Value::BatchLayerCache(..) => "batch of layer kv caches",
            Value::Ragged(_) => "ragged tensors",
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Value::None)
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => write!(f, "none"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Tensor(t) => write!(f, "tensor({}, {:?})", t.dtype(), t.shape()),
            Value::List(items) => f.debug_list().entries(items.iter()).finish(),
            Value::Tuple(items) => {
                let mut t = f.debug_tuple("");
                for i in items.iter() {
                    t.field(i);
                }
                t.finish()
            }
            Value::Module(m) => write!(f, "module at `{}`", m.path),
            other => write!(f, "<{}>", other.type_name()),
        }
    }
}
