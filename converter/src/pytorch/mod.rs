//! PyTorch checkpoints (`torch.save` zip archives: `pytorch_model.bin`,
//! `*.pt`, `*.pth`) as a weight source, without Python. The archive's
//! `data.pkl` is read by a restricted unpickler (pickle.rs) that accepts only
//! what a state dict needs and refuses everything else, so loading a
//! checkpoint never runs code from it. Tensor bytes stay in the mmapped
//! archive (torch stores entries uncompressed and 64-byte aligned), so
//! contiguous f32/f16/bf16/i32 tensors load without copying; strided views,
//! f64 and integer tensors are copied and converted (to f32 / i32).
//!
//! `open` takes a file, or a directory with `pytorch_model.bin` or a sharded
//! `pytorch_model.bin.index.json`.

mod pickle;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};
use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, Tensor};

use crate::error::{ConvertError, Result};
use crate::file_bytes::FileBytes;
pub use pickle::Elem;
use pickle::{TensorRef, Val};

/// Where a storage's bytes are in its archive.
enum StorageData {
    /// Uncompressed: `start..start + len` of the mapping.
    Stored { start: usize, len: usize },
    /// Deflated: zip entry `index`, decompressed on each load.
    Deflated { index: usize, len: usize },
}

struct Archive {
    path: PathBuf,
    size: u64,
    map: Arc<FileBytes>,
    zip: Mutex<zip::ZipArchive<File>>,
    storages: HashMap<String, StorageData>,
}

struct Entry {
    archive: usize,
    key: String,
    elem: Elem,
    /// Offset and strides in elements.
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl Entry {
    fn dtype(&self) -> DType {
        match self.elem {
            Elem::F32 | Elem::F64 => DType::F32,
            Elem::F16 => DType::F16,
            Elem::BF16 => DType::BF16,
            _ => DType::I32,
        }
    }

    fn contiguous(&self) -> bool {
        let mut expect = 1;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d != 1 && s != expect {
                return false;
            }
            expect *= d;
        }
        true
    }
}

pub struct PytorchCheckpoint {
    root: PathBuf,
    archives: Vec<Archive>,
    tensors: BTreeMap<String, Entry>,
    pickle_crc: u32,
}

