//! Hugging Face checkpoints: a directory with `model.safetensors`, or shards
//! listed in `model.safetensors.index.json`, or a single `.safetensors`
//! file. Files are mmapped; tensors borrow the mapping without copying.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{ByteOwner, DType, Tensor};
use safetensors::tensor::Dtype as StDtype;

use crate::error::{ConvertError, Result};
use crate::file_bytes::FileBytes;

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Absolute byte range in the file.
    start: usize,
    len: usize,
}

pub struct SafetensorsDir {
    root: PathBuf,
    files: Vec<(PathBuf, Arc<FileBytes>)>,
    tensors: BTreeMap<String, Entry>,
}

fn dtype_of(d: StDtype, name: &str, file: &Path) -> Result<DType> {
    Ok(match d {
        StDtype::F32 => DType::F32,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I32 => DType::I32,
        other => {
            return Err(ConvertError::Unsupported(format!(
                "tensor `{name}` in {} has dtype {other:?}; mllm reads F32, F16, BF16 and I32 safetensors",
                file.display()
            )))
        }
    })
}

/// BERT's `embeddings.position_ids` and `embeddings.token_type_ids`: int64
/// buffers (0, 1, 2, ... and zeros) that transformers before 4.31 saved
/// and that transformers itself never loads. They are left out here (and
/// not counted as unused by the binder).
pub fn is_index_buffer(name: &str) -> bool {
    name.ends_with("embeddings.position_ids") || name.ends_with("embeddings.token_type_ids")
}

impl SafetensorsDir {
    /// Opens a checkpoint directory or a single `.safetensors` file.
    pub fn open(path: &Path) -> Result<SafetensorsDir> {
        let (root, shards) = if path.is_file() {
            (
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                vec![path.to_path_buf()],
            )
        } else if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            let single = path.join("model.safetensors");
            if index.is_file() {
                let text =
                    std::fs::read_to_string(&index).map_err(|e| ConvertError::io(&index, e))?;
                let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    ConvertError::Corrupt(format!("{}: not valid JSON: {e}", index.display()))
                })?;
                let map = json
                    .get("weight_map")
                    .and_then(|m| m.as_object())
                    .ok_or_else(|| {
                        ConvertError::Corrupt(format!(
                            "{}: no \"weight_map\" object",
                            index.display()
                        ))
                    })?;
                let mut shards: Vec<PathBuf> = vec![];
                for v in map.values() {
                    let Some(f) = v.as_str() else {
                        return Err(ConvertError::Corrupt(format!(
                            "{}: weight_map values must be file names",
                            index.display()
                        )));
                    };
                    if f.contains("..") || f.starts_with('/') {
                        return Err(ConvertError::Corrupt(format!(
                            "{}: shard name `{f}` leaves the directory",
                            index.display()
                        )));
                    }
                    let p = path.join(f);
                    if !shards.contains(&p) {
                        shards.push(p);
                    }
                }
                shards.sort();
                (path.to_path_buf(), shards)
            } else if single.is_file() {
                (path.to_path_buf(), vec![single])
            } else {
                return Err(ConvertError::NotFound(format!(
                    "{} has neither model.safetensors nor model.safetensors.index.json",
                    path.display()
                )));
            }
        } else {
            return Err(ConvertError::NotFound(format!(
                "{} does not exist",
                path.display()
            )));
        };
        let mut dir = SafetensorsDir {
            root,
            files: vec![],
            tensors: BTreeMap::new(),
        };
        for shard in shards {
            dir.add_file(&shard)?;
        }
        Ok(dir)
    }

    /// Parses one safetensors file image held in memory; `label` names it
    /// in messages (fuzzing and tests read files without the disk).
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<SafetensorsDir> {
        let path = Path::new(label);
        let mut dir = SafetensorsDir {
            root: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            files: vec![],
            tensors: BTreeMap::new(),
        };
        dir.add_bytes(path, FileBytes::Owned(bytes))?;
        Ok(dir)
    }

    fn add_file(&mut self, path: &Path) -> Result<()> {
        self.add_bytes(path, FileBytes::map(path)?)
    }

    fn add_bytes(&mut self, path: &Path, map: FileBytes) -> Result<()> {
        let (header_len, meta) =
            safetensors::SafeTensors::read_metadata(map.bytes()).map_err(|e| {
                ConvertError::Corrupt(format!(
                    "{}: not a valid safetensors file: {e}",
                    path.display()
                ))
            })?;
        let data_start = 8 + header_len;
        let fi = self.files.len();
        for (name, info) in meta.tensors() {
            if is_index_buffer(&name) && info.dtype == StDtype::I64 {
                continue;
            }
            let dtype = dtype_of(info.dtype, &name, path)?;
            let (s, e) = info.data_offsets;
            let start = data_start
                .checked_add(s)
                .filter(|_| e >= s && data_start + e <= map.bytes().len())
                .ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{}: tensor `{name}` lies outside the file",
                        path.display()
                    ))
                })?;
            let n: usize = info.shape.iter().product();
            if n.checked_mul(dtype.size()) != Some(e - s) {
                return Err(ConvertError::Corrupt(format!(
                    "{}: tensor `{name}` byte length does not match its shape",
                    path.display()
                )));
            }
            if self.tensors.contains_key(&name) {
                return Err(ConvertError::Corrupt(format!(
                    "tensor `{name}` appears in two shards"
                )));
            }
            self.tensors.insert(
                name,
                Entry {
                    file: fi,
                    dtype,
                    shape: info.shape.clone(),
                    start,
                    len: e - s,
                },
            );
        }
        self.files.push((path.to_path_buf(), Arc::new(map)));
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl WeightSource for SafetensorsDir {
    fn describe(&self) -> String {
        match self.files.len() {
            1 => format!("the checkpoint {}", self.files[0].0.display()),
            n => format!("the checkpoint {} ({n} shards)", self.root.display()),
        }
    }

    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors.get(name).map(|e| TensorInfo {
            dtype: e.dtype,
            shape: e.shape.clone(),
        })
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        let e = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        let owner: Arc<dyn ByteOwner> = self.files[e.file].1.clone();
        Tensor::from_bytes(owner, e.start, e.len, e.dtype, e.shape.clone())
            .map_err(|err| err.to_string())
    }
}
