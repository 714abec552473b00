//! `MllmFile`: a `.mllm` file opened for use. `open` maps the file and
//! validates the header, metadata and tensor table completely (FORMAT.md,
//! "Reading") without touching tensor data, so a bad file fails at once
//! with a message and a good one costs only its header to open. Tensors are
//! then zero-copy views of the mapping; `verify` checks their CRCs on demand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, Tensor};
use serde_json::{Map, Value};

use super::checksums::Checksums;
use super::layout::{self, Header, HEADER_LEN, MAX_ALIGNMENT, MAX_SECTION, MIN_ALIGNMENT};
use super::recipe::Recipe;
use super::types::StoredType;
use crate::error::{ConvertError, Result};
use crate::file_bytes::FileBytes;

/// One tensor of the table, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorEntry {
    pub name: String,
    /// How the data is stored.
    pub ty: StoredType,
    /// What the recipe asked for (differs after a fallback).
    pub requested: StoredType,
    pub shape: Vec<usize>,
    /// Absolute byte offset in the file.
    pub offset: usize,
    pub byte_len: usize,
    pub crc32: u32,
}

impl TensorEntry {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

pub struct MllmFile {
    path: PathBuf,
    storage: Arc<FileBytes>,
    header: Header,
    meta: Map<String, Value>,
    recipe: Recipe,
    tensors: Vec<TensorEntry>,
    index: BTreeMap<String, usize>,
    /// Whether `load` hands out quantized 2-D weights as blocks (the default)
    /// or widened to f32 (see `set_dequantize`).
    keep_quantized: bool,
}

impl std::fmt::Debug for MllmFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MllmFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl MllmFile {
    pub fn open(path: &Path) -> Result<MllmFile> {
        Self::parse(path, FileBytes::map(path)?)
    }

    /// Parses a file image held in memory; `label` names it in messages.
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<MllmFile> {
        Self::parse(Path::new(label), FileBytes::Owned(bytes))
    }

    fn parse(path: &Path, storage: FileBytes) -> Result<MllmFile> {
        let corrupt = |m: String| {
            ConvertError::Corrupt(format!("{}: not a valid .mllm file: {m}", path.display()))
        };
        let b = storage.bytes();
        let header = Header::decode(b).map_err(|m| {
            if m.contains("not supported") {
                ConvertError::Unsupported(format!("{}: {m}", path.display()))
            } else {
                corrupt(m)
            }
        })?;
        let eager_end = check_layout(&header, b.len() as u64).map_err(corrupt)?;
        let eager = &b[..eager_end];
        let crc = layout::header_crc(eager);
        if crc != header.header_crc32 {
            return Err(corrupt(format!(
                "the header checksum is {crc:08x}, the file says {:08x}: the metadata or tensor table is damaged",
                header.header_crc32
            )));
        }
        let meta_end = HEADER_LEN + header.meta_len as usize;
        let meta = parse_metadata(&b[HEADER_LEN..meta_end]).map_err(corrupt)?;
        let recipe = Recipe::from_json(&meta["recipe"])
            .map_err(|m| corrupt(format!("metadata \"recipe\": {m}")))?;
        let raw =
            layout::decode_table(&b[meta_end..eager_end], header.tensor_count).map_err(corrupt)?;
        let tensors = check_entries(&header, raw).map_err(corrupt)?;
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(MllmFile {
            path: path.to_path_buf(),
            storage: Arc::new(storage),
            header,
            meta,
            recipe,
            tensors,
            index,
            keep_quantized: true,
        })
    }

    /// With `true`, quantized weights are widened to f32 on load, so every
    /// matmul runs in f32 on the exact dequantized values (what transformers
    /// computes when it loads a GGUF); slower, and it needs 32 bits per weight
    /// of memory. The default keeps them as blocks for the quantized kernels,
    /// which round activations to 8 bits per matmul as llama.cpp does.
    pub fn set_dequantize(&mut self, dequantize: bool) {
        self.keep_quantized = !dequantize;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// (major, minor) format version.
    pub fn version(&self) -> (u16, u16) {
        (self.header.major, self.header.minor)
    }

    pub fn alignment(&self) -> usize {
        self.header.alignment as usize
    }

    /// The whole metadata object.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.meta
    }

    /// The model's config.json.
    pub fn config(&self) -> &Value {
        &self.meta["config"]
    }

    pub fn generation_config(&self) -> Option<&Value> {
        self.meta.get("generation_config")
    }

