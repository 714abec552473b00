//! The GGUF binary layout (versions 2 and 3, little-endian), parsed
//! defensively: every length and count is checked against the bytes that
//! remain before anything is allocated, nesting and the total number of
//! metadata values are capped, and all offset arithmetic is checked, so a
//! corrupt or hostile file yields an error message, never a panic, an
//! out-of-bounds read or a huge allocation.
//!
//! Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count;
//! metadata entries (string key, u32 value type, value); tensor infos
//! (string name, u32 n_dims, u64 dims innermost first, u32 ggml type, u64
//! offset from the data section); padding to `general.alignment`; data.
//! Strings are a u64 byte length and UTF-8 bytes without a terminator.

use std::collections::{BTreeMap, HashSet};

use super::types::GgmlType;
use super::value::MetaValue;
use super::GgufTensorInfo;

pub(crate) enum ParseError {
    Corrupt(String),
    Unsupported(String),
}

pub(crate) struct Parsed {
    pub version: u32,
    pub meta: BTreeMap<String, MetaValue>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: usize,
    pub data_start: usize,
}

/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Real files nest arrays at most once; deeper nesting is an attack on the stack.
const MAX_ARRAY_DEPTH: u32 = 8;
/// Metadata values in all. The biggest real vocabularies (256k tokens with
/// scores and types, plus merges) stay far below; the cap bounds memory,
/// since a value in memory is ~32 bytes where a u8 on disk is one.
pub(crate) const MAX_META_VALUES: usize = 1 << 23;
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;

const TYPE_ARRAY: u32 = 9;

/// Smallest encoding of a value of type `ty`, or `None` for unknown types.
fn min_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        TYPE_ARRAY => 12,
        _ => return None,
    })
}

fn type_name(ty: u32) -> &'static str {
    const NAMES: [&str; 13] = [
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
        "f64",
    ];
    NAMES.get(ty as usize).copied().unwrap_or("unknown")
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.pos
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        if n > self.left() as u64 {
            return Err(format!(
                "needs {n} bytes at offset {} but the file ends at {}",
                self.pos,
                self.b.len()
            ));
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.bytes().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.bytes().map(u64::from_le_bytes)
    }

    fn string(&mut self) -> Result<&'a [u8], String> {
        let n = self.u64()?;
        self.take(n)
            .map_err(|e| format!("string of {n} bytes: {e}"))
    }

    /// A key or tensor name: must be UTF-8, since callers look it up by text.
    fn name(&mut self) -> Result<String, String> {
        let raw = self.string()?;
        String::from_utf8(raw.to_vec()).map_err(|_| {
            format!(
                "name {:?} is not UTF-8",
                String::from_utf8_lossy(&raw[..raw.len().min(64)])
            )
        })
    }

    fn value(&mut self, ty: u32, depth: u32, budget: &mut usize) -> Result<MetaValue, String> {
        use MetaValue as V;
        Ok(match ty {
            0 => V::U8(u8::from_le_bytes(self.bytes()?)),
            1 => V::I8(i8::from_le_bytes(self.bytes()?)),
            2 => V::U16(u16::from_le_bytes(self.bytes()?)),
            3 => V::I16(i16::from_le_bytes(self.bytes()?)),
            4 => V::U32(self.u32()?),
            5 => V::I32(i32::from_le_bytes(self.bytes()?)),
            6 => V::F32(f32::from_le_bytes(self.bytes()?)),
            // ggml writes 0/1 and reads any non-zero byte as true.
            7 => V::Bool(self.bytes::<1>()?[0] != 0),
            // Values (unlike names) are kept even when not UTF-8: some
            // vocabularies hold raw byte tokens; the bad bytes become U+FFFD.
            8 => V::Str(String::from_utf8_lossy(self.string()?).into_owned()),
            10 => V::U64(self.u64()?),
            11 => V::I64(i64::from_le_bytes(self.bytes()?)),
            12 => V::F64(f64::from_le_bytes(self.bytes()?)),
            TYPE_ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format!("arrays nested more than {MAX_ARRAY_DEPTH} deep"));
                }
                let et = self.u32()?;
                let n = self.u64()?;
                let min =
                    min_size(et).ok_or_else(|| format!("array of unknown value type {et}"))?;
                if n.checked_mul(min).is_none_or(|b| b > self.left() as u64) {
                    return Err(format!(
                        "an array of {n} {} values cannot fit in the {} bytes left",
                        type_name(et),
                        self.left()
                    ));
                }
                let n = n as usize;
                if n > *budget {
                    return Err(format!(
                        "more than {MAX_META_VALUES} metadata values in all"
                    ));
                }
                *budget -= n;
                let mut items = Vec::with_capacity(n);
                for i in 0..n {
                    let v = self
                        .value(et, depth + 1, budget)
                        .map_err(|e| format!("element {i}: {e}"))?;
                    items.push(v);
                }
                V::Array(items)
            }
            other => return Err(format!("unknown value type {other}")),
        })
    }
}

fn corrupt<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError::Corrupt(msg.into()))
}

struct RawTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    offset: u64,
    len: u64,
}

