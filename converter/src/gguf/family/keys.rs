//! `Keys`: the config.json object a family's `config` function adds to
//! (the common Llama-style keys already in it), with readers of the file's
//! `{arch}.*` metadata that say which key was wrong and how. `Meta` is
//! what they read: a GGUF file, or a table in the unit tests.

use serde_json::{Map, Value};

use crate::error::{ConvertError, Result};
use crate::gguf::config::number;
use crate::gguf::MetaValue;

/// The metadata and tensors `hf_config` reads: a GGUF file (a table in
/// the unit tests).
pub(crate) trait Meta {
    /// The value of `{arch}.{key}`.
    fn arch_key(&self, key: &str) -> Option<&MetaValue>;
    /// Whether the file holds a tensor of this GGUF name.
    fn has_tensor(&self, name: &str) -> bool;
    /// The file, for messages.
    fn label(&self) -> String;
    /// The shape of a tensor of this GGUF name (PyTorch order).
    fn tensor_shape(&self, name: &str) -> Option<Vec<usize>>;
}

/// A config being built for a file of llama.cpp architecture `arch`.
pub(crate) struct Keys<'a> {
    pub(crate) m: &'a dyn Meta,
    pub(crate) c: &'a mut Map<String, Value>,
    pub(crate) arch: &'a str,
}

impl Keys<'_> {
    pub(crate) fn corrupt(&self, key: &str, what: String) -> ConvertError {
        ConvertError::Corrupt(format!("{}: {}.{key} {what}", self.m.label(), self.arch))
    }

    pub(crate) fn unsupported(&self, key: &str, what: String) -> ConvertError {
        ConvertError::Unsupported(format!("{}: {}.{key} {what}", self.m.label(), self.arch))
    }

    /// A non-negative integer key, if present.
    pub(crate) fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.m.arch_key(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.corrupt(key, format!("should be a whole number, found {v:?}"))),
        }
    }

    pub(crate) fn need_u64(&self, key: &str) -> Result<u64> {
        self.u64(key)?
            .ok_or_else(|| self.corrupt(key, "is missing".into()))
    }

    /// A number key as JSON (f32 values as their shortest decimal), if present.
    pub(crate) fn number(&self, key: &str) -> Result<Option<Value>> {
        match self.m.arch_key(key) {
            None => Ok(None),
            Some(v) => number(v)
                .map(Some)
                .ok_or_else(|| self.corrupt(key, format!("should be a number, found {v:?}"))),
        }
    }

    /// `head_dim`, set to hidden / heads (llama.cpp's default) where the
    /// file gives none.
    pub(crate) fn head_dim(&mut self) -> u64 {
        if !self.c.contains_key("head_dim") {
            let heads = self.config_u64("num_attention_heads").max(1);
            let hidden = self.config_u64("hidden_size");
            self.c
                .insert("head_dim".into(), serde_json::json!(hidden / heads));
        }
        self.config_u64("head_dim")
    }

    /// An integer the common keys already put in the config.
    pub(crate) fn config_u64(&self, hf: &str) -> u64 {
        self.c.get(hf).and_then(Value::as_u64).unwrap_or(0)
    }

    /// The expert count, experts per token and expert width every MoE
    /// family stores alike; the width falls back to llama.cpp's
    /// `n_ff / n_expert_used`.
    pub(crate) fn experts(&self) -> Result<(u64, u64, u64)> {
        let experts = self.need_u64("expert_count")?;
        let used = self.need_u64("expert_used_count")?;
        if experts == 0 || used == 0 || used > experts {
            return Err(self.corrupt(
                "expert_used_count",
                format!("is {used}, which does not fit {experts} experts"),
            ));
        }
        let key = "expert_feed_forward_length";
        let ff = match self.m.arch_key(key) {
            // llama.cpp's fallback.
            None => self.config_u64("intermediate_size") / used,
            Some(MetaValue::Array(a)) => {
                let v: Vec<u64> = a.iter().filter_map(MetaValue::as_u64).collect();
                match v.first() {
                    Some(&f) if v.len() == a.len() && v.iter().all(|&x| x == f) => f,
                    _ => {
                        return Err(self.unsupported(
                            key,
                            format!(
                            "gives layers different expert sizes ({a:?}); the {} script has one",
                            self.arch
                        ),
                        ))
                    }
                }
            }
            Some(_) => self.need_u64(key)?,
        };
        if ff == 0 {
            return Err(self.corrupt(key, "is 0".into()));
        }
        Ok((experts, used, ff))
    }

    /// The factor llama.cpp multiplies the routing weights by:
    /// `expert_weights_scale`, where 0 (like a missing key) means none.
    pub(crate) fn weights_scale(&self) -> Result<f64> {
        let key = "expert_weights_scale";
        let s = self.number(key)?.and_then(|v| v.as_f64()).unwrap_or(1.0);
        Ok(if s == 0.0 { 1.0 } else { s })
    }

    /// Qwen's routers do not scale their weights: a file that does is refused.
    pub(crate) fn unscaled(&self) -> Result<()> {
        let s = self.weights_scale()?;
        if s != 1.0 {
            return Err(self.unsupported(
                "expert_weights_scale",
                format!("is {s}; Qwen's router weights are not scaled"),
            ));
        }
        Ok(())
    }
}