    /// The text of tokenizer.json.
    pub fn tokenizer_json(&self) -> Option<&str> {
        self.meta.get("tokenizer_json").and_then(Value::as_str)
    }

    pub fn tokenizer_config(&self) -> Option<&Value> {
        self.meta.get("tokenizer_config")
    }

    /// The image processor settings of a vision model.
    pub fn preprocessor_config(&self) -> Option<&Value> {
        self.meta.get("preprocessor_config")
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.meta.get("chat_template").and_then(Value::as_str)
    }

    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// What the file was converted from (FORMAT.md, `source`).
    pub fn source(&self) -> &Value {
        &self.meta["source"]
    }

    /// The tensors in table order.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The stored bytes of a tensor of this file (in bounds: checked on open).
    pub fn tensor_bytes(&self, t: &TensorEntry) -> &[u8] {
        self.storage
            .bytes()
            .get(t.offset..t.offset + t.byte_len)
            .unwrap_or(&[])
    }

    /// Checks one tensor's CRC.
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        let t = self.tensor(name).ok_or_else(|| {
            ConvertError::NotFound(format!("{}: no tensor `{name}`", self.path.display()))
        })?;
        super::checksums::check_crc(&self.path, t, self.tensor_bytes(t))
            .map_err(ConvertError::Corrupt)
    }

    /// Checks every tensor's CRC (in parallel, large tensors in pieces;
    /// reads the whole file) and names every damaged tensor.
    pub fn verify(&self) -> Result<()> {
        self.checksums().verify()
    }

    /// What `verify` reads, detached from this handle so that the check can
    /// run on its own thread while the weights are prepared.
    pub fn checksums(&self) -> Checksums {
        Checksums {
            path: self.path.clone(),
            storage: self.storage.clone(),
            tensors: self.tensors.clone(),
        }
    }

    /// A tensor exactly as stored, borrowing the mapping: quantized ones as
    /// `DType::Quant` blocks (for the quantized kernels), plain ones as `load`.
    pub fn load_stored(&self, name: &str) -> std::result::Result<Tensor, String> {
        let t = self
            .tensor(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        let owner: Arc<dyn ByteOwner> = self.storage.clone();
        Tensor::from_bytes(owner, t.offset, t.byte_len, t.ty.dtype(), t.shape.clone())
            .map_err(|e| format!("{}: tensor `{name}`: {e}", self.path.display()))
    }

    /// A quantized tensor as `load` hands it out: 2-D weights and 3-D expert
    /// stacks as zero-copy blocks for the quantized kernels, unless
    /// `set_dequantize(true)`; other shapes (none today: the converter keeps
    /// 1-D tensors in f32) widened.
    fn load_quantized(&self, t: &TensorEntry, q: QuantType) -> std::result::Result<Tensor, String> {
        if self.keeps_blocks(t) {
            return self.load_stored(&t.name);
        }
        let v = quant::dequantize(q, self.tensor_bytes(t), t.numel())?;
        Tensor::from_f32(v, t.shape.clone()).map_err(|e| e.to_string())
    }

    fn keeps_blocks(&self, t: &TensorEntry) -> bool {
        self.keep_quantized && matches!(t.shape.len(), 2 | 3)
    }

    /// The dtype `load` returns for a tensor.
    fn loaded_dtype(&self, t: &TensorEntry) -> DType {
        match t.ty {
            StoredType::Plain(d) => d,
            StoredType::Quant(q) if self.keeps_blocks(t) => DType::Quant(q),
            StoredType::Quant(_) => DType::F32,
        }
    }
}

/// Checks that the sections fit the file and each other; returns the end
/// of the eager part (header, metadata, table).
fn check_layout(h: &Header, file_len: u64) -> std::result::Result<usize, String> {
    let a = h.alignment;
    if !a.is_power_of_two() || !(MIN_ALIGNMENT..=MAX_ALIGNMENT).contains(&a) {
        return Err(format!(
            "alignment {a} is not a power of two in {MIN_ALIGNMENT}..={MAX_ALIGNMENT}"
        ));
    }
    if h.meta_len > MAX_SECTION || h.table_len > MAX_SECTION {
        return Err(format!(
            "metadata of {} bytes or a table of {} bytes is over the 1 GiB limit",
            h.meta_len, h.table_len
        ));
    }
    // Both are at most 2^30, so no overflow.
    let eager_end = HEADER_LEN as u64 + h.meta_len + h.table_len;
    if eager_end > file_len {
        return Err(format!(
            "metadata and tensor table end at byte {eager_end}, past the end of the {file_len}-byte file (truncated?)"
        ));
    }
    if h.data_offset < eager_end || !h.data_offset.is_multiple_of(a as u64) {
        return Err(format!(
            "data offset {} is before the end of the table ({eager_end}) or not a multiple of the alignment {a}",
            h.data_offset
        ));
    }
    match h.data_offset.checked_add(h.data_len) {
        Some(end) if end == file_len => {}
        Some(end) if end > file_len => {
            return Err(format!(
                "the data section ends at byte {end} but the file has {file_len} bytes (truncated?)"
            ))
        }
        _ => {
            return Err(format!(
                "the file has {file_len} bytes but its data section ends at {}+{}",
                h.data_offset, h.data_len
            ))
        }
    }
    usize::try_from(eager_end).map_err(|_| "the header is too large".to_string())
}

fn parse_metadata(bytes: &[u8]) -> std::result::Result<Map<String, Value>, String> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the metadata is not valid JSON: {e}"))?;
    let Value::Object(m) = v else {
        return Err("the metadata is not a JSON object".into());
    };
    let want = |key: &str, required: bool, ok: fn(&Value) -> bool, what: &str| match m.get(key) {
        None if required => Err(format!("the metadata has no \"{key}\"")),
        Some(v) if !ok(v) => Err(format!("metadata \"{key}\" is not {what}")),
        _ => Ok(()),
    };
    want("config", true, Value::is_object, "an object")?;
    want("recipe", true, Value::is_object, "an object")?;
    want("source", true, Value::is_object, "an object")?;
    want("generation_config", false, Value::is_object, "an object")?;
    want("tokenizer_config", false, Value::is_object, "an object")?;
    want("tokenizer_json", false, Value::is_string, "a string")?;
    want("chat_template", false, Value::is_string, "a string")?;
    Ok(m)
}