pub(crate) fn parse(b: &[u8]) -> Result<Parsed, ParseError> {
    let mut c = Cursor { b, pos: 0 };
    let short = |e: String| ParseError::Corrupt(format!("header: {e}"));
    let magic: [u8; 4] = c.bytes().map_err(short)?;
    if &magic != b"GGUF" {
        return corrupt(format!(
            "not a GGUF file: it starts with {magic:02x?}, not \"GGUF\""
        ));
    }
    let version = c.u32().map_err(short)?;
    match version {
        2 | 3 => {}
        1 => return Err(ParseError::Unsupported(
            "GGUF version 1 (llama.cpp before August 2023) is not supported; re-convert the model"
                .into(),
        )),
        v if matches!(v.swap_bytes(), 2 | 3) => {
            return Err(ParseError::Unsupported(
                "big-endian GGUF files are not supported".into(),
            ))
        }
        v => {
            return Err(ParseError::Unsupported(format!(
                "GGUF version {v} is not supported (mllm reads versions 2 and 3)"
            )))
        }
    }
    let n_tensors = c.u64().map_err(short)?;
    let n_kv = c.u64().map_err(short)?;
    // A metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes,
    // a tensor info 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    let left = c.left() as u64;
    if n_kv.checked_mul(13).is_none_or(|n| n > left) {
        return corrupt(format!(
            "header claims {n_kv} metadata entries, more than the {left} bytes after it can hold"
        ));
    }
    if n_tensors.checked_mul(24).is_none_or(|n| n > left) {
        return corrupt(format!(
            "header claims {n_tensors} tensors, more than the {left} bytes after it can hold"
        ));
    }

    let mut meta = BTreeMap::new();
    let mut budget = MAX_META_VALUES;
    for i in 0..n_kv {
        let key = c
            .name()
            .map_err(|e| ParseError::Corrupt(format!("metadata entry {i}: key: {e}")))?;
        let value = c
            .u32()
            .and_then(|ty| c.value(ty, 0, &mut budget))
            .map_err(|e| ParseError::Corrupt(format!("metadata `{key}`: {e}")))?;
        if meta.insert(key.clone(), value).is_some() {
            return corrupt(format!("metadata key `{key}` appears twice"));
        }
    }

    let alignment = match meta.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 30 => a,
            _ => {
                return corrupt(format!(
                    "general.alignment is {v:?}; it must be a power of two"
                ))
            }
        },
    };

    let mut raw = Vec::with_capacity(n_tensors as usize);
    let mut seen = HashSet::new();
    for i in 0..n_tensors {
        let t = read_tensor_info(&mut c)
            .map_err(|e| ParseError::Corrupt(format!("tensor info {i}: {e}")))?;
        if !seen.insert(t.name.clone()) {
            return corrupt(format!("tensor `{}` appears twice", t.name));
        }
        raw.push(t);
    }

    // The data section starts at the next multiple of the alignment; a file
    // without tensors may end before it.
    let data_start = (c.pos as u64).next_multiple_of(alignment);
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        if !t.offset.is_multiple_of(alignment) {
            return corrupt(format!(
                "tensor `{}`: data offset {} is not a multiple of the alignment {alignment}",
                t.name, t.offset
            ));
        }
        let start = data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.len));
        let (Some(start), Some(end)) = (start, end) else {
            return corrupt(format!(
                "tensor `{}`: data offset {} overflows",
                t.name, t.offset
            ));
        };
        if end > b.len() as u64 {
            return corrupt(format!(
                "tensor `{}`: its {} bytes of {} data at {start}..{end} lie beyond the end of the {}-byte file",
                t.name,
                t.len,
                t.ty,
                b.len()
            ));
        }
        let shape = t
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                ParseError::Corrupt(format!("tensor `{}`: dimension too large", t.name))
            })?;
        tensors.push(GgufTensorInfo {
            name: t.name,
            shape,
            ggml_type: t.ty,
            offset: start as usize,
            len: t.len as usize,
        });
    }
    Ok(Parsed {
        version,
        meta,
        tensors,
        alignment: alignment as usize,
        data_start: data_start as usize,
    })
}

fn read_tensor_info(c: &mut Cursor) -> Result<RawTensor, String> {
    let name = c.name()?;
    let fail = |e: String| format!("tensor `{name}`: {e}");
    let n_dims = c.u32().map_err(fail)?;
    if n_dims > MAX_DIMS {
        return Err(fail(format!(
            "{n_dims} dimensions; GGUF allows at most {MAX_DIMS}"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64().map_err(fail)?);
    }
    let numel = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| fail(format!("dimensions {dims:?} overflow")))?;
    let id = c.u32().map_err(fail)?;
    let ty = GgmlType::from_id(id).ok_or_else(|| fail(format!("unknown ggml type id {id}")))?;
    let offset = c.u64().map_err(fail)?;
    let ne0 = dims.first().copied().unwrap_or(1);
    let len = ty.byte_len(ne0, numel).map_err(fail)?;
    Ok(RawTensor {
        name,
        dims,
        ty,
        offset,
        len,
    })
}