impl std::fmt::Debug for PytorchCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PytorchCheckpoint")
            .field("root", &self.root)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Largest `data.pkl` read (a state dict's pickle is kilobytes to megabytes).
const MAX_PICKLE: u64 = 1 << 30;
/// Dict entries walked when collecting tensors (shared sub-dicts could
/// otherwise make the walk exponential).
const MAX_WALK: usize = 1 << 24;

impl PytorchCheckpoint {
    pub fn open(path: &Path) -> Result<PytorchCheckpoint> {
        let (root, shards) = shard_paths(path)?;
        let mut ck = PytorchCheckpoint {
            root,
            archives: vec![],
            tensors: BTreeMap::new(),
            pickle_crc: 0,
        };
        let mut crc = crc32fast::Hasher::new();
        for shard in shards {
            ck.add_archive(&shard, &mut crc)?;
        }
        ck.pickle_crc = crc.finalize();
        Ok(ck)
    }

    /// The checkpoint directory (a file's parent).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The archives read, with their sizes.
    pub fn files(&self) -> Vec<(PathBuf, u64)> {
        self.archives
            .iter()
            .map(|a| (a.path.clone(), a.size))
            .collect()
    }

    /// CRC-32 of every archive's `data.pkl`, in shard order: an identity.
    pub fn pickle_crc32(&self) -> u32 {
        self.pickle_crc
    }

    /// The element type of the storage behind a tensor, as saved.
    pub fn saved_elem(&self, name: &str) -> Option<Elem> {
        self.tensors.get(name).map(|e| e.elem)
    }

    fn add_archive(&mut self, path: &Path, crc: &mut crc32fast::Hasher) -> Result<()> {
        let corrupt = |m: String| ConvertError::Corrupt(format!("{}: {m}", path.display()));
        let map = FileBytes::map(path)?;
        let f = File::open(path).map_err(|e| ConvertError::io(path, e))?;
        if !map.bytes().starts_with(b"PK\x03\x04") {
            let legacy = map.bytes().starts_with(&[0x80, 0x02, 0x8a, 0x0a]);
            return Err(ConvertError::Unsupported(format!(
                "{}: {}",
                path.display(),
                if legacy {
                    "a legacy (before PyTorch 1.6) torch.save file; re-save it with a newer torch (zip format)"
                } else {
                    "not a PyTorch zip checkpoint (torch.save output)"
                }
            )));
        }
        let mut zip = zip::ZipArchive::new(f)
            .map_err(|e| corrupt(format!("not a readable zip archive: {e}")))?;
        let names: Vec<String> = (0..zip.len())
            .map(|i| match zip.name_for_index(i) {
                Some(Ok(n)) => n.into_owned(),
                _ => String::new(),
            })
            .collect();
        // torch writes `<archive name>/data.pkl`, one directory deep.
        let pkls: Vec<usize> = (0..names.len())
            .filter(|&i| {
                let n = &names[i];
                n == "data.pkl" || n.ends_with("/data.pkl") && n.matches('/').count() == 1
            })
            .collect();
        let [pkl] = pkls[..] else {
            return Err(corrupt(format!(
                "expected one `<name>/data.pkl` in the archive, found {}",
                pkls.len()
            )));
        };
        let prefix = names[pkl].trim_end_matches("data.pkl").to_string();
        if let Some(i) = zip.index_for_name(&format!("{prefix}byteorder")) {
            let order = read_entry(&mut zip, i, 64).map_err(&corrupt)?;
            if order != b"little" {
                return Err(ConvertError::Unsupported(format!(
                    "{}: a big-endian checkpoint ({:?}); mllm reads little-endian ones",
                    path.display(),
                    String::from_utf8_lossy(&order)
                )));
            }
        }
        let bytes = read_entry(&mut zip, pkl, MAX_PICKLE).map_err(&corrupt)?;
        crc.update(&bytes);
        let root = pickle::unpickle(&bytes).map_err(|e| corrupt(format!("data.pkl: {e}")))?;
        let mut found = vec![];
        collect_tensors(&root, &mut found).map_err(|e| corrupt(format!("data.pkl: {e}")))?;
        if found.is_empty() {
            return Err(corrupt(format!(
                "data.pkl holds a {} without tensors; expected a state dict",
                root_kind(&root)
            )));
        }

        let ai = self.archives.len();
        let mut storages: HashMap<String, StorageData> = HashMap::new();
        for (name, t) in found {
            let key = t.storage.key.clone();
            if !storages.contains_key(&key) {
                let sd = locate_storage(&mut zip, map.bytes(), &prefix, &t).map_err(&corrupt)?;
                storages.insert(key.clone(), sd);
            }
            let entry =
                check_tensor(ai, &t).map_err(|m| corrupt(format!("tensor `{name}`: {m}")))?;
            if self.tensors.insert(name.clone(), entry).is_some() {
                return Err(corrupt(format!("tensor `{name}` appears twice")));
            }
        }
        self.archives.push(Archive {
            path: path.to_path_buf(),
            size: map.bytes().len() as u64,
            map: Arc::new(map),
            zip: Mutex::new(zip),
            storages,
        });
        Ok(())
    }

    /// The bytes of a storage (borrowed from the mapping, or decompressed).
    fn storage_bytes(&self, e: &Entry) -> std::result::Result<StorageBytes<'_>, String> {
        let a = &self.archives[e.archive];
        match a.storages.get(&e.key) {
            Some(StorageData::Stored { start, len }) => Ok(StorageBytes::Mapped(
                *start,
                &a.map.bytes()[*start..*start + *len],
            )),
            Some(StorageData::Deflated { index, len }) => {
                let mut zip = a
                    .zip
                    .lock()
                    .map_err(|_| "the archive lock is poisoned".to_string())?;
                let v = read_entry(&mut zip, *index, *len as u64)?;
                Ok(StorageBytes::Owned(v))
            }
            None => Err(format!("storage `{}` is missing", e.key)),
        }
    }
}

enum StorageBytes<'a> {
    /// Absolute start in the mapping, and the bytes.
    Mapped(usize, &'a [u8]),
    Owned(Vec<u8>),
}

fn root_kind(v: &Val) -> &'static str {
    match v {
        Val::Dict(_) => "dict",
        Val::List(_) => "list",
        Val::Tuple(..) => "tuple",
        Val::Tensor(_) => "single tensor",
        _ => "value",
    }
}

fn shard_paths(path: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    if path.is_file() {
        let root = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        return Ok((root, vec![path.to_path_buf()]));
    }
    if !path.is_dir() {
        return Err(ConvertError::NotFound(format!(
            "{} does not exist",
            path.display()
        )));
    }
    let index = path.join("pytorch_model.bin.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| ConvertError::io(&index, e))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ConvertError::Corrupt(format!("{}: not valid JSON: {e}", index.display()))
        })?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| {
                ConvertError::Corrupt(format!("{}: no \"weight_map\" object", index.display()))
            })?;
        let mut shards = vec![];
        for v in map.values() {
            let f = v
                .as_str()
                .filter(|f| !f.contains("..") && !f.starts_with('/'))
                .ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{}: weight_map values must be file names in the directory",
                        index.display()
                    ))
                })?;
            let p = path.join(f);
            if !shards.contains(&p) {
                shards.push(p);
            }
        }
        shards.sort();
        return Ok((path.to_path_buf(), shards));
    }
    let single = path.join("pytorch_model.bin");
    if single.is_file() {
        return Ok((path.to_path_buf(), vec![single]));
    }
    Err(ConvertError::NotFound(format!(
        "{} has neither pytorch_model.bin nor pytorch_model.bin.index.json",
        path.display()
    )))
}

