//! Reads an export's `io.json` (written by `mllm_graph::onnx`) into what the
//! host loop needs: the graph's ports with dtypes and shapes, tokens per
//! step, the cache's rows and the KV layers' input/output names. Only the
//! cached kind of graph (KV cache as I/O) can be driven; a `--no-cache`
//! export is refused by name.

use std::path::Path;

use mllm_backends::npu::{PortSpec, PortType};
use serde_json::Value as Json;

/// One KV layer's names in the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvNames {
    pub layer: usize,
    pub past_key: String,
    pub past_value: String,
    pub present_key: String,
    pub present_value: String,
}

/// A pair of rotary tables the graph takes as inputs (`--target qnn`):
/// the host feeds rows `positions` of tables written beside io.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RopeInput {
    pub cos_input: String,
    pub sin_input: String,
    pub cos_file: String,
    pub sin_file: String,
    /// Rows of each table (one per position) and values per row.
    pub rows: usize,
    pub width: usize,
}

/// What io.json says about one exported graph.
#[derive(Clone, Debug)]
pub struct GraphIo {
    /// Tokens per step.
    pub seq: usize,
    /// Rows of each past buffer.
    pub context: usize,
    pub inputs: Vec<PortSpec>,
    pub outputs: Vec<PortSpec>,
    pub layers: Vec<KvNames>,
    /// Rotary tables fed as inputs (none for the generic export).
    pub rope: Vec<RopeInput>,
    /// Who the export was shaped for (`generic`, `qnn`, `ascend`).
    pub target: String,
    /// Vocabulary size (the last dim of `logits`).
    pub vocab: usize,
}

fn bad(path: &str, msg: impl std::fmt::Display) -> String {
    format!("{path}: {msg}")
}

fn ports(doc: &Json, key: &str, path: &str) -> Result<Vec<PortSpec>, String> {
    let Some(list) = doc.get(key).and_then(Json::as_array) else {
        return Err(bad(path, format!("no `{key}` list")));
    };
    list.iter()
        .map(|p| {
            let name = p.get("name").and_then(Json::as_str);
            let dtype = p.get("dtype").and_then(Json::as_str);
            let shape = p.get("shape").and_then(Json::as_array).and_then(|s| {
                s.iter()
                    .map(|d| d.as_u64().map(|d| d as usize))
                    .collect::<Option<Vec<_>>>()
            });
            let (Some(name), Some(dtype), Some(shape)) = (name, dtype, shape) else {
                return Err(bad(
                    path,
                    format!("an entry of `{key}` lacks name, dtype or shape: {p}"),
                ));
            };
            let Some(dtype) = PortType::parse(dtype) else {
                return Err(bad(
                    path,
                    format!("`{name}` is {dtype}; the host loop feeds float32 and int64"),
                ));
            };
            Ok(PortSpec {
                name: name.to_string(),
                dtype,
                shape,
            })
        })
        .collect()
}