fn check_entries(
    h: &Header,
    raw: Vec<layout::RawEntry>,
) -> std::result::Result<Vec<TensorEntry>, String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for e in raw {
        let fail = |m: String| format!("tensor `{}`: {m}", e.name);
        if !seen.insert(e.name.clone()) {
            return Err(fail("appears twice in the table".into()));
        }
        let (ty, requested) = layout::check_entry_type(&e).map_err(fail)?;
        if !e.offset.is_multiple_of(h.alignment as u64) {
            return Err(fail(format!(
                "data offset {} is not a multiple of the alignment {}",
                e.offset, h.alignment
            )));
        }
        if e.offset
            .checked_add(e.byte_len)
            .is_none_or(|end| end > h.data_len)
        {
            return Err(fail(format!(
                "its {} bytes at data offset {} lie outside the {}-byte data section",
                e.byte_len, e.offset, h.data_len
            )));
        }
        // In the file (checked against the file length), so it fits usize.
        let too_big = || fail("too large for this machine".into());
        let shape = e
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| too_big()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        out.push(TensorEntry {
            name: e.name.clone(),
            ty,
            requested,
            shape,
            offset: usize::try_from(h.data_offset + e.offset).map_err(|_| too_big())?,
            byte_len: usize::try_from(e.byte_len).map_err(|_| too_big())?,
            crc32: e.crc32,
        });
    }
    let mut spans: Vec<(usize, usize, &str)> = out
        .iter()
        .filter(|t| t.byte_len > 0)
        .map(|t| (t.offset, t.offset + t.byte_len, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(format!(
                "tensors `{}` and `{}` overlap (bytes {}..{} and {}..{})",
                w[0].2, w[1].2, w[0].0, w[0].1, w[1].0, w[1].1
            ));
        }
    }
    Ok(out)
}

impl WeightSource for MllmFile {
    fn describe(&self) -> String {
        format!(
            "the .mllm file {} ({} tensors, {})",
            self.path.display(),
            self.tensors.len(),
            self.recipe.ty
        )
    }

    fn names(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        let t = self.tensor(name)?;
        Some(TensorInfo {
            dtype: self.loaded_dtype(t),
            shape: t.shape.clone(),
        })
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        let t = self
            .tensor(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        let fail = |m: String| format!("{}: tensor `{name}` ({}): {m}", self.path.display(), t.ty);
        match t.ty {
            StoredType::Plain(d) => {
                let owner: Arc<dyn ByteOwner> = self.storage.clone();
                Tensor::from_bytes(owner, t.offset, t.byte_len, d, t.shape.clone())
                    .map_err(|e| fail(e.to_string()))
            }
            StoredType::Quant(q) => self.load_quantized(t, q).map_err(fail),
        }
    }
}