/// The whole (decompressed) content of entry `i`, at most `max` bytes.
fn read_entry(
    zip: &mut zip::ZipArchive<File>,
    i: usize,
    max: u64,
) -> std::result::Result<Vec<u8>, String> {
    let f = zip.by_index(i).map_err(|e| format!("zip entry {i}: {e}"))?;
    if f.size() > max {
        return Err(format!(
            "zip entry `{}` is {} bytes, more than {max}",
            f.name().unwrap_or_default(),
            f.size()
        ));
    }
    let mut v = Vec::with_capacity(f.size() as usize);
    f.take(max)
        .read_to_end(&mut v)
        .map_err(|e| format!("zip entry {i}: {e}"))?;
    Ok(v)
}

/// Finds `data/{key}` and checks its size is the storage's.
fn locate_storage(
    zip: &mut zip::ZipArchive<File>,
    map: &[u8],
    prefix: &str,
    t: &TensorRef,
) -> std::result::Result<StorageData, String> {
    let s = &t.storage;
    let name = format!("{prefix}data/{}", s.key);
    let index = zip
        .index_for_name(&name)
        .ok_or_else(|| format!("storage `{name}` is missing from the archive"))?;
    let want = s
        .numel
        .checked_mul(s.elem.size() as u64)
        .ok_or("a storage size overflows")?;
    let f = zip
        .by_index_raw(index)
        .map_err(|e| format!("{name}: {e}"))?;
    if f.size() != want {
        return Err(format!(
            "{name} has {} bytes; its {} {:?} elements need {want}",
            f.size(),
            s.numel,
            s.elem
        ));
    }
    let len = usize::try_from(want).map_err(|_| format!("{name} is too large"))?;
    match f.compression() {
        zip::CompressionMethod::Stored => {
            let start = f
                .data_start()
                .ok_or_else(|| format!("{name}: unknown data offset"))?;
            let start = usize::try_from(start)
                .ok()
                .filter(|s| s.checked_add(len).is_some_and(|e| e <= map.len()));
            start
                .map(|start| StorageData::Stored { start, len })
                .ok_or_else(|| format!("{name} lies outside the file"))
        }
        zip::CompressionMethod::Deflated => Ok(StorageData::Deflated { index, len }),
        other => Err(format!(
            "{name} is compressed with {other:?}; mllm reads stored and deflated entries"
        )),
    }
}

/// Checks a tensor's view stays inside its storage.
fn check_tensor(archive: usize, t: &TensorRef) -> std::result::Result<Entry, String> {
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| "a size is too large".to_string());
    let shape = t
        .shape
        .iter()
        .map(|&d| to_usize(d))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let stride = t
        .stride
        .iter()
        .map(|&d| to_usize(d))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if !shape.contains(&0) {
        // The last element's index must lie inside the storage.
        let mut last = t.offset;
        for (&d, &s) in t.shape.iter().zip(&t.stride) {
            last = (d - 1)
                .checked_mul(s)
                .and_then(|x| x.checked_add(last))
                .ok_or("its strides overflow")?;
        }
        if last >= t.storage.numel {
            return Err(format!(
                "its view (offset {}, size {:?}, stride {:?}) reaches element {last} of a storage of {}",
                t.offset, t.shape, t.stride, t.storage.numel
            ));
        }
    }
    Ok(Entry {
        archive,
        key: t.storage.key.clone(),
        elem: t.storage.elem,
        offset: to_usize(t.offset)?,
        shape,
        stride,
    })
}

/// Collects the tensors of a state dict, naming nested dicts' tensors by
/// dotted paths. A training checkpoint's `state_dict` / `model` entry is
/// taken alone when present; values that are not tensors or dicts (step
/// counters, hyper-parameters, lists) are skipped.
fn collect_tensors(
    root: &Val,
    out: &mut Vec<(String, Rc<TensorRef>)>,
) -> std::result::Result<(), String> {
    let mut budget = MAX_WALK;
    if let Val::Dict(d) = root {
        for key in ["state_dict", "model", "module"] {
            let sub = d.items.borrow().iter().find_map(|(k, v)| match (k, v) {
                (Val::Str(k), Val::Dict(_)) if &**k == key => Some(v.clone()),
                _ => None,
            });
            if let Some(sub) = sub {
                walk(&sub, "", out, &mut budget)?;
                if !out.is_empty() {
                    return Ok(());
                }
            }
        }
    }
    walk(root, "", out, &mut budget)
}

