//! What a checkpoint file holds, read without loading a model: `.mllm`,
//! GGUF, safetensors (a file or a Hugging Face directory) and PyTorch zip
//! checkpoints, each read into one `Report` (a metadata summary, the
//! metadata as JSON, and every tensor's name, dtype, shape and size), so
//! `mllm inspect`'s text and JSON always agree.

use std::io::Read;
use std::path::Path;

use mllm_backends::weights::WeightSource;
use mllm_converter::gguf::{GgmlType, GgufFile, MetaValue};
use mllm_converter::mllm_format::{self, MllmFile};
use mllm_converter::pytorch::PytorchCheckpoint;
use mllm_converter::SafetensorsDir;
use serde_json::{json, Map, Value};

use crate::{Error, Result};

pub struct Row {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: u64,
    /// E.g. "asked q4_k" after a recipe fallback.
    pub note: Option<String>,
}

pub struct Report {
    pub format: String,
    /// `key: value` lines of the metadata summary.
    pub summary: Vec<(String, String)>,
    /// The metadata as JSON (large texts replaced by their size).
    pub meta: Value,
    pub rows: Vec<Row>,
}

/// `1.5 MiB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Reads the file or directory at `path` into a `Report`.
pub fn report(path: &str) -> Result<Report> {
    let p = Path::new(path);
    let report = if p.is_dir() {
        if p.join("model.safetensors").is_file() || p.join("model.safetensors.index.json").is_file()
        {
            safetensors_report(p)?
        } else if p.join("pytorch_model.bin").is_file()
            || p.join("pytorch_model.bin.index.json").is_file()
        {
            pytorch_report(p)?
        } else {
            return Err(Error::invalid(format!(
                "{path} has no model.safetensors, safetensors index or pytorch_model.bin"
            )));
        }
    } else if p.is_file() {
        let mut magic = [0u8; 8];
        let n = std::fs::File::open(p)
            .and_then(|mut f| f.read(&mut magic))
            .map_err(|e| Error::invalid(format!("{path}: {e}")))?;
        let magic = &magic[..n];
        if magic == mllm_format::layout::MAGIC {
            mllm_report(p)?
        } else if magic.starts_with(b"GGUF") {
            gguf_report(p)?
        } else if magic.starts_with(b"PK\x03\x04") {
            pytorch_report(p)?
        } else if p.extension().is_some_and(|e| e == "safetensors") {
            safetensors_report(p)?
        } else {
            return Err(Error::invalid(format!(
                "{path} is not a .mllm, GGUF, safetensors or PyTorch zip file"
            )));
        }
    } else {
        return Err(Error::not_found(format!("{path} does not exist")));
    };
    Ok(report)
}

fn config_summary(c: &Value) -> String {
    let mut parts = vec![];
    let model_type = c.get("model_type").and_then(Value::as_str);
    let arch = c
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str);
    match (model_type, arch) {
        (Some(t), Some(a)) => parts.push(format!("{t} ({a})")),
        (Some(x), None) | (None, Some(x)) => parts.push(x.to_string()),
        (None, None) => {}
    }
    for (key, label) in [
        ("num_hidden_layers", "layers"),
        ("hidden_size", "hidden"),
        ("num_attention_heads", "heads"),
        ("vocab_size", "vocab"),
    ] {
        if let Some(v) = c.get(key).and_then(Value::as_u64) {
            parts.push(format!("{label} {v}"));
        }
    }
    if parts.is_empty() {
        format!("{} keys", c.as_object().map_or(0, Map::len))
    } else {
        parts.join(", ")
    }
}

fn read_config(dir: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).ok()?).ok()
}