impl GraphIo {
    /// Parses io.json text; `path` names it in messages.
    pub fn parse(text: &str, path: &str) -> Result<GraphIo, String> {
        let doc: Json =
            serde_json::from_str(text).map_err(|e| bad(path, format!("not JSON: {e}")))?;
        let seq = doc.get("seq").and_then(Json::as_u64).map(|s| s as usize);
        let Some(seq) = seq.filter(|&s| s > 0) else {
            return Err(bad(path, "no `seq`: not the export of a model's step"));
        };
        let (Some(context), Some(kv)) = (
            doc.get("context").and_then(Json::as_u64),
            doc.get("kv_cache"),
        ) else {
            return Err(bad(
                path,
                "a graph without the KV cache as I/O (`--no-cache`); the host loop drives the cached graphs (export without --no-cache)",
            ));
        };
        let inputs = ports(&doc, "inputs", path)?;
        let outputs = ports(&doc, "outputs", path)?;
        let mut layers = vec![];
        for l in kv
            .get("layers")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| l.get(k).and_then(Json::as_str).map(str::to_string);
            let layer = l.get("layer").and_then(Json::as_u64);
            let (Some(layer), Some(pk), Some(pv), Some(nk), Some(nv)) = (
                layer,
                s("past_key"),
                s("past_value"),
                s("present_key"),
                s("present_value"),
            ) else {
                return Err(bad(path, format!("a KV layer entry lacks a name: {l}")));
            };
            layers.push(KvNames {
                layer: layer as usize,
                past_key: pk,
                past_value: pv,
                present_key: nk,
                present_value: nv,
            });
        }
        let mut rope = vec![];
        for t in doc
            .get("rope")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| t.get(k).and_then(Json::as_str).map(str::to_string);
            let u = |k: &str| t.get(k).and_then(Json::as_u64).map(|v| v as usize);
            let (Some(ci), Some(si), Some(cf), Some(sf), Some(rows), Some(width)) = (
                s("cos_input"),
                s("sin_input"),
                s("cos_file"),
                s("sin_file"),
                u("rows"),
                u("width"),
            ) else {
                return Err(bad(path, format!("a `rope` entry lacks a field: {t}")));
            };
            if t.get("dtype")
                .and_then(Json::as_str)
                .is_some_and(|d| d != "float32")
            {
                return Err(bad(path, format!("rope table `{cf}` is not float32")));
            }
            rope.push(RopeInput {
                cos_input: ci,
                sin_input: si,
                cos_file: cf,
                sin_file: sf,
                rows,
                width,
            });
        }
        let io = GraphIo {
            seq,
            context: context as usize,
            inputs,
            outputs,
            layers,
            rope,
            target: doc
                .get("target")
                .and_then(Json::as_str)
                .unwrap_or("generic")
                .to_string(),
            vocab: 0,
        };
        io.checked(path)
    }

    pub fn read(path: &Path) -> Result<GraphIo, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        GraphIo::parse(&text, &path.display().to_string())
    }

    pub fn input(&self, name: &str) -> Option<&PortSpec> {
        self.inputs.iter().find(|p| p.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&PortSpec> {
        self.outputs.iter().find(|p| p.name == name)
    }

    /// Checks the ports the host loop feeds and reads against `seq` and
    /// `context`, and fills `vocab`.
    fn checked(mut self, path: &str) -> Result<GraphIo, String> {
        let (n, c) = (self.seq, self.context);
        let want = |ports: &[PortSpec], name: &str, dtype: PortType, shape: Option<&[usize]>| {
            let Some(p) = ports.iter().find(|p| p.name == name) else {
                return Err(bad(path, format!("the graph has no `{name}`")));
            };
            if p.dtype != dtype || shape.is_some_and(|s| s != p.shape.as_slice()) {
                return Err(bad(
                    path,
                    format!(
                        "`{name}` is {} {:?}; the host loop expects {} {}",
                        p.dtype.name(),
                        p.shape,
                        dtype.name(),
                        shape.map_or("[..]".to_string(), |s| format!("{s:?}"))
                    ),
                ));
            }
            Ok(p.shape.clone())
        };
        want(&self.inputs, "input_ids", PortType::I64, Some(&[n]))?;
        // The rotary tables may replace positions (`--target qnn`).
        if self.input("positions").is_some() {
            want(&self.inputs, "positions", PortType::I64, Some(&[n]))?;
        }
        for t in &self.rope {
            for name in [&t.cos_input, &t.sin_input] {
                want(&self.inputs, name, PortType::F32, Some(&[n, t.width]))?;
            }
            if t.rows < c {
                return Err(bad(
                    path,
                    format!(
                        "rope table `{}` has {} rows; the cache has {c}",
                        t.cos_file, t.rows
                    ),
                ));
            }
        }
        want(&self.inputs, "past_len", PortType::I64, Some(&[1]))?;
        let logits = want(&self.outputs, "logits", PortType::F32, None)?;
        if logits.len() != 2 || logits[0] != n {
            return Err(bad(
                path,
                format!("`logits` is {logits:?}, not [{n}, vocab]"),
            ));
        }
        self.vocab = logits[1];
        if self.layers.is_empty() {
            return Err(bad(path, "the graph lists no KV layers"));
        }
        for l in &self.layers {
            for (past, present) in [
                (&l.past_key, &l.present_key),
                (&l.past_value, &l.present_value),
            ] {
                let ps = want(&self.inputs, past, PortType::F32, None)?;
                if ps.len() != 3 || ps[0] != c {
                    return Err(bad(
                        path,
                        format!("`{past}` is {ps:?}, not [{c}, kv_heads, head_dim]"),
                    ));
                }
                let row = [n, ps[1], ps[2]];
                want(&self.outputs, present, PortType::F32, Some(&row))?;
            }
        }
        // Every other input would be left unfed.
        if let Some(p) = self.inputs.iter().find(|p| {
            !["input_ids", "positions", "past_len"].contains(&p.name.as_str())
                && !self
                    .layers
                    .iter()
                    .any(|l| p.name == l.past_key || p.name == l.past_value)
                && !self
                    .rope
                    .iter()
                    .any(|t| p.name == t.cos_input || p.name == t.sin_input)
        }) {
            return Err(bad(
                path,
                format!("input `{}` is not one the host loop feeds (token ids, positions, past_len, the KV cache, rotary tables listed under `rope`)", p.name),
            ));
        }
        Ok(self)
    }
}