fn walk(
    v: &Val,
    prefix: &str,
    out: &mut Vec<(String, Rc<TensorRef>)>,
    budget: &mut usize,
) -> std::result::Result<(), String> {
    match v {
        Val::Tensor(t) if !prefix.is_empty() => out.push((prefix.to_string(), t.clone())),
        Val::Dict(d) => {
            for (k, v) in d.items.borrow().iter() {
                *budget = budget
                    .checked_sub(1)
                    .ok_or("the state dict is too large to walk")?;
                let key = match k {
                    Val::Str(s) => s.to_string(),
                    Val::Int(i) => i.to_string(),
                    _ => continue,
                };
                let name = if prefix.is_empty() {
                    key
                } else {
                    format!("{prefix}.{key}")
                };
                walk(v, &name, out, budget)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Copies a strided view into a dense row-major vector, converting each element.
fn gather<T>(
    bytes: &[u8],
    e: &Entry,
    conv: impl Fn(&[u8]) -> std::result::Result<T, String>,
) -> std::result::Result<Vec<T>, String> {
    let n: usize = e.shape.iter().product();
    let es = e.elem.size();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; e.shape.len()];
    for _ in 0..n {
        let at = e.offset + idx.iter().zip(&e.stride).map(|(i, s)| i * s).sum::<usize>();
        out.push(conv(&bytes[at * es..at * es + es])?);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < e.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

fn int_of(elem: Elem, b: &[u8]) -> std::result::Result<i32, String> {
    Ok(match elem {
        Elem::I64 => {
            let v = i64::from_le_bytes(b.try_into().map_err(|_| "bad element")?);
            i32::try_from(v).map_err(|_| format!("the value {v} does not fit i32"))?
        }
        Elem::I32 => i32::from_le_bytes(b.try_into().map_err(|_| "bad element")?),
        Elem::I16 => i16::from_le_bytes(b.try_into().map_err(|_| "bad element")?) as i32,
        Elem::I8 => b[0] as i8 as i32,
        Elem::U8 | Elem::Bool => b[0] as i32,
        _ => return Err("not an integer storage".into()),
    })
}

impl WeightSource for PytorchCheckpoint {
    fn describe(&self) -> String {
        match self.archives.len() {
            1 => format!("the PyTorch checkpoint {}", self.archives[0].path.display()),
            n => format!(
                "the PyTorch checkpoint {} ({n} shards)",
                self.root.display()
            ),
        }
    }

    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|e| TensorInfo {
            dtype: e.dtype(),
            shape: e.shape.clone(),
        })
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        let e = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        let fail = |m: String| format!("{}: tensor `{name}`: {m}", self.describe());
        let bytes = self.storage_bytes(e).map_err(fail)?;
        let native = matches!(e.elem, Elem::F32 | Elem::F16 | Elem::BF16 | Elem::I32);
        let shape = e.shape.clone();
        let n: usize = shape.iter().product();
        if let (StorageBytes::Mapped(start, _), true, true) = (&bytes, native, e.contiguous()) {
            let owner: Arc<dyn ByteOwner> = self.archives[e.archive].map.clone();
            let es = e.elem.size();
            return Tensor::from_bytes(owner, start + e.offset * es, n * es, e.dtype(), shape)
                .map_err(|x| fail(x.to_string()));
        }
        let b = match &bytes {
            StorageBytes::Mapped(_, b) => b,
            StorageBytes::Owned(v) => v.as_slice(),
        };
        let t = match e.elem {
            Elem::F32 => Tensor::from_f32(
                gather(b, e, |x| Ok(f32::from_le_bytes([x[0], x[1], x[2], x[3]]))).map_err(fail)?,
                shape,
            ),
            Elem::F64 => Tensor::from_f32(
                gather(b, e, |x| {
                    Ok(f64::from_le_bytes(x.try_into().map_err(|_| "bad element")?) as f32)
                })
                .map_err(fail)?,
                shape,
            ),
            Elem::F16 => Tensor::from_f16(
                gather(b, e, |x| Ok(f16::from_le_bytes([x[0], x[1]]))).map_err(fail)?,
                shape,
            ),
            Elem::BF16 => Tensor::from_bf16(
                gather(b, e, |x| Ok(bf16::from_le_bytes([x[0], x[1]]))).map_err(fail)?,
                shape,
            ),
            el => Tensor::from_i32(gather(b, e, |x| int_of(el, x)).map_err(fail)?, shape),
        };
        t.map_err(|x| fail(x.to_string()))
    }
}
