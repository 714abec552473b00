//! Running exported static graphs on an NPU (`--backend qnn|ascend`): the
//! host loop that keeps the KV cache in host memory and drives a prefill
//! and a decode graph (`driver`), io.json (`io`), a CPU reference graph
//! that needs no vendor (`reference`, what the tests drive), and here the
//! export directory's layout and the opening of each vendor's graphs
//! (behind the `qnn` / `ascend` cargo features; docs/npu_runtime.md).
//!
//! The export directory (`mllm run --backend qnn|ascend --model DIR`):
//! ```text
//! DIR/decode/io.json    mllm export ... --seq 1 --context C --out DIR/decode   (or DIR/io.json)
//! DIR/prefill/io.json   mllm export ... --seq N --context C --out DIR/prefill  (optional)
//! QNN:    DIR/*.bin, one context binary whose graphs' names contain `decode` and `prefill`,
//!         or DIR/decode/*.bin and DIR/prefill/*.bin, one graph each
//! Ascend: DIR/decode.om and DIR/prefill.om, or DIR/decode/*.om and DIR/prefill/*.om
//! ```

pub mod driver;
pub mod io;
pub mod reference;

use std::path::{Path, PathBuf};

pub use driver::{generate, HostLoop, Stage};
pub use io::GraphIo;

use crate::{Error, Result};

/// The graphs' io.json of an export directory: (prefill, decode).
pub struct ExportDir {
    pub dir: PathBuf,
    pub prefill: Option<(PathBuf, GraphIo)>,
    pub decode: (PathBuf, GraphIo),
}

fn read_io(path: &Path) -> Result<GraphIo> {
    GraphIo::read(path).map_err(|e| Error::load(e.to_string()))
}

impl ExportDir {
    pub fn open(dir: &Path) -> Result<ExportDir> {
        if !dir.is_dir() {
            return Err(Error::load(format!("{} is not a directory; --backend qnn|ascend takes --model EXPORT_DIR, the directory holding the exported graphs (docs/npu_runtime.md)",
                dir.display()
            )));
        }
        let decode_dir = dir.join("decode");
        let decode_io = if decode_dir.join("io.json").is_file() {
            decode_dir
        } else if dir.join("io.json").is_file() {
            dir.to_path_buf()
        } else {
            return Err(Error::load(format!("{} has neither decode/io.json nor io.json; export the decode graph with `mllm export ... --seq 1 --out {}/decode`",
                dir.display(),
                dir.display()
            )));
        };
        let decode = read_io(&decode_io.join("io.json"))?;
        if decode.seq != 1 {
            return Err(Error::load(format!(
                "{} is a graph of {} tokens; the decode graph takes 1 (--seq 1)",
                decode_io.join("io.json").display(),
                decode.seq
            )));
        }
        let prefill_dir = dir.join("prefill");
        let prefill = if prefill_dir.join("io.json").is_file() {
            let io = read_io(&prefill_dir.join("io.json"))?;
            Some((prefill_dir, io))
        } else {
            None
        };
        Ok(ExportDir {
            dir: dir.to_path_buf(),
            prefill,
            decode: (decode_io, decode),
        })
    }

    /// The one file with extension `ext` for graph `role` (`decode`,
    /// `prefill`): `DIR/ROLE.EXT`, else the only `*.EXT` in the graph's
    /// own directory (when it is not DIR itself).
    pub fn artifact(&self, role: &str, ext: &str) -> Result<Option<PathBuf>> {
        let named = self.dir.join(format!("{role}.{ext}"));
        if named.is_file() {
            return Ok(Some(named));
        }
        let sub = match role {
            "decode" => &self.decode.0,
            _ => match &self.prefill {
                Some((d, _)) => d,
                None => return Ok(None),
            },
        };
        if sub == &self.dir {
            return Ok(None);
        }
        only_file(sub, ext)
    }
}

/// The single `*.ext` file in `dir` (None when there is none; an error
/// when there are several).
pub fn only_file(dir: &Path, ext: &str) -> Result<Option<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::load(format!("{}: {e}", dir.display())))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == ext))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::load(format!("{} holds several .{ext} files ({}); keep one, or name them decode.{ext} / prefill.{ext}",
            dir.display(),
            found
                .iter()
                .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Which vendor runs the graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Qnn,
    Ascend,
}

/// The host loop over DIR's graphs on `vendor`'s runtime (device `device`).
pub fn open(dir: &Path, vendor: Vendor, device: usize) -> Result<HostLoop> {
    let export = ExportDir::open(dir)?;
    match vendor {
        Vendor::Qnn => open_qnn(&export, device),
        Vendor::Ascend => open_ascend(&export, device),
    }
}

#[cfg(feature = "qnn")]
fn open_qnn(export: &ExportDir, device: usize) -> Result<HostLoop> {
    vendor_qnn::open(export, device)
}

#[cfg(not(feature = "qnn"))]
fn open_qnn(_: &ExportDir, _: usize) -> Result<HostLoop> {
    Err(Error::unsupported(
        mllm_backends::backend::check_name("qnn")
            .err()
            .unwrap_or_default(),
    ))
}

#[cfg(feature = "ascend")]
fn open_ascend(export: &ExportDir, device: usize) -> Result<HostLoop> {
    vendor_ascend::open(export, device)
}

#[cfg(not(feature = "ascend"))]
fn open_ascend(_: &ExportDir, _: usize) -> Result<HostLoop> {
    Err(Error::unsupported(
        mllm_backends::backend::check_name("ascend")
            .err()
            .unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests;
#[cfg(feature = "ascend")]
mod vendor_ascend;
#[cfg(feature = "qnn")]
mod vendor_qnn;