fn mllm_report(p: &Path) -> Result<Report> {
    let f = MllmFile::open(p)?;
    let (major, minor) = f.version();
    let mut summary = vec![
        ("alignment".to_string(), format!("{} bytes", f.alignment())),
        ("config".to_string(), config_summary(f.config())),
    ];
    let r = f.recipe();
    let rules: Vec<String> = r
        .rules
        .iter()
        .map(|x| format!("{} -> {}", x.pattern, x.ty))
        .collect();
    summary.push((
        "recipe".into(),
        format!("{} ({}): {}", r.ty, r.origin, rules.join("; ")),
    ));
    let src = f.source();
    let files: Vec<String> = src["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    format!(
                        "{} {}",
                        x["name"].as_str().unwrap_or("?"),
                        human_bytes(x["bytes"].as_u64().unwrap_or(0))
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    summary.push((
        "source".into(),
        format!(
            "{} {} [{}], header crc32 {}",
            src["format"].as_str().unwrap_or("?"),
            src["path"].as_str().unwrap_or("?"),
            files.join(", "),
            src["header_crc32"].as_str().unwrap_or("?")
        ),
    ));
    let present = |v: Option<usize>| v.map_or("none".to_string(), |n| format!("{n} bytes"));
    summary.push((
        "tokenizer.json".into(),
        present(f.tokenizer_json().map(str::len)),
    ));
    summary.push((
        "chat template".into(),
        present(f.chat_template().map(str::len)),
    ));
    summary.push((
        "generation config".into(),
        f.generation_config()
            .map_or("none".into(), |g| g.to_string()),
    ));
    let mut meta = f.metadata().clone();
    if let Some(t) = f.tokenizer_json() {
        meta.insert("tokenizer_json".into(), json!({"bytes": t.len()}));
    }
    let rows = f
        .tensors()
        .iter()
        .map(|t| Row {
            name: t.name.clone(),
            dtype: t.ty.name().to_string(),
            shape: t.shape.clone(),
            bytes: t.byte_len as u64,
            note: (t.requested != t.ty).then(|| format!("asked {}", t.requested)),
        })
        .collect();
    Ok(Report {
        format: format!(".mllm v{major}.{minor}"),
        summary,
        meta: Value::Object(meta),
        rows,
    })
}

/// A GGUF value as one line: strings quoted and cut, arrays shortened.
fn meta_text(v: &MetaValue) -> String {
    match v {
        MetaValue::Str(s) => {
            let q = format!("{s:?}");
            if q.chars().count() > 100 {
                format!(
                    "{}...\" ({} bytes)",
                    q.chars().take(96).collect::<String>(),
                    s.len()
                )
            } else {
                q
            }
        }
        MetaValue::Array(a) => {
            let elem = a.first().map_or("value", MetaValue::type_name);
            let head: Vec<String> = a.iter().take(6).map(meta_text).collect();
            let more = if a.len() > 6 { ", ..." } else { "" };
            format!("[{} x {elem}: {}{more}]", a.len(), head.join(", "))
        }
        other => meta_json(other).to_string(),
    }
}

/// A GGUF value as JSON; arrays over 16 items become `{len, head}`.
fn meta_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Str(s) => json!(s),
        MetaValue::Bool(b) => json!(b),
        // The shortest decimal that reads back as this f32 (1e-5, not 9.99e-6).
        MetaValue::F32(f) => json!(format!("{f}").parse::<f64>().unwrap_or(f64::from(*f))),
        MetaValue::F64(f) => json!(f),
        MetaValue::Array(a) if a.len() > 16 => json!({
            "type": format!("array of {}", a.first().map_or("value", MetaValue::type_name)),
            "len": a.len(),
            "head": a.iter().take(8).map(meta_json).collect::<Vec<_>>(),
        }),
        MetaValue::Array(a) => Value::Array(a.iter().map(meta_json).collect()),
        other => other
            .as_i64()
            .map_or_else(|| json!(other.as_u64()), |i| json!(i)),
    }
}

fn gguf_report(p: &Path) -> Result<Report> {
    let g = GgufFile::open(p)?;
    let mut summary = vec![
        ("alignment".to_string(), format!("{} bytes", g.alignment())),
        ("data offset".to_string(), g.data_start().to_string()),
    ];
    let mut meta = Map::new();
    for k in g.meta_keys() {
        let v = g.meta(k).expect("listed key");
        summary.push((k.to_string(), meta_text(v)));
        meta.insert(k.to_string(), meta_json(v));
    }
    let rows = g
        .tensor_infos()
        .iter()
        .map(|t| Row {
            name: t.name.clone(),
            dtype: t.ggml_type.name.to_string(),
            shape: t.shape.clone(),
            bytes: t.len as u64,
            note: gguf_load_note(t.ggml_type),
        })
        .collect();
    Ok(Report {
        format: format!("GGUF v{}", g.version()),
        summary,
        meta: Value::Object(meta),
        rows,
    })
}

/// How mllm loads a tensor of type `g` where that is not as the type
/// itself: the ggml types without kernels of their own are repacked
/// exactly into another type or widened to f32 (`quant::import`).
fn gguf_load_note(g: GgmlType) -> Option<String> {
    if !g.is_loadable() {
        return Some("mllm cannot load this type".into());
    }
    let i = g.import()?;
    Some(match i.runs_as() {
        Some(q) => format!("loads as {q} (exact repack)"),
        None => "loads as f32 (exact)".into(),
    })
}

fn weight_rows(w: &dyn WeightSource, note: impl Fn(&str) -> Option<String>) -> Vec<Row> {
    w.names()
        .into_iter()
        .filter_map(|name| {
            let i = w.info(&name)?;
            let bytes = i.dtype.storage_bytes(&i.shape).unwrap_or(0) as u64;
            Some(Row {
                note: note(&name),
                dtype: i.dtype.name().to_string(),
                shape: i.shape,
                bytes,
                name,
            })
        })
        .collect()
}

fn dir_meta(dir: &Path) -> (Vec<(String, String)>, Value) {
    match read_config(dir) {
        Some(c) => (
            vec![("config".into(), config_summary(&c))],
            json!({ "config": c }),
        ),
        None => (
            vec![("config".into(), "none beside the weights".into())],
            json!({}),
        ),
    }
}

fn safetensors_report(p: &Path) -> Result<Report> {
    let st = SafetensorsDir::open(p)?;
    let (summary, meta) = dir_meta(st.root());
    Ok(Report {
        format: "safetensors".into(),
        summary,
        meta,
        rows: weight_rows(&st, |_| None),
    })
}

fn pytorch_report(p: &Path) -> Result<Report> {
    let ck = PytorchCheckpoint::open(p)?;
    let (summary, meta) = dir_meta(ck.root());
    let rows = weight_rows(&ck, |name| {
        let e = ck.saved_elem(name)?;
        let native = matches!(
            e,
            mllm_converter::pytorch::Elem::F32
                | mllm_converter::pytorch::Elem::F16
                | mllm_converter::pytorch::Elem::BF16
                | mllm_converter::pytorch::Elem::I32
        );
        (!native).then(|| format!("saved as {e:?}"))
    });
    Ok(Report {
        format: "PyTorch zip checkpoint".into(),
        summary,
        meta,
        rows,
    })
}
