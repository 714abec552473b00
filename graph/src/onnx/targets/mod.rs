//! The vendors' export targets, one file each (`qnn`, `ascend`), and what
//! they share: rotary tables as inputs (`rope`), quantization overrides
//! (`overrides`), writing their files. `target.rs` picks among them.

pub mod ascend;
pub mod overrides;
pub mod qnn;
pub mod rope;

use std::path::Path;

pub use rope::RopeTable;

use crate::{GraphError, Result};

/// Writes `dir/file`, replacing it.
pub fn write_file(dir: &Path, file: &str, bytes: &[u8]) -> Result<()> {
    let p = dir.join(file);
    std::fs::write(&p, bytes).map_err(|e| GraphError(format!("cannot write {}: {e}", p.display())))
}
